import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { AppDeps } from '../../app.js';
import type { AuthLookup } from '../../http/auth.js';
import { success } from '../../http/envelope.js';
import { jsonBoolean, jsonIntegerListOfAtMost } from '../../http/params.js';
import { getUserSchema, listUsersSchema } from './users.schemas.js';
import { getUserForViewer, listUsersForViewer, userByIdAuthLookup } from './users.service.js';

/** Ids of one GET /users?user_ids=…: bounds the work of one request, as every list parameter is. */
export const MAX_USER_IDS = 10_000;
const userIdList = jsonIntegerListOfAtMost(MAX_USER_IDS);

/**
 * Runs before authentication, so it must not throw: a bad include_custom_profile_fields gets no
 * lookup here and its 400 from the handler, after the credentials are checked.
 */
function userLookupForRequest(request: FastifyRequest): AuthLookup<object> | undefined {
  const raw = request.zulipParams.peek('include_custom_profile_fields');
  let withProfileData = false;
  if (raw !== undefined) {
    try {
      withProfileData = jsonBoolean(raw, 'include_custom_profile_fields');
    } catch {
      return undefined;
    }
  }
  return userByIdAuthLookup((request.params as { user: string }).user, withProfileData);
}

/**
 * GET /api/v1/users and GET /api/v1/users/{user_id | email} (spec §3.5–§3.7). Fastify cannot hold
 * two parametric routes at one position, so one route takes every segment except `me` and the
 * service tells ids from emails.
 */
export const userRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, reads, config }) => {
  app.get('/api/v1/users', { schema: listUsersSchema }, async (request) => {
    const params = request.zulipParams;
    const clientGravatar = params.optional('client_gravatar', jsonBoolean, true);
    const includeCustomProfileFields = params.optional('include_custom_profile_fields', jsonBoolean, false);
    const userIds = params.optional('user_ids', userIdList);
    const members = await listUsersForViewer(db, config, request.caller, { clientGravatar, includeCustomProfileFields }, userIds);
    return success(request, { members });
  });

  app.get<{ Params: { user: string } }>(
    '/api/v1/users/:user(^(?!me$).+$)',
    { schema: getUserSchema, config: { authLookup: userLookupForRequest } },
    async (request) => {
      const params = request.zulipParams;
      const clientGravatar = params.optional('client_gravatar', jsonBoolean, true);
      const includeCustomProfileFields = params.optional('include_custom_profile_fields', jsonBoolean, false);
      const options = { clientGravatar, includeCustomProfileFields };
      const user = await getUserForViewer(db, reads, config, request.caller, request.params.user, options, request.authLookupResult);
      return success(request, { user });
    },
  );
};
