import Type from 'typebox';
import { badRequest } from '../../http/errors.js';
import { AUTHENTICATED_ERRORS, errorResponse, type RouteSchema, successResponse } from '../../http/openapi.js';
import {
  checkBoolean,
  checkDict,
  checkInteger,
  checkList,
  formParameters,
  jsonTextKind,
  keyPath,
  kind,
  MESSAGES,
  optional,
  parseJson,
  idSegment,
  required,
  requireKey,
  text,
} from '../../http/params.js';
import { ROLES } from '../../zulip.js';
import { USER_PATH, UserObject } from '../users/users.schemas.js';
import { parseUserId } from '../users/users.service.js';
import type { ProfileDataEntry } from './users-update.service.js';

// The parameters and documentation of user management (docs/management-api.md "Users").

/** The path's user id: digits only (the router matches nothing else); undefined outside PostgreSQL's range (no such user). */
const USER_ID_PATH = { user_id: idSegment('The user id.', parseUserId) };
/** DELETE's user id, named `user` as GET's and PATCH's: two names for one path would be two paths to OpenAPI tools. */
const USER_PATH_ID = { user: idSegment('The user id (digits only).', parseUserId) };

const LAST_USER = errorResponse('The last user or the last owner (code CANNOT_DEACTIVATE_LAST_USER, with `is_last_owner` and `entity`).', {
  is_last_owner: Type.Boolean(),
  entity: Type.String({ description: '"user" or "organization owner".' }),
});

