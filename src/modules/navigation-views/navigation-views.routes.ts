import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { AppDeps } from '../../app.js';
import { clientGone } from '../../http/client-gone.js';
import { success } from '../../http/envelope.js';
import { badRequest } from '../../http/errors.js';
import { jsonBoolean, trimmedString } from '../../http/params.js';
import { isStorableText } from '../../lib/text.js';
import { selectNavigationViews } from './navigation-views.repository.js';
import {
  addNavigationViewSchema,
  listNavigationViewsSchema,
  removeNavigationViewSchema,
  updateNavigationViewSchema,
} from './navigation-views.schemas.js';
import { addNavigationView, changeNavigationView, removeNavigationView } from './navigation-views.service.js';

const withinLimit = trimmedString(500);

/** A trimmed, non-blank fragment or name of at most 500 characters that PostgreSQL text can store. */
function viewText(raw: string, name: string): string {
  const value = withinLimit(raw, name);
  if (!isStorableText(value)) throw badRequest(`${name} cannot contain NUL characters`);
  return value;
}

/** The path's fragment: the router's percent-decoded rest of the path, used verbatim (spec §3.10). */
const pathFragment = (request: FastifyRequest): string => (request.params as { '*': string })['*'];

/** Navigation views of the caller (spec §3.8–§3.11). */
export const navigationViewRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, transactions }) => {
  app.get('/api/v1/navigation_views', { schema: listNavigationViewsSchema }, async (request) => {
    const { caller } = request;
    const views = await selectNavigationViews(db, caller.realmId, caller.id).execute();
    return success(request, { navigation_views: views });
  });

  app.post('/api/v1/navigation_views', { schema: addNavigationViewSchema }, async (request, reply) => {
    const params = request.zulipParams;
    const fragment = params.required('fragment', viewText);
    const isPinned = params.required('is_pinned', jsonBoolean);
    const name = params.optional('name', viewText);
    await addNavigationView(transactions, request.caller, { fragment, is_pinned: isPinned, name }, clientGone(reply));
    return success(request);
  });

  app.patch('/api/v1/navigation_views/*', { schema: updateNavigationViewSchema }, async (request, reply) => {
    const params = request.zulipParams;
    const isPinned = params.optional('is_pinned', jsonBoolean);
    const name = params.optional('name', viewText);
    const changes = { ...(name !== undefined && { name }), ...(isPinned !== undefined && { is_pinned: isPinned }) };
    await changeNavigationView(transactions, request.caller, pathFragment(request), changes, clientGone(reply));
    return success(request);
  });

  app.delete('/api/v1/navigation_views/*', { schema: removeNavigationViewSchema }, async (request, reply) => {
    await removeNavigationView(transactions, request.caller, pathFragment(request), clientGone(reply));
    return success(request);
  });
};
