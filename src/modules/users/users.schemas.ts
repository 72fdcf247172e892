import type { FastifySchema } from 'fastify';
import Type from 'typebox';
import { AUTHENTICATED_ERRORS, successResponse } from '../../http/openapi.js';
import { ROLES } from '../../zulip.js';
import { jsonBoolean, jsonIntegerList, optional, pathSegment, queryParameters } from '../../http/params.js';

// The user routes' parameters and documentation (docs/api.md §2.11, docs/api.md §3.5–§3.7); see src/http/params.ts
// and src/http/openapi.ts.

/** Ids of one GET /users?user_ids=…: bounds the work of one request, as every list parameter is. */
const MAX_USER_IDS = 10_000;

/** The user object, keys in the order they are sent. Keys that do not apply are absent. */
export const UserObject = Type.Object(
  {
    email: Type.String({ description: 'API email: the real address, or a dummy one when the caller may not see it.' }),
    user_id: Type.Integer(),
    avatar_version: Type.Integer(),
    is_admin: Type.Boolean(),
    is_owner: Type.Boolean(),
    is_guest: Type.Boolean(),
    role: Type.Integer({
      description: Object.entries(ROLES)
        .map(([name, role]) => `${role} ${name}`)
        .join(', '),
    }),
    is_bot: Type.Boolean(),
    full_name: Type.String(),
    timezone: Type.String({ description: 'IANA time zone; empty when unset.' }),
    is_active: Type.Optional(Type.Boolean({ description: "Absent in register's user lists." })),
    date_joined: Type.String({ description: 'UTC, ISO 8601 to the minute, e.g. 2024-01-02T03:04+00:00.' }),
    delivery_email: Type.Union([Type.String(), Type.Null()], { description: 'The real address, or null when hidden from the caller.' }),
    avatar_url: Type.Union([Type.String(), Type.Null()], { description: 'null for Gravatar users when client_gravatar is true.' }),
    is_imported_stub: Type.Boolean(),
    is_deleted: Type.Optional(Type.Literal(true, { description: 'Present only for permanently deleted users.' })),
    bot_type: Type.Optional(Type.Integer({ description: 'Bots only: 1 generic, 2 incoming webhook, 3 outgoing webhook, 4 embedded.' })),
    bot_owner_id: Type.Optional(Type.Union([Type.Integer(), Type.Null()], { description: 'Bots only.' })),
    profile_data: Type.Optional(
      Type.Record(
        Type.String(),
        Type.Object({
          value: Type.String(),
          rendered_value: Type.Optional(Type.String({ description: 'HTML, for Markdown field types.' })),
        }),
        { description: 'Humans only, when include_custom_profile_fields is true: custom profile field id → value.' },
      ),
    ),
  },
  { description: 'A user or bot of the organization.' },
);

const USER_OPTIONS = {
  client_gravatar: optional(
    jsonBoolean,
    'The client computes Gravatar URLs itself: avatar_url is null for Gravatar users whose address it may see.',
    true,
  ),
  include_custom_profile_fields: optional(jsonBoolean, 'Add profile_data to each human user.', false),
};

export const listUsersSchema = {
  operationId: 'get-users',
  summary: 'Get all users',
  description:
    'Every user of the organization (active, deactivated, bots), or those of user_ids, by ascending ' +
    'user_id. A user the caller cannot access (a guest in a restricted organization) is left out ' +
    '(feature level 437).',
  tags: ['users'],
  ...queryParameters({
    ...USER_OPTIONS,
    user_ids: optional(
      jsonIntegerList(MAX_USER_IDS),
      'Only these users (feature level 384); ids of no user of the organization are left out. Absent: every user.',
    ),
  }),
  documentedResponses: {
    200: successResponse('The members.', { members: Type.Array(UserObject) }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies FastifySchema;

/** The path's user: a user id or an email address, any segment but `me` (GET /users/me is another route). */
export const USER_PATH = {
  user: pathSegment(Type.String({ pattern: '^(?!me$).+$', description: 'A user id, or an email address.' }), (segment) => segment),
};

export const getUserSchema = {
  operationId: 'get-user',
  summary: 'Get a user by id or email',
  description:
    'The path segment is a user id (digits) or an email address: a real address the caller may see, or a ' +
    'dummy `user<id>@<domain>` address. Unknown users and hidden addresses answer 400 `No such user`; a user ' +
    'the caller cannot access answers 400 `Insufficient permission`.',
  tags: ['users'],
  ...queryParameters(USER_OPTIONS, {
    ...USER_PATH,
  }),
  documentedResponses: {
    200: successResponse('The user.', { user: UserObject }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies FastifySchema;
