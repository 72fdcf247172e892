import type { IncomingMessage } from 'node:http';
import type pino from 'pino';
import type { Bindings, ChildLoggerOptions } from 'pino';
import {
  type FastifyBaseLogger,
  type FastifyLogFn,
  type FastifyReply,
  type FastifyRequest,
  type HookHandlerDoneFunction,
  LogController,
} from 'fastify';
import { uniqueId } from '../lib/unique-ids.js';
import { CLIENT_LEFT, clientLeft } from './client-gone.js';

/** What a load balancer may send as X-Request-Id; anything else (huge, odd bytes) gets a fresh id. */
const ACCEPTABLE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The request id: the load balancer's `X-Request-Id` when it sent a sane one (so one id follows the
 * request through the balancer and the app; deploy/haproxy.cfg checks the same rule), else a new
 * UUID-shaped id, unique across instances unlike Fastify's counter.
 */
export function requestId(raw: IncomingMessage): string {
  const header = raw.headers['x-request-id'];
  return typeof header === 'string' && ACCEPTABLE_REQUEST_ID.test(header) ? header : uniqueId();
}

/**
 * onRequest: every answer, errors included, carries the id that its log line has. The per-request
 * hooks that need no I/O take a callback instead of returning a promise: one promise and one
 * microtask less on every request.
 */
export function echoRequestId(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  reply.header('x-request-id', request.id);
  done();
}

/**
 * Fastify's per-request logging, replaced: no "incoming request" line, and one "request completed"
 * line per request. Only the path is logged (query strings may carry parameters a client considers
 * secret) and never a header, so credentials cannot reach the log. The request id is the child
 * logger's `reqId`. Fastify's other lines (stream and serializer failures) are kept.
 */
export class RequestLog extends LogController {
  /** `logging`: false when the server has no logger (or a silent one), so there is no line to build. */
  constructor(logging: boolean) {
    super({ disableRequestLogging: !logging });
  }

  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    // A request whose client left has its line already (logClientLeaving).
    if (this.isLogDisabled(request) || clientLeft(reply)) return;
    const line = { ...requestFields(request), statusCode: reply.statusCode, responseTimeMs: Math.round(reply.elapsedTime * 10) / 10 };
    // An error here means the response itself failed (e.g. the socket broke mid-body).
    if (error) reply.log.error({ ...line, err: error }, 'request completed');
    else infoLine(reply.log, line);
  }
}

function requestFields(request: FastifyRequest) {
  const { caller } = request;
  return { method: request.method, path: request.url.split('?', 1)[0], ...(caller && { userId: caller.id }) };
}

/**
 * The line of a request whose client left before its answer (watchDeparture calls it): Fastify
 * writes none, its onRequestAbort hearing only of clients that leave before their body ends. What
 * the request then meets is the client's doing, not a failure: info, status CLIENT_LEFT.
 */
export function logClientLeaving(reply: FastifyReply): void {
  if (!clientLeft(reply)) return;
  infoLine(reply.log, {
    ...requestFields(reply.request),
    statusCode: CLIENT_LEFT,
    clientLeft: true,
    responseTimeMs: Math.round(reply.elapsedTime * 10) / 10,
  });
}

const REQUEST_COMPLETED = 'request completed';

function infoLine(log: FastifyBaseLogger, line: object): void {
  if (log instanceof RequestLogger) log.completed(line);
  else log.info(line, REQUEST_COMPLETED);
}

/**
 * A request's logger (Fastify's childLoggerFactory), whose pino child is made on first use. Most
 * requests log only their completion line, which the parent writes with the bindings first: the
 * child's own JSON line, without a child per request (a few percent of a heartbeat cycle's CPU,
 * and about 1.5 KB a waiting poll kept).
 */
export class RequestLogger implements FastifyBaseLogger {
  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly requestBindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  private get real(): FastifyBaseLogger {
    return (this.made ??= this.parent.child(this.requestBindings, this.options));
  }

  get level(): string {
    return this.made?.level ?? this.options.level ?? this.parent.level;
  }

  set level(level: string) {
    this.real.level = level;
  }

  /** The completion line: through the parent unless the child exists (or the route has a level of its own). */
  completed(line: object): void {
    if (this.made || this.options.level !== undefined) this.real.info(line, REQUEST_COMPLETED);
    else this.parent.info({ ...this.requestBindings, ...line }, REQUEST_COMPLETED);
  }

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.real.child(bindings, options);
  }

  /** Beyond Fastify's logger interface, pino's two read-only helpers, for a plugin that uses them. */
  bindings(): Bindings {
    return { ...(this.parent as Partial<pino.Logger>).bindings?.(), ...this.requestBindings };
  }

  isLevelEnabled(level: string): boolean {
    return (this.real as Partial<pino.Logger>).isLevelEnabled?.(level) ?? true;
  }

  declare fatal: FastifyLogFn;
  declare error: FastifyLogFn;
  declare warn: FastifyLogFn;
  declare info: FastifyLogFn;
  declare debug: FastifyLogFn;
  declare trace: FastifyLogFn;

  // On the prototype, not arrow fields: a logger per request, and its making is what this class saves.
  static {
    for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const) {
      RequestLogger.prototype[level] = function (this: RequestLogger, ...args: unknown[]) {
        const real = this.real;
        Reflect.apply(real[level], real, args);
      };
    }
  }

  silent(): void {}
}
