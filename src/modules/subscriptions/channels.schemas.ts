import Type from 'typebox';
import { AUTHENTICATED_ERRORS, type RouteSchema, successResponse } from '../../http/openapi.js';
import { idSegment, jsonBoolean, optional, queryParameters, required, text } from '../../http/params.js';
import { CHANNEL_KEY_SCHEMAS } from '../subscriptions/subscriptions.schemas.js';

// The channel reads' parameters and documentation (docs/management-api.md, "Channels"); see
// src/http/params.ts and src/http/openapi.ts.

const { is_archived, stream_weekly_traffic: _traffic, ...shared } = CHANNEL_KEY_SCHEMAS;

/** Zulip's stream dictionary as this server sends it, keys in their order (channels.repository.ts). */
const ChannelObject = Type.Object({
  is_archived,
  ...shared,
  folder_id: Type.Null(),
  stream_post_policy: Type.Literal(1),
  is_announcement_only: Type.Literal(false),
  stream_weekly_traffic: Type.Union([Type.Literal(0), Type.Null()], { description: 'null while the channel is younger than 7 days.' }),
  subscriber_count: Type.Integer(),
  topics_policy: Type.Literal('inherit'),
  is_default: Type.Optional(Type.Literal(false, { description: 'Only with include_default: no default channels here.' })),
});

const flag = (description: string, fallback: boolean) => optional(jsonBoolean, description, fallback);

export const listChannelsSchema = {
  operationId: 'get-streams',
  summary: 'Channels the caller may see',
  description: 'Sorted by name in code-point order.',
  tags: ['channels'],
  ...queryParameters({
    include_public: flag('Every public channel (ignored for guests).', true),
    include_web_public: flag('Every web-public channel.', false),
    include_subscribed: flag("The caller's subscriptions.", true),
    exclude_archived: flag('Leave archived channels out.', true),
    include_all: flag('Every channel the caller has metadata access to; the other include_* are then ignored.', false),
    include_all_active: flag('Deprecated: true means include_all.', false),
    include_default: flag('Add is_default to each channel.', false),
    include_owner_subscribed: flag("Bots only: also their owner's subscriptions.", false),
    include_can_access_content: flag('Every channel the caller has content access to.', false),
  }),
  documentedResponses: { 200: successResponse('The channels.', { streams: Type.Array(ChannelObject) }), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;

export const getChannelSchema = {
  operationId: 'get-stream-by-id',
  summary: 'One channel',
  description: 'Archived channels and channels the caller has no metadata access to answer `Invalid channel ID`.',
  tags: ['channels'],
  ...queryParameters({}, { stream_id: idSegment('The channel id.', Number) }),
  documentedResponses: { 200: successResponse('The channel.', { stream: ChannelObject }), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;

export const channelIdSchema = {
  operationId: 'get-stream-id',
  summary: "A channel's id by its name",
  description: "Names compared ignoring case; `Invalid channel name '<stream>'` when archived or without content access.",
  tags: ['channels'],
  ...queryParameters({ stream: required(text, 'The channel name.') }),
  documentedResponses: { 200: successResponse('Its id.', { stream_id: Type.Integer() }), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;
