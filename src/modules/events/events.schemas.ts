import Type, { type TProperties } from 'typebox';
import { badRequest } from '../../http/errors.js';
import { AUTHENTICATED_ERRORS, errorResponse, type RouteSchema, successResponse } from '../../http/openapi.js';
import {
  checkBoolean,
  checkDict,
  formParameters,
  jsonBoolean,
  jsonInteger,
  jsonStringList,
  jsonTextKind,
  keyPath,
  MESSAGES,
  optional,
  parseJson,
  queryParameters,
  required,
  requiredLast,
  text,
} from '../../http/params.js';
import { NavigationViewObject } from '../navigation-views/navigation-views.schemas.js';
import {
  CHANNEL_KEY_SCHEMAS,
  INCLUDE_SUBSCRIBERS,
  includeSubscribers,
  SubscriptionObject,
} from '../subscriptions/subscriptions.schemas.js';
import { UserObject } from '../users/users.schemas.js';

// The parameters and documentation of register and the event queue routes (docs/api.md §2.10,
// docs/api.md §3.12–§3.15); see src/http/params.ts and src/http/openapi.ts.

/** Entries of event_types and fetch_event_types (docs/api.md §3.12): bounds the matching of every event. */
const MAX_EVENT_TYPES = 256;
const eventTypeList = jsonStringList(MAX_EVENT_TYPES);

/** Client capabilities register understands; other keys are accepted and ignored. */
const capabilities = jsonTextKind(Type.Record(Type.String(), Type.Boolean()), (raw, name) => {
  const object = checkDict(parseJson(raw, name), name);
  for (const [key, value] of Object.entries(object)) checkBoolean(value, keyPath(name, key));
  return object as Record<string, boolean>;
});

/**
 * idle_queue_timeout: a JSON integer of at least 1, or the JSON string "mobile". Zulip documents
 * the kinds, not the messages; these are its usual templates.
 */
const idleQueueTimeout = jsonTextKind(
  Type.Union([Type.Integer({ minimum: 1 }), Type.Literal('mobile')]),
  (raw, name): number | 'mobile' => {
    // The JSON string, as documented; the bare word too, which a client may well send.
    if (raw === 'mobile') return 'mobile';
    const value = parseJson(raw, name);
    if (value === 'mobile') return value;
    if (typeof value !== 'number' || !Number.isInteger(value)) throw badRequest(MESSAGES.invalid(name));
    if (value < 1) throw badRequest(MESSAGES.tooSmall(name));
    return value;
  },
);

/** An event as delivered: its fields, then the queue's `id`. */
const event = (description: string, fields: TProperties) =>
  Type.Object({ ...fields, id: Type.Integer({ description: 'Consecutive per queue, from 0.' }) }, { description });

const peerEvent = (op: 'peer_add' | 'peer_remove', description: string) =>
  event(description, {
    type: Type.Literal('subscription'),
    op: Type.Literal(op),
    stream_ids: Type.Array(Type.Integer(), { description: 'Ascending.' }),
    user_ids: Type.Array(Type.Integer(), { description: 'Ascending.' }),
  });

const EventObject = Type.Union(
  [
    event('A subscription setting changed.', {
      type: Type.Literal('subscription'),
      op: Type.Literal('update'),
      property: Type.String(),
      value: Type.Union([Type.Boolean(), Type.String()]),
      stream_id: Type.Integer(),
    }),
    event('A navigation view was added.', {
      type: Type.Literal('navigation_view'),
      op: Type.Literal('add'),
      navigation_view: NavigationViewObject,
    }),
    event('A navigation view was updated: `data` holds the changed fields.', {
      type: Type.Literal('navigation_view'),
      op: Type.Literal('update'),
      fragment: Type.String(),
      data: Type.Object({ name: Type.Optional(Type.String()), is_pinned: Type.Optional(Type.Boolean()) }),
    }),
    event('A navigation view was removed.', {
      type: Type.Literal('navigation_view'),
      op: Type.Literal('remove'),
      fragment: Type.String(),
    }),
    event('A user was created (POST /users): their user object, delivery_email null for those who may not see it.', {
      type: Type.Literal('realm_user'),
      op: Type.Literal('add'),
      person: UserObject,
    }),
    event(
      'A user changed: `person` holds user_id and the changed fields (role, full_name, is_active, bot_owner_id, or custom_profile_field).',
      {
        type: Type.Literal('realm_user'),
        op: Type.Literal('update'),
        person: Type.Object({
          user_id: Type.Integer(),
          role: Type.Optional(Type.Integer()),
          full_name: Type.Optional(Type.String()),
          is_active: Type.Optional(Type.Boolean()),
          bot_owner_id: Type.Optional(Type.Integer()),
          custom_profile_field: Type.Optional(
            Type.Object({
              id: Type.Integer(),
              value: Type.Union([Type.String(), Type.Null()], { description: 'null: removed.' }),
              rendered_value: Type.Optional(Type.String({ description: 'Markdown field types, when set.' })),
            }),
          ),
        }),
      },
    ),
    event('Sent to a long poll that waited 45 to 55 s without events.', { type: Type.Literal('heartbeat') }),
    // Membership events (docs/management-api.md, "Subscriptions").
    event('Channels became visible to the user (created, or newly subscribed to one it could not see).', {
      type: Type.Literal('stream'),
      op: Type.Literal('create'),
      streams: Type.Array(Type.Object(CHANNEL_KEY_SCHEMAS)),
    }),
    event('The user, unsubscribed, no longer sees these channels (private ones, or public ones for a guest).', {
      type: Type.Literal('stream'),
      op: Type.Literal('delete'),
      streams: Type.Array(Type.Object({ stream_id: Type.Integer() }), { description: 'Deprecated: the ids of `stream_ids`.' }),
      stream_ids: Type.Array(Type.Integer()),
      for_archiving: Type.Literal(false),
    }),
    event('The user was subscribed to channels.', {
      type: Type.Literal('subscription'),
      op: Type.Literal('add'),
      subscriptions: Type.Array(SubscriptionObject),
    }),
    event('The user was unsubscribed from channels.', {
      type: Type.Literal('subscription'),
      op: Type.Literal('remove'),
      subscriptions: Type.Array(Type.Object({ name: Type.String(), stream_id: Type.Integer() })),
    }),
    peerEvent('peer_add', 'Other users were subscribed to channels whose subscribers the user sees.'),
    peerEvent('peer_remove', 'Other users were unsubscribed from channels whose subscribers the user sees.'),
  ],
  { description: 'An event of the queue.' },
);