export const getOwnUserSchema = {
  operationId: 'get-own-user',
  summary: 'Get own user',
  description:
    "The caller's user object at the top level of the answer (not under `user`), with full avatar URLs and, for humans, " +
    '`profile_data`; then the deprecated `max_message_id` (-1: no messages are stored here). Parameters are ignored ' +
    'without `ignored_parameters_unsupported`.',
  tags: ['users'],
  documentedResponses: {
    200: successResponse('The own user.', { ...UserObject.properties, max_message_id: Type.Integer({ description: 'Always -1.' }) }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies RouteSchema;

export const createUserSchema = {
  operationId: 'create-user',
  summary: 'Create a user',
  description:
    'Organization administrators holding the special `can_create_users` permission (granted by the admin command line). ' +
    'A non-administrator is refused before the parameters are read (`Must be an organization administrator`, code ' +
    'UNAUTHORIZED_PRINCIPAL). The new user is a member, with the address visible to everyone.',
  tags: ['users'],
  ...formParameters({
    email: required(text, 'The new address; unique in the organization (deactivated users included), ignoring case.'),
    password: required(text, 'At least 6 characters. Not stored: this server authenticates by API key only.'),
    full_name: required(text, 'At most 100 characters, stripped.'),
  }),
  documentedResponses: {
    200: successResponse('The user was created.', { user_id: Type.Integer() }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies RouteSchema;

const DEACTIVATION_COMMENT_LIMIT = 2000;

/** Plain text of at most `limit` characters (Zulip's check_capped_string); stripped. */
const cappedText = (limit: number) =>
  kind(Type.String({ maxLength: limit }), (raw, name) => {
    if ([...raw].length > limit) throw badRequest(MESSAGES.tooManyCharacters(name, limit));
    return raw.trim();
  });

/** DELETE /users/{user_id}'s `actions` (Zulip's DeactivateUserActions; each false when absent). */
const ACTION_NAMES = [
  'delete_profile',
  'delete_public_channel_messages',
  'delete_private_channel_messages',
  'delete_direct_messages',
] as const;
type DeactivationActions = Record<(typeof ACTION_NAMES)[number], boolean>;

/** Zulip's `Json[DeactivateUserActions]`: an object whose known keys are JSON booleans; other keys are ignored. */
const deactivationActions = jsonTextKind(
  Type.Object(Object.fromEntries(ACTION_NAMES.map((name) => [name, Type.Optional(Type.Boolean())]))),
  (raw, name): DeactivationActions => {
    const value = parseJson(raw, name);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw badRequest(`Invalid ${name}: Input should be a valid dictionary or instance of DeactivateUserActions`);
    }
    const object = value as Record<string, unknown>;
    const actions = {} as DeactivationActions;
    for (const key of ACTION_NAMES) actions[key] = Object.hasOwn(object, key) ? checkBoolean(object[key], keyPath(name, key)) : false;
    return actions;
  },
);

export const deactivateUserSchema = {
  operationId: 'deactivate-user',
  summary: 'Deactivate a user',
  description:
    'Organization administrators; an owner only by an owner; never the only active human owner. Bots are not users ' +
    'here (`No such user`). The user and their active bots are deactivated, their credentials stop working and their ' +
    'event queues end at once.',
  tags: ['users'],
  ...formParameters(
    {
      actions: optional(
        deactivationActions,
        'Zulip feature level 459. Applied to the active bots first, then the user. `delete_profile` renames the user ' +
          '"Deleted user" (a bot "Deactivated bot") and resets an uploaded avatar to the default one, with ' +
          '`realm_user/update` events; the three message deletions are accepted and have nothing to delete (no ' +
          'messages are stored here). Other keys are ignored.',
      ),
      deactivation_notification_comment: optional(cappedText(DEACTIVATION_COMMENT_LIMIT), 'Accepted; no email is sent by this server.'),
    },
    USER_PATH_ID,
  ),
  documentedResponses: { 200: successResponse('The user was deactivated.'), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;

export const deactivateOwnUserSchema = {
  operationId: 'deactivate-own-user',
  summary: 'Deactivate own user',
  description:
    'Any user or bot, except the last active user and the only active human owner. Parameters are ignored without `ignored_parameters_unsupported`.',
  tags: ['users'],
  documentedResponses: { 200: successResponse('Deactivated.'), ...AUTHENTICATED_ERRORS, 400: LAST_USER },
} satisfies RouteSchema;

export const reactivateUserSchema = {
  operationId: 'reactivate-user',
  summary: 'Reactivate a user',
  description:
    'Organization administrators, or the owner of a bot (not a guest). Reactivating an active user changes nothing. ' +
    'Parameters are ignored without `ignored_parameters_unsupported`.',
  tags: ['users'],
  ...formParameters({}, USER_ID_PATH),
  documentedResponses: { 200: successResponse('Reactivated.'), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;

const ROLE_VALUES: ReadonlySet<number> = new Set(Object.values(ROLES));

/** A JSON integer among Zulip's roles. */
const jsonRole = kind(Type.Integer({ enum: [...ROLE_VALUES] }), (raw, name) => {
  const value = checkInteger(parseJson(raw, name), name);
  if (!ROLE_VALUES.has(value)) throw badRequest(`Invalid ${name}: Value error, Not in the list of possible values`);
  return value;
});

/** At most this many entries in one profile_data (bounds one request's work, as every list parameter). */
const MAX_PROFILE_DATA = 1000;

/** profile_data: a JSON list of {"id": integer, "value": string | list of integers | null}. */
const profileData = jsonTextKind(
  Type.Array(
    Type.Object({
      id: Type.Integer(),
      value: Type.Union([Type.String(), Type.Array(Type.Integer()), Type.Null()], { description: 'null, "" or [] removes the value.' }),
    }),
    { maxItems: MAX_PROFILE_DATA },
  ),
  (raw, name): ProfileDataEntry[] => {
    const list = checkList(parseJson(raw, name), name);
    if (list.length > MAX_PROFILE_DATA) throw badRequest(MESSAGES.tooManyItems(name, MAX_PROFILE_DATA));
    return list.map((item, index) => {
      const at = `${name}[${index}]`;
      const entry = checkDict(item, at);
      const id = checkInteger(requireKey(entry, 'id', at), keyPath(at, 'id'));
      const value = requireKey(entry, 'value', at);
      if (value === null || typeof value === 'string') return { id, value };
      const list = checkList(value, keyPath(at, 'value'));
      return { id, value: list.map((userId, position) => checkInteger(userId, `${keyPath(at, 'value')}[${position}]`)) };
    });
  },
);

export const updateUserSchema = {
  operationId: 'update-user',
  summary: 'Update a user',
  description:
    'By id, or by an address as GET /users/{email} resolves it. Organization administrators, or the owner of a bot; ' +
    'only owners grant or remove the owner role, and the only active human owner keeps it. Each change sends a ' +
    'realm_user/update event.',
  tags: ['users'],
  ...formParameters(
    {
      full_name: optional(text, 'Ignored when blank or unchanged.'),
      role: optional(jsonRole, '100 owner, 200 administrator, 300 moderator, 400 member, 600 guest.'),
      profile_data: optional(profileData, 'Custom profile field values to set or remove.'),
      new_email: optional(text, 'Refused: no one holds the can_change_user_emails permission here.'),
    },
    USER_PATH,
  ),
  documentedResponses: { 200: successResponse('Updated.'), ...AUTHENTICATED_ERRORS },
} satisfies RouteSchema;
