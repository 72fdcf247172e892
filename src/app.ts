import compress from '@fastify/compress';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyPluginAsync, type FastifyReply } from 'fastify';
import { sql } from 'kysely';
import { PipelinedConnections } from './db/pipelined-connections.js';
import { ClientGone } from './db/transactions.js';
import type { AppDeps } from './deps.js';
import { authenticationHooks } from './http/auth.js';
import { AccountBatches } from './http/auth.repository.js';
import { zulipClientErrorHandler } from './http/client-errors.js';
import { CLIENT_LEFT, clientLeft, watchDeparture } from './http/client-gone.js';
import { BODY_METHODS, bodyDeadline, largeBodyTurns, limitFormFields, registerBodyParsers, parameterCollector } from './http/body.js';
import { bodyRefusalOf, malformedRequest, serviceUnavailable, toApiError } from './http/errors.js';
import './http/fastify-types.js';
import { documentationOnly, registerOpenApi } from './http/openapi.js';
import { parameterDecoder } from './http/params.js';
import { rejectEmptyPathParams, ROUTER_OPTIONS, trackRoutes, unmatchedRouteError } from './http/routing.js';
import { echoRequestId, logClientLeaving, RequestLog, RequestLogger, requestId } from './http/request-log.js';
import { refusedLimit } from './http/rate-limit.js';
import { RequestMemory } from './http/request-memory.js';
import { closeConnectionsOnShutdown } from './http/shutdown.js';
import { Metrics } from './metrics/metrics.js';
import { eventRoutes } from './modules/events/events.routes.js';
import { Sweeper } from './modules/maintenance/sweeper.js';
import { navigationViewRoutes } from './modules/navigation-views/navigation-views.routes.js';
import { serverSettingsRoutes } from './modules/server-settings/server-settings.routes.js';
import { subscriptionRoutes } from './modules/subscriptions/subscriptions.routes.js';
import { userAdminRoutes } from './modules/user-management/users-admin.routes.js';
import { userRoutes } from './modules/users/users.routes.js';

/**
 * Wherever a log line could carry request headers (Fastify's request serializer, a plugin logging
 * its options, such as @fastify/multipart's busboy options at trace), the credentials are
 * replaced. Exact paths, not a scan of every line: pino's redaction is compiled once, and a
 * wildcard (`*.headers.authorization`) doubled the cost of every request's log line.
 */
const REDACTED_PATHS = [
  'authorization',
  'headers.authorization',
  'req.headers.authorization',
  'request.headers.authorization',
  'busboyOptions.headers.authorization',
];

/** Routes that need an authenticated caller, registered explicitly in one place. */
const AUTHENTICATED_ROUTES: FastifyPluginAsync<AppDeps>[] = [
  eventRoutes,
  navigationViewRoutes,
  subscriptionRoutes,
  userRoutes,
  userAdminRoutes,
];

