import Type from 'typebox';
import { AUTHENTICATED_ERRORS, type RouteSchema, successResponse } from '../../http/openapi.js';
import { formParameters, idSegment, jsonBoolean, nonGuestsOnly, optional, queryParameters, required } from '../../http/params.js';
import { channelNames, channelRequests, MAX_CHANNELS_PER_REQUEST, MAX_PRINCIPALS, principals } from './membership.validation.js';

// The parameters and documentation of subscribing, unsubscribing and the membership reads
// (docs/management-api.md, "Subscriptions"); see src/http/params.ts and src/http/openapi.ts.

const PRINCIPALS = `Users to act on, as user ids or API emails (not mixed; at most ${MAX_PRINCIPALS}). Absent or empty: the caller.`;
const byUser = (description: string) => Type.Record(Type.String(), Type.Array(Type.String()), { description });

export const subscribeSchema = nonGuestsOnly({
  operationId: 'subscribe',
  summary: 'Subscribe users to channels, creating the missing ones',
  description:
    'All or nothing. Guests are refused before anything else. Channels are named case-insensitively; a name ' +
    "that names no channel creates it, with the caller as its creator. Zulip's checks in Zulip's order; see " +
    'docs/management-api.md.',
  tags: ['subscriptions'],
  ...formParameters({
    subscriptions: required(
      channelRequests,
      `The channels, as a JSON list of {"name", "description"?, "color"?} (at most ${MAX_CHANNELS_PER_REQUEST}).`,
    ),
    principals: optional(principals, PRINCIPALS),
    authorization_errors_fatal: optional(
      jsonBoolean,
      'false: private channels the caller cannot access are listed in `unauthorized` instead of failing the request.',
      true,
    ),
    invite_only: optional(jsonBoolean, 'Channels created are private.', false),
    is_web_public: optional(jsonBoolean, 'Channels created are web-public: refused, no organization here enables spectator access.', false),
    history_public_to_subscribers: optional(
      jsonBoolean,
      'For private channels created (default false); public channels always have public history.',
    ),
    send_new_subscription_messages: optional(
      jsonBoolean,
      'Adds `new_subscription_messages_sent` to the answer (no messages exist on this server).',
      true,
    ),
  }),
  documentedResponses: {
    200: successResponse('Who was subscribed where.', {
      subscribed: byUser('Per user id (decimal), the channels newly subscribed to.'),
      already_subscribed: byUser('Per user id (decimal), the channels the user was already subscribed to.'),
      new_subscription_messages_sent: Type.Optional(
        Type.Boolean({ description: 'Only with send_new_subscription_messages: whether at most 100 users were newly subscribed.' }),
      ),
      unauthorized: Type.Optional(Type.Array(Type.String(), { description: 'Only with authorization_errors_fatal=false.' })),
    }),
    ...AUTHENTICATED_ERRORS,
  },
}) satisfies RouteSchema;

export const unsubscribeSchema = {
  operationId: 'unsubscribe',
  summary: 'Unsubscribe users from channels',
  description: 'All or nothing; one entry of `removed` or `not_removed` per user and channel.',
  tags: ['subscriptions'],
  ...formParameters({
    subscriptions: required(channelNames, `Channel names, as a JSON list (at most ${MAX_CHANNELS_PER_REQUEST}).`),
    principals: optional(principals, PRINCIPALS),
  }),
  documentedResponses: {
    200: successResponse('What was removed.', { removed: Type.Array(Type.String()), not_removed: Type.Array(Type.String()) }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies RouteSchema;

// Ids beyond PostgreSQL's range name nothing.
export const subscriptionStatusSchema = {
  operationId: 'get-subscription-status',
  summary: 'Whether a user is subscribed to a channel',
  tags: ['subscriptions'],
  ...queryParameters({}, { user_id: idSegment('The user id.', Number), stream_id: idSegment('The channel id.', Number) }),
  documentedResponses: { 200: successResponse('The status.', { is_subscribed: Type.Boolean() }), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;

export const channelMembersSchema = {
  operationId: 'get-subscribers',
  summary: "A channel's subscribers",
  tags: ['subscriptions'],
  ...queryParameters({}, { stream_id: idSegment('The channel id.', Number) }),
  documentedResponses: {
    200: successResponse('The active subscribers.', {
      subscribers: Type.Array(Type.Integer(), { description: 'User ids of active users, ascending.' }),
    }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies RouteSchema;
