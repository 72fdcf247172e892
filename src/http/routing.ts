import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, RouteOptions } from 'fastify';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import { methodNotAllowed, notFound } from './errors.js';

/**
 * The router's matching, for the routes and for trackRoutes' copy: repeated slashes collapse to one
 * (`//api/v1/users/5` is `/api/v1/users/5`), as nginx in front of Zulip does by default (zulip-js
 * with a server URL ending in `/` sends `//api/v1/...`); a trailing slash still matches nothing.
 */
export const ROUTER_OPTIONS = { maxParamLength: 8000, ignoreDuplicateSlashes: true } as const;

/** The methods the API's routes answer (OPTIONS aside, answered for every route). */
const ROUTED_METHODS: HTTPMethod[] = ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT'];

/**
 * Knows which methods each registered path answers, so that an unmatched request can be told
 * apart as 404 (no such path) or 405 (path exists, other method), and OPTIONS can list methods.
 */
export function trackRoutes(app: FastifyInstance): { allowedMethods(url: string): string[] } {
  const router = FindMyWay(ROUTER_OPTIONS);
  const noop = () => undefined;
  app.addHook('onRoute', (route: RouteOptions) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (method !== 'OPTIONS') router.on(method.toUpperCase() as HTTPMethod, route.url, noop);
    }
  });
  return {
    allowedMethods(url: string): string[] {
      const path = url.split('?')[0] ?? url;
      const methods = new Set<string>();
      for (const method of ROUTED_METHODS) {
        const match = router.find(method, path);
        if (match && Object.values(match.params).every((value) => value !== '')) methods.add(method);
      }
      if (methods.has('GET')) methods.add('HEAD');
      return [...methods].sort();
    },
  };
}

/** onRequest: empty path parameters (`/navigation_views/`) name nothing. A callback hook (see echoRequestId). */
export function rejectEmptyPathParams(request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void {
  const params = request.params as Record<string, string> | undefined;
  for (const name in params) if (params[name] === '') return done(notFound());
  done();
}

export function unmatchedRouteError(allowed: string[]) {
  return allowed.length === 0 ? notFound() : methodNotAllowed(allowed);
}
