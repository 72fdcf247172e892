import Type, { type TSchema } from 'typebox';
import { AUTHENTICATED_ERRORS, type RouteSchema, successResponse } from '../../http/openapi.js';
import {
  checkBoolean,
  formParameters,
  jsonList,
  kind,
  optional,
  parseJson,
  idSegment,
  queryParameters,
  required,
  text,
} from '../../http/params.js';
import { SETTING_PROPERTIES, sentValueSchema, settingValueSchema } from './settings.js';
import { type ChannelKey, isChannelKey, SUBSCRIPTION_KEYS } from './subscriptions.serializers.js';
import { checkBulkEntries, parseSingleValue } from './subscriptions.validation.js';

// The subscription routes' parameters and documentation (docs/api.md §2.8, docs/api.md §2.12, docs/api.md §3.2–§3.4); see
// src/http/params.ts and src/http/openapi.ts.

/** Entries of one bulk update (docs/api.md §3.2): bounds the work and the rows one request can cause. */
const MAX_SUBSCRIPTION_CHANGES = 10_000;

/**
 * include_subscribers: a JSON boolean, or `partial` (feature level 412), which lets the server send
 * only part of large channels' subscribers; this server sends every channel's whole list, as Zulip
 * itself does for channels under 250 subscribers.
 */
export const includeSubscribers = kind(Type.Union([Type.Boolean(), Type.Literal('partial')]), (raw, name) => {
  // The word as Zulip's documentation lists it, and as a JSON string, which a client may send.
  if (raw === 'partial') return true;
  const value = parseJson(raw, name);
  return value === 'partial' || checkBoolean(value, name);
});
export const INCLUDE_SUBSCRIBERS =
  'Add subscribers to each subscription; `partial` (feature level 412) is accepted and answers the whole lists.';

const PROPERTY_DESCRIPTION = `One of: ${SETTING_PROPERTIES.join(', ')}.`;

/**
 * How the subscription object's keys that are not settings are documented (the settings:
 * settings.ts); they are also the whole channel object of stream events (membership.events.ts).
 */
export const CHANNEL_KEY_SCHEMAS = {
  is_archived: Type.Boolean(),
  creator_id: Type.Union([Type.Integer(), Type.Null()]),
  date_created: Type.Integer({ description: 'Unix seconds.' }),
  description: Type.String({ description: 'Markdown source.' }),
  first_message_id: Type.Null(),
  history_public_to_subscribers: Type.Boolean(),
  invite_only: Type.Boolean(),
  is_web_public: Type.Boolean(),
  message_retention_days: Type.Union([Type.Integer(), Type.Null()]),
  name: Type.String(),
  rendered_description: Type.String({ description: 'HTML.' }),
  stream_id: Type.Integer(),
  stream_weekly_traffic: Type.Null(),
} satisfies Record<ChannelKey, TSchema>;

/** The subscription object, keys in the order they are sent. */
export const SubscriptionObject = Type.Object(
  {
    ...Object.fromEntries(SUBSCRIPTION_KEYS.map((key) => [key, isChannelKey(key) ? CHANNEL_KEY_SCHEMAS[key] : sentValueSchema(key)])),
    subscribers: Type.Optional(
      Type.Array(Type.Integer(), { description: 'Only with include_subscribers: active subscribers, ascending.' }),
    ),
  },
  { description: "One of the caller's subscriptions." },
);

export const listSubscriptionsSchema = {
  operationId: 'get-subscriptions',
  summary: "Get the caller's subscriptions",
  description: 'Active subscriptions to non-archived channels, sorted by channel name.',
  tags: ['subscriptions'],
  ...queryParameters({ include_subscribers: optional(includeSubscribers, INCLUDE_SUBSCRIBERS, false) }),
  documentedResponses: {
    200: successResponse('The subscriptions.', { subscriptions: Type.Array(SubscriptionObject) }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies RouteSchema;

const SettingChange = Type.Object({
  stream_id: Type.Integer(),
  property: Type.String({ description: PROPERTY_DESCRIPTION }),
  value: settingValueSchema('A hex colour for color, a boolean otherwise.'),
});

/**
 * The bulk changes: a JSON list, then checks a–e of each entry up to the first that fails, whose
 * error is kept for later (checkBulkEntries): a channel failure of an earlier entry wins over it.
 */
const subscriptionData = (() => {
  const list = jsonList(SettingChange, MAX_SUBSCRIPTION_CHANGES);
  return kind(list.schema, (raw, name) => checkBulkEntries(list.decode(raw, name)));
})();

export const updateSettingsSchema = {
  operationId: 'update-subscription-settings',
  summary: 'Update subscription settings in bulk',
  description:
    'All or nothing: every entry is checked before anything is written; the error of the lowest-index ' +
    'failing entry is reported. Entries apply in order, each with its subscription update events.',
  tags: ['subscriptions'],
  ...formParameters({ subscription_data: required(subscriptionData, 'The changes, in order, as a JSON list.') }),
  documentedResponses: { 200: successResponse('Every change was applied.'), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;

export const updateSettingSchema = {
  operationId: 'update-subscription-setting',
  summary: 'Update one subscription setting',
  description: 'PATCH and POST behave identically; the change applies as one entry of the bulk update.',
  tags: ['subscriptions'],
  ...formParameters(
    {
      property: required(text, PROPERTY_DESCRIPTION),
      value: required(
        kind(Type.Union([Type.Boolean(), Type.String()]), parseSingleValue),
        '`true` or `false` (JSON) is a boolean; any other text is taken as a string, e.g. `#ff0000`.',
      ),
    },
    // Values beyond the id range simply match no channel.
    { stream_id: idSegment('The channel id (digits only).', Number) },
  ),
  documentedResponses: { 200: successResponse('The change was applied.'), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;

/** The same endpoint under POST (an addition of this server); operation ids are unique per document. */
export const updateSettingByPostSchema = {
  ...updateSettingSchema,
  operationId: 'update-subscription-setting-post',
} satisfies RouteSchema;
