import Type from 'typebox';
import { AUTHENTICATED_ERRORS, type RouteSchema, successResponse } from '../../http/openapi.js';
import { USER_OBJECT_PROPERTIES } from './users.serializers.js';
import { jsonBoolean, jsonIntegerList, optional, pathSegment, queryParameters } from '../../http/params.js';

// The user routes' parameters and documentation (docs/api.md §2.11, docs/api.md §3.5–§3.7); see src/http/params.ts
// and src/http/openapi.ts.

/** The user object: its keys are declared with their values (users.serializers.ts). Keys that do not apply are absent. */
export const UserObject = Type.Object(USER_OBJECT_PROPERTIES, { description: 'A user or bot of the organization.' });

/** Ids of one GET /users?user_ids=…: bounds the work of one request, as every list parameter is. */
const MAX_USER_IDS = 10_000;

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
} satisfies RouteSchema;

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
  ...queryParameters(USER_OPTIONS, USER_PATH),
  documentedResponses: {
    200: successResponse('The user.', { user: UserObject }),
    ...AUTHENTICATED_ERRORS,
  },
} satisfies RouteSchema;
