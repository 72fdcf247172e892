import type { FastifyPluginAsync } from 'fastify';
import type { AppDeps } from '../../deps.js';
import { callerOf } from '../../http/auth.js';
import { clientGone } from '../../http/client-gone.js';
import { success } from '../../http/envelope.js';
import { parametersOf } from '../../http/params.js';
import { selectNavigationViews } from './navigation-views.repository.js';
import {
  addNavigationViewSchema,
  listNavigationViewsSchema,
  removeNavigationViewSchema,
  updateNavigationViewSchema,
} from './navigation-views.schemas.js';
import { addNavigationView, changeNavigationView, removeNavigationView } from './navigation-views.service.js';

/** Navigation views of the caller (docs/api.md §3.8–§3.11). */
export const navigationViewRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, transactions, config }) => {
  const writes = { transactions, maxPendingEvents: config.queueMaxPendingEvents };
  app.get('/api/v1/navigation_views', { schema: listNavigationViewsSchema }, async (request) => {
    const caller = callerOf(request);
    const views = await selectNavigationViews(db, caller.realmId, caller.id).execute();
    return success(request, { navigation_views: views });
  });

  app.post('/api/v1/navigation_views', { schema: addNavigationViewSchema }, async (request, reply) => {
    const { fragment, is_pinned, name } = parametersOf(request, addNavigationViewSchema);
    await addNavigationView(writes, callerOf(request), { fragment, is_pinned, name }, clientGone(reply));
    return success(request);
  });

  app.patch('/api/v1/navigation_views/*', { schema: updateNavigationViewSchema }, async (request, reply) => {
    const { fragment, is_pinned, name } = parametersOf(request, updateNavigationViewSchema);
    const changes = { ...(name !== undefined && { name }), ...(is_pinned !== undefined && { is_pinned }) };
    await changeNavigationView(writes, callerOf(request), fragment, changes, clientGone(reply));
    return success(request);
  });

  app.delete('/api/v1/navigation_views/*', { schema: removeNavigationViewSchema }, async (request, reply) => {
    const { fragment } = parametersOf(request, removeNavigationViewSchema);
    await removeNavigationView(writes, callerOf(request), fragment, clientGone(reply));
    return success(request);
  });
};
