import type { FastifyPluginAsync } from 'fastify';
import type { AppDeps } from '../../deps.js';
import { type AuthLookup, AuthLookupQuery, callerOf, lookupRowOf } from '../../http/auth.js';
import { clientGone } from '../../http/client-gone.js';
import { success, untypedSuccess } from '../../http/envelope.js';
import { parametersOf, routePath } from '../../http/params.js';
import {
  createUserSchema,
  deactivateOwnUserSchema,
  deactivateUserSchema,
  getOwnUserSchema,
  reactivateUserSchema,
  updateUserSchema,
} from './users-admin.schemas.js';
import {
  createUserByApi,
  deactivateOwnUser,
  deactivateUserByApi,
  getOwnUser,
  reactivateUserByApi,
  requireRealmAdmin,
} from './users-admin.service.js';
import { updateUserByApi } from './users-update.service.js';
import { resolveUserPath } from '../users/users.service.js';

/** The caller's can_create_users permission, read with the authentication statement (POST /users). */
export const canCreateUsersQuery = new AuthLookupQuery<{ can_create_users: boolean }>('caller-can-create-users', (account) =>
  account.select('caller.can_create_users'),
);
const canCreateUsersLookup: AuthLookup<{ can_create_users: boolean }> = { query: canCreateUsersQuery, argument: 0 };

/** User management (docs/management-api.md "Users"). */
export const userAdminRoutes: FastifyPluginAsync<AppDeps> = async (app, deps) => {
  app.get('/api/v1/users/me', { schema: getOwnUserSchema }, async (request) => untypedSuccess(await getOwnUser(deps, callerOf(request))));

  app.post(
    '/api/v1/users',
    {
      schema: createUserSchema,
      config: { authLookup: () => canCreateUsersLookup, beforeParameters: (request) => requireRealmAdmin(callerOf(request)) },
    },
    async (request, reply) => {
      const input = parametersOf(request, createUserSchema);
      const canCreateUsers = lookupRowOf(request, canCreateUsersLookup)?.can_create_users === true;
      const userId = await createUserByApi(deps, callerOf(request), canCreateUsers, input, clientGone(reply));
      return success(request, { user_id: userId });
    },
  );

  // The id paths take digits only (routePath): any other segment is not these routes (404 or 405 from the router).
  app.delete(routePath('/api/v1/users/:user', deactivateUserSchema), { schema: deactivateUserSchema }, async (request, reply) => {
    const { user, actions } = parametersOf(request, deactivateUserSchema);
    await deactivateUserByApi(deps, callerOf(request), user, actions?.delete_profile === true, clientGone(reply));
    return success(request);
  });

  // Every segment but `me`, as GET /users/{user_id | email} (users.routes.ts).
  app.patch(routePath('/api/v1/users/:user', updateUserSchema), { schema: updateUserSchema }, async (request, reply) => {
    const { user, full_name, role, profile_data, new_email } = parametersOf(request, updateUserSchema);
    const caller = callerOf(request);
    const userId = await resolveUserPath(deps.db, deps.shortStatements, deps.config, caller, user);
    await updateUserByApi(deps, caller, userId, { full_name, role, profile_data, new_email }, clientGone(reply));
    return success(request);
  });

  app.delete('/api/v1/users/me', { schema: deactivateOwnUserSchema }, async (request, reply) => {
    await deactivateOwnUser(deps, callerOf(request), clientGone(reply));
    return untypedSuccess();
  });

  app.post(
    routePath('/api/v1/users/:user_id/reactivate', reactivateUserSchema),
    { schema: reactivateUserSchema },
    async (request, reply) => {
      const { user_id } = parametersOf(request, reactivateUserSchema);
      await reactivateUserByApi(deps, callerOf(request), user_id, clientGone(reply));
      return untypedSuccess();
    },
  );
};
