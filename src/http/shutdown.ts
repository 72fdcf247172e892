import type { FastifyInstance } from 'fastify';
import { serviceUnavailable } from './errors.js';

/**
 * Once app.close() starts:
 * - every response closes its connection: app.close() waits for every connection, and a keep-alive
 *   one whose request was in flight would otherwise stay open until KEEP_ALIVE_TIMEOUT_SECONDS;
 * - a new request on such a connection gets the Zulip 503 envelope with Retry-After (the client
 *   retries on another instance), not Fastify's own 503 body (return503OnClosing is off).
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
