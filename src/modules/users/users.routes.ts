import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { AppDeps } from '../../deps.js';
import { type AuthLookup, callerOf, lookupRowOf } from '../../http/auth.js';
import { sendSuccessInSlices, success } from '../../http/envelope.js';
import { parametersOf, peekParameter, routePath } from '../../http/params.js';
import { largeReads } from '../../lib/keyed-queue.js';
import { getUserSchema, listUsersSchema } from './users.schemas.js';
import { getUserForViewer, listUsersForViewer, userByIdAuthLookup } from './users.service.js';

/** Runs before authentication, so it must not throw: a bad parameter gets its 400 from the decoder later. */
function userLookupForRequest(request: FastifyRequest): AuthLookup<object> | undefined {
  const withProfileData = peekParameter(request, getUserSchema, 'include_custom_profile_fields');
  if (withProfileData === undefined) return undefined;
  return userByIdAuthLookup(peekParameter(request, getUserSchema, 'user') ?? '', withProfileData);
}

/** GET /users and /users/{user_id | email} (docs/api.md §3.5–§3.7): one parametric route, the service tells ids from emails. */
export const userRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, shortStatements, config }) => {
  app.get('/api/v1/users', { schema: listUsersSchema }, async (request, reply) => {
    const { client_gravatar, include_custom_profile_fields, user_ids } = parametersOf(request, listUsersSchema);
    const options = { clientGravatar: client_gravatar, includeCustomProfileFields: include_custom_profile_fields };
    const caller = callerOf(request);
    // A whole organization's users: in the large reads' queue, keyed by the caller (src/lib/keyed-queue.ts).
    return largeReads.run(caller.id, async () =>
      sendSuccessInSlices(request, reply, { members: await listUsersForViewer(db, config, caller, options, user_ids) }),
    );
  });

  app.get(
    routePath('/api/v1/users/:user', getUserSchema),
    { schema: getUserSchema, config: { authLookup: userLookupForRequest } },
    async (request) => {
      const { client_gravatar, include_custom_profile_fields, user } = parametersOf(request, getUserSchema);
      const options = { clientGravatar: client_gravatar, includeCustomProfileFields: include_custom_profile_fields };
      const prefetched = lookupRowOf(request, userByIdAuthLookup(user, include_custom_profile_fields));
      return success(request, { user: await getUserForViewer(db, shortStatements, config, callerOf(request), user, options, prefetched) });
    },
  );
};
