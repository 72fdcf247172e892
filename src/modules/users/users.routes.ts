import type { FastifyPluginAsync } from 'fastify';
import type { AppDeps } from '../../app.js';
import { success } from '../../http/envelope.js';
import { jsonBoolean } from '../../http/params.js';
import { getUserSchema, listUsersSchema } from './users.schemas.js';
import { getUserForViewer, listUsersForViewer } from './users.service.js';

/**
 * GET /api/v1/users and GET /api/v1/users/{user_id | email} (spec §3.5–§3.7). Fastify cannot hold
 * two parametric routes at one position, so one route takes every segment except `me` and the
 * service tells ids from emails.
 */
export const userRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, config }) => {
  app.get('/api/v1/users', { schema: listUsersSchema }, async (request) => {
    const params = request.zulipParams;
    const clientGravatar = params.optional('client_gravatar', jsonBoolean, true);
    const includeCustomProfileFields = params.optional('include_custom_profile_fields', jsonBoolean, false);
    const members = await listUsersForViewer(db, config, request.caller, { clientGravatar, includeCustomProfileFields });
    return success(request, { members });
  });

  app.get<{ Params: { user: string } }>('/api/v1/users/:user(^(?!me$).+$)', { schema: getUserSchema }, async (request) => {
    const params = request.zulipParams;
    const clientGravatar = params.optional('client_gravatar', jsonBoolean, true);
    const includeCustomProfileFields = params.optional('include_custom_profile_fields', jsonBoolean, false);
    const user = await getUserForViewer(db, config, request.caller, request.params.user, {
      clientGravatar,
      includeCustomProfileFields,
    });
    return success(request, { user });
  });
};
