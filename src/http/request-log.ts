import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { type FastifyReply, type FastifyRequest, type HookHandlerDoneFunction, LogController } from 'fastify';
import { CLIENT_LEFT, clientLeft } from './client-gone.js';

/** What a load balancer may send as X-Request-Id; anything else (huge, odd bytes) gets a fresh id. */
const ACCEPTABLE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The request id: the load balancer's `X-Request-Id` when it sent a sane one (so one id follows the
 * request through the balancer and the app; deploy/haproxy.cfg checks the same rule), else a UUID,
 * unique across instances unlike Fastify's counter.
 */
export function requestId(raw: IncomingMessage): string {
  const header = raw.headers['x-request-id'];
  return typeof header === 'string' && ACCEPTABLE_REQUEST_ID.test(header) ? header : randomUUID();
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
    else reply.log.info(line, 'request completed');
  }
}

function requestFields(request: FastifyRequest) {
  const { caller } = request;
  return { method: request.method, path: request.url.split('?', 1)[0], ...(caller && { userId: caller.id }) };
}

/**
 * onRequest: a request whose client leaves before its answer gets its line when it leaves. Fastify
 * writes none (the response never finishes), and whatever the request then meets (ClientGone, a
 * cancelled statement, a success nobody reads) is the client's doing, not a failure: info, status
 * CLIENT_LEFT. (Fastify's onRequestAbort hears only of clients that leave before their body ends.)
 */
export function logClientLeaving(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  reply.raw.once('close', () => {
    if (!clientLeft(reply)) return;
    request.log.info(
      { ...requestFields(request), statusCode: CLIENT_LEFT, clientLeft: true, responseTimeMs: Math.round(reply.elapsedTime * 10) / 10 },
      'request completed',
    );
  });
  done();
}
