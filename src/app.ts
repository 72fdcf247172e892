import Fastify, { type FastifyError, type FastifyInstance, type FastifyPluginAsync, type FastifyReply } from 'fastify';
import { sql } from 'kysely';
import type { Config } from './config.js';
import type { Database } from './db/database.js';
import { authenticate } from './http/auth.js';
import { isDatabaseUnavailable } from './http/db-errors.js';
import { registerBodyParsers, parameterCollector } from './http/body.js';
import { ApiError, bodyTooLarge, malformedBody, notFound, serviceUnavailable } from './http/errors.js';
import { rejectEmptyPathParams, trackRoutes, unmatchedRouteError } from './http/routing.js';
import { navigationViewRoutes } from './modules/navigation-views/navigation-views.routes.js';
import { serverSettingsRoutes } from './modules/server-settings/server-settings.routes.js';
import { subscriptionRoutes } from './modules/subscriptions/subscriptions.routes.js';
import { userRoutes } from './modules/users/users.routes.js';

export interface AppDeps {
  config: Config;
  db: Database;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** false for the endpoints that need no credentials. */
    auth?: boolean;
  }
}

/** Routes that need an authenticated caller, registered explicitly in one place. */
const AUTHENTICATED_ROUTES: FastifyPluginAsync<AppDeps>[] = [navigationViewRoutes, subscriptionRoutes, userRoutes];

function toApiError(error: FastifyError | Error, config: Config): ApiError | undefined {
  if (error instanceof ApiError) return error;
  if (isDatabaseUnavailable(error)) return serviceUnavailable(config.retryAfterSeconds);
  const code = (error as FastifyError).code;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') return bodyTooLarge();
  // Undecodable paths and over-long path parameters name no resource.
  if (code === 'FST_ERR_BAD_URL' || code === 'FST_ERR_MAX_PARAM_LENGTH') return notFound();
  if (code?.startsWith('FST_ERR_CTP_')) return malformedBody();
  return undefined;
}

export async function buildApp(deps: AppDeps, logger: boolean | object = false): Promise<FastifyInstance> {
  const { config, db } = deps;
  const app = Fastify({
    logger: logger === false ? false : { level: config.logLevel, redact: ['req.headers.authorization'], ...(logger === true ? {} : logger) },
    requestIdHeader: 'x-request-id',
    bodyLimit: config.bodyLimitBytes,
    trustProxy: config.trustProxy,
    routerOptions: { maxParamLength: 8000 },
    // Errors Fastify raises before routing (bad percent-encoding) go through the same envelope.
    frameworkErrors: (error, _request, reply) => {
      const apiError = toApiError(error, config) ?? new ApiError(400, 'Malformed request');
      void (reply as FastifyReply).code(apiError.statusCode).headers(apiError.headers).send(apiError.toBody());
    },
  });

  const routes = trackRoutes(app);
  await registerBodyParsers(app, config.bodyLimitBytes);

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const apiError = toApiError(error, config);
    if (!apiError) {
      request.log.error({ err: error }, 'unhandled error');
      return reply.code(500).send({ result: 'error', msg: 'Internal server error' });
    }
    if (apiError.statusCode === 503) request.log.warn({ err: error }, 'database unavailable');
    return reply.code(apiError.statusCode).headers(apiError.headers).send(apiError.toBody());
  });

  app.setNotFoundHandler((request, reply) => {
    const allowed = routes.allowedMethods(request.url);
    if (request.method === 'OPTIONS' && allowed.length > 0) {
      return reply.code(204).header('allow', allowed.join(', ')).send();
    }
    throw unmatchedRouteError(allowed);
  });

  // Operational endpoints, outside the API: no authentication, no parameters.
  app.get('/health', async () => ({ status: 'ok' }));
  app.get('/ready', async (_request, reply) => {
    try {
      await sql`SELECT 1`.execute(db);
      return { status: 'ready' };
    } catch (error) {
      const unavailable = serviceUnavailable(config.retryAfterSeconds);
      reply.log.warn({ err: error }, 'not ready');
      return reply.code(503).headers(unavailable.headers).send(unavailable.toBody());
    }
  });

  await app.register(async (api) => {
    api.addHook('onRequest', async (request) => rejectEmptyPathParams(request));
    api.addHook('preValidation', parameterCollector(config.bodyLimitBytes));
    api.addHook('preHandler', async (request) => {
      if (request.routeOptions.config.auth !== false) request.caller = await authenticate(db, config, request);
    });
    await api.register(serverSettingsRoutes, deps);
    for (const routes of AUTHENTICATED_ROUTES) await api.register(routes, deps);
  });

  return app;
}
