import type { FastifyInstance } from 'fastify';
import { serviceUnavailable } from './errors.js';

/**
 * Once app.close() starts:
 * - every response closes its connection. app.close() waits for the HTTP server to close, and the
 *   server waits for every connection: a keep-alive connection whose request was still in flight
 *   when shutdown began would otherwise stay open, idle, until KEEP_ALIVE_TIMEOUT_SECONDS, past
 *   any sensible shutdown deadline;
 * - a new request arriving on such a connection gets the Zulip 503 envelope with Retry-After (the
 *   client retries, through the load balancer, on another instance), instead of Fastify's own
 *   503 body (return503OnClosing is off for that reason).
 */
export function closeConnectionsOnShutdown(app: FastifyInstance, retryAfterSeconds: number): void {
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  // Callback hooks, not async ones: they run on every request (see echoRequestId).
  app.addHook('onRequest', (_request, _reply, done) => {
    done(closing ? serviceUnavailable(retryAfterSeconds) : undefined);
  });
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });
}