export async function buildApp(deps: AppDeps, logger: boolean | object = false): Promise<FastifyInstance> {
  const { config, db, shortStatements } = deps;
  const loggerOptions = {
    level: config.logLevel,
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    ...(logger === true ? {} : logger),
  };
  // A silent logger still costs a child logger and a log line per request: no logger logs nothing for free.
  const logging = logger !== false && loggerOptions.level !== 'silent';
  const app = Fastify({
    logger: logging ? loggerOptions : false,
    // One JSON line per request (RequestLog); the id comes from the load balancer's X-Request-Id.
    logController: new RequestLog(logging),
    childLoggerFactory: (parent, bindings, options) => new RequestLogger(parent, bindings, options),
    genReqId: requestId,
    bodyLimit: config.bodyLimitBytes,
    trustProxy: config.trustProxy,
    routerOptions: ROUTER_OPTIONS,
    // Requests arriving while closing get the Zulip 503 envelope instead (src/http/shutdown.ts).
    return503OnClosing: false,
    clientErrorHandler: zulipClientErrorHandler,
    // Slow or stuck clients are cut off (the settings' docs say how). Node checks these deadlines
    // every connectionsCheckingInterval (30 s by default): once a second keeps the cut-off close.
    requestTimeout: config.requestTimeoutSeconds * 1000,
    connectionTimeout: config.connectionTimeoutSeconds * 1000,
    keepAliveTimeout: config.keepAliveTimeoutSeconds * 1000,
    // requestTimeout here too: Node checks headersTimeout against it (300 s by default) when the server is made.
    http: {
      headersTimeout: config.requestTimeoutSeconds * 1000,
      requestTimeout: config.requestTimeoutSeconds * 1000,
      connectionsCheckingInterval: 1000,
    },
    // Errors Fastify raises before routing (bad percent-encoding) go through the same envelope.
    frameworkErrors: (error, _request, reply) => {
      const apiError = toApiError(error, config.retryAfterSeconds) ?? malformedRequest();
      void (reply as FastifyReply).code(apiError.statusCode).headers(apiError.headers).send(apiError.toBody());
    },
  });

  const routes = trackRoutes(app);
  // Metrics only when they can be scraped (METRICS_PORT): off, they cost nothing at all.
  const { pool, writes } = deps.transactions.options;
  const shortStatementLanes = shortStatements instanceof PipelinedConnections ? shortStatements : undefined;
  const metrics =
    config.metricsPort === undefined
      ? undefined
      : new Metrics({
          pool,
          // One observer for the whole database layer: the write connections carry it.
          observer: writes.observer,
          lanes: {
            ...(shortStatementLanes && { shortStatements: () => shortStatementLanes.inFlightByLane() }),
            writes: () => writes.inFlightByLane(),
          },
        });
  app.decorate('metrics', metrics);
  if (metrics) {
    app.addHook('onRequest', metrics.requestStarted);
    app.addHook('onResponse', metrics.requestAnswered);
  }
  app.addHook('onRequest', echoRequestId);
  // Smaller answers than the threshold cost more to compress than they save. gzip only: brotli at
  // the plugin's quality 4 saved little for much more CPU on a large register (bench/RESULTS.md).
  // Request bodies are never decompressed: the body limit counts what arrives. HEAD gets the
  // uncompressed representation's headers. Before every route: it hooks the routes declared after it.
  await app.register(compress, { encodings: ['gzip'], threshold: config.compressionThresholdBytes, globalDecompression: false });
  closeConnectionsOnShutdown(app, config.retryAfterSeconds);
  await registerOpenApi(app, config);
  await registerBodyParsers(app, config.bodyLimitBytes);

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const apiError = toApiError(error, config.retryAfterSeconds);
    // Whatever failed (ClientGone, a cancelled statement), nobody is there to read it:
    // logClientLeaving logged it. A failure of our own is still logged as one.
    if (clientLeft(reply)) {
      if (!apiError && !(error instanceof ClientGone)) request.log.error({ err: error }, 'unhandled error (its client had left)');
      return reply.code(CLIENT_LEFT).send();
    }
    if (!apiError) {
      request.log.error({ err: error }, 'unhandled error');
      return reply.code(500).send({ result: 'error', msg: 'Internal server error' });
    }
    // Fastify refuses a QUERY without Content-Type before any handler, even where no route answers QUERY: there, the route's answer (404 or 405).
    const refusal =
      request.is404 && error.code === 'FST_ERR_ROUTE_MISSING_CONTENT_TYPE'
        ? unmatchedRouteError(routes.allowedMethods(request.url))
        : apiError;
    metrics?.errorAnswered(error, refusedLimit(refusal), bodyRefusalOf(refusal));
    if (refusal.statusCode === 503) request.log.warn({ err: error }, 'database unavailable');
    return reply.code(refusal.statusCode).headers(refusal.headers).send(refusal.toBody());
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
    const notReady = () => {
      const unavailable = serviceUnavailable(config.retryAfterSeconds);
      return reply.code(503).headers(unavailable.headers).send(unavailable.toBody());
    };
    // Draining before a shutdown: not ready, whatever the database says (src/http/drain.ts).
    if (deps.drain?.draining) return notReady();
    try {
      await sql`SELECT 1`.execute(db);
      return { status: 'ready' };
    } catch (error) {
      reply.log.warn({ err: error }, 'not ready');
      return notReady();
    }
  });

  const sweeper = new Sweeper({ db, config, log: app.log, metrics });
  app.addHook('onReady', async () => sweeper.start());
  app.addHook('onClose', () => sweeper.close());

  const requestMemory = new RequestMemory(config);
  const authentication = authenticationHooks(new AccountBatches(shortStatements, metrics && ((size) => metrics.authBatch(size))), config);
  const timeBody = bodyDeadline(config.bodyTimeoutSeconds);
  const turns = largeBodyTurns();
  await app.register(async (api) => {
    // Route schemas declare the parameters: parameterDecoder decodes them Zulip's way, and
    // the OpenAPI document is generated from them; Fastify itself neither validates nor coerces.
    api.setValidatorCompiler(documentationOnly);
    api.decorateReply('departure', null);
    if (logging) api.addHook('onRequest', watchDeparture(logClientLeaving));
    api.addHook('preValidation', parameterCollector(config.bodyLimitBytes, config.bodyTimeoutSeconds));
    // Each route gets the hooks it needs, made for it once: a GET (a long poll, above all) has no
    // body to count, time or hold memory for, and no empty path parameter to refuse without a path
    // parameter. Route hooks run after the app's and before the route's own.
    api.addHook('onRoute', (route) => {
      const takesBody = [route.method].flat().some((method) => BODY_METHODS.has(method));
      const authenticate = authentication(route);
      route.onRequest = [
        ...(/[:*]/.test(route.url) ? [rejectEmptyPathParams] : []),
        // Before the body is read: a large one waits for its turn unread.
        ...(takesBody ? [turns.take] : []),
        ...hooks(route.onRequest),
      ];
      // After limitFormFields: the stream it fails is the one the parser reads (a pipe passes no error on).
      if (takesBody) route.preParsing = [limitFormFields, timeBody, ...hooks(route.preParsing)];
      route.preHandler = [
        ...(authenticate ? [authenticate] : []),
        ...(authenticate && takesBody ? [requestMemory.admit] : []),
        // After authentication and the rate limit (docs/api.md §1.1): a bad parameter of an unknown caller is a 401.
        parameterDecoder(route),
        ...hooks(route.preHandler),
      ];
      if (takesBody) route.onSend = [turns.end, ...(authenticate ? [requestMemory.release] : []), ...hooks(route.onSend)];
    });
    await api.register(serverSettingsRoutes, deps);
    for (const routes of AUTHENTICATED_ROUTES) await api.register(routes, deps);
  });

  return app;
}

/** A route's own hooks of one kind, as a list. */
const hooks = <T>(own: T | T[] | undefined): T[] => (own === undefined ? [] : Array.isArray(own) ? own : [own]);