const BAD_QUEUE = errorResponse('Unknown, expired or foreign queue (code BAD_EVENT_QUEUE_ID), or another parameter error.', {
  queue_id: Type.Optional(Type.String({ description: 'The queue id (BAD_EVENT_QUEUE_ID only).' })),
  var_name: Type.Optional(Type.String({ description: 'The missing parameter (REQUEST_VARIABLE_MISSING only).' })),
});

const FETCH_NAMES = 'Section names: realm_user, subscription, navigation_views; other names are accepted and produce nothing.';

export const registerSchema = {
  operationId: 'register-queue',
  summary: 'Register an event queue',
  description:
    'Creates an event queue and returns the initial state of the wanted sections, consistent with the ' +
    'queue: a change is either in the state or among the events, never both, never neither.',
  tags: ['events'],
  ...formParameters({
    client_gravatar: optional(jsonBoolean, 'As for GET /users, for the user lists.', true),
    include_subscribers: optional(includeSubscribers, INCLUDE_SUBSCRIBERS, false),
    client_capabilities: optional(
      capabilities,
      'JSON object of booleans. Recognised: notification_settings_null, user_list_incomplete, user_avatar_url_field_optional.',
      {},
    ),
    event_types: optional(eventTypeList, `Event types the queue accepts (default: all). ${FETCH_NAMES}`),
    fetch_event_types: optional(eventTypeList, `Initial state sections to return (default: event_types). ${FETCH_NAMES}`),
    queue_lifespan_secs: optional(
      jsonInteger,
      'Idle lifetime of the queue in seconds; 0 or less means 600; at most 604800. Legacy: idle_queue_timeout wins when both are given.',
      0,
    ),
    idle_queue_timeout: optional(
      idleQueueTimeout,
      'At least how long, in seconds, the queue is kept while the client does not poll (default 600; at most 604800, ' +
        'longer values are capped), or the JSON string "mobile" for 12 hours (feature level 481).',
    ),
  }),
  documentedResponses: {
    200: successResponse('The queue and the initial state.', {
      queue_id: Type.String(),
      idle_queue_timeout_secs: Type.Integer({ description: 'The effective idle lifetime of the queue, in seconds.' }),
      zulip_version: Type.String(),
      zulip_feature_level: Type.Integer(),
      zulip_merge_base: Type.String(),
      event_queue_longpoll_timeout_seconds: Type.Integer(),
      realm_users: Type.Optional(
        Type.Array(UserObject, { description: 'Section realm_user: active users (placeholders for inaccessible ones).' }),
      ),
      realm_non_active_users: Type.Optional(Type.Array(UserObject, { description: 'Section realm_user: deactivated users.' })),
      subscriptions: Type.Optional(Type.Array(SubscriptionObject, { description: 'Section subscription.' })),
      navigation_views: Type.Optional(Type.Array(NavigationViewObject, { description: 'Section navigation_views.' })),
      last_event_id: Type.Integer({ description: 'Always -1.' }),
    }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies RouteSchema;

export const getEventsSchema = {
  operationId: 'get-events',
  summary: 'Get events from a queue (long poll)',
  description:
    'Acknowledges the events up to last_event_id, then answers at once with the remaining events, or, when ' +
    'there are none and dont_block is false, waits: for new events (from any instance), a heartbeat after ' +
    '45–55 s, another poll of the same queue, or a graceful shutdown. A waited answer carries queue_id.',
  tags: ['events'],
  // Both required, but reported missing after every type error, without var_name: queue_id
  // (docs/api.md §3.13 step 2), then last_event_id (step 3).
  ...queryParameters({
    last_event_id: requiredLast(jsonInteger, 'The highest event id the client has processed (-1 for none). Required.', 3),
    queue_id: requiredLast(text, 'The queue, from register. Required.', 2),
    dont_block: optional(jsonBoolean, 'Answer at once even without events.', false),
  }),
  documentedResponses: {
    200: successResponse('The events, by id.', {
      events: Type.Array(EventObject),
      queue_id: Type.Optional(Type.String({ description: 'Present only when the poll waited.' })),
    }),
    ...AUTHENTICATED_ERRORS,
    400: BAD_QUEUE,
  },
} satisfies RouteSchema;

export const deleteQueueSchema = {
  operationId: 'delete-queue',
  summary: 'Delete an event queue',
  description: 'Deletes the queue and its events; a poll waiting on it ends with BAD_EVENT_QUEUE_ID.',
  tags: ['events'],
  ...formParameters({ queue_id: required(text, 'The queue, from register.') }),
  documentedResponses: { 200: successResponse('The queue was deleted.'), ...AUTHENTICATED_ERRORS, 400: BAD_QUEUE },
} satisfies RouteSchema;
