import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { Departure } from '../lib/departure.js';

/**
 * A request's one 'close' listener: whoever needs to hear that its client left (a waiting write or
 * poll, the client-leaving log line) is called from it, instead of each adding a listener (and
 * `once`'s wrapper) of its own to every request.
 */
class ClientDeparture implements Departure {
  gone: boolean;
  private listeners: (() => void)[] | undefined;

  constructor(
    private readonly reply: FastifyReply,
    private readonly onLeft?: (reply: FastifyReply) => void,
  ) {
    // Made in a handler when no onRequest made one: the client may have left already (a blocking
    // poll waits up to 50 ms before its handler runs), and its response's close will not come again.
    this.gone = clientLeft(reply);
    // `on`: a response closes once.
    reply.raw.on('close', () => this.closed());
  }

  private closed(): void {
    if (this.reply.raw.writableFinished) return;
    this.gone = true;
    this.onLeft?.(this.reply);
    if (this.listeners) for (const listener of this.listeners.splice(0)) listener();
  }

  onGone(listener: () => void): () => void {
    (this.listeners ??= []).push(listener);
    return () => {
      const index = this.listeners?.indexOf(listener) ?? -1;
      if (index >= 0) this.listeners!.splice(index, 1);
    };
  }
}

/** The request's departure: the one its onRequest made (watchDeparture), or one made now. */
export const clientGone = (reply: FastifyReply): Departure => (reply.departure ??= new ClientDeparture(reply));

/**
 * onRequest: every request's departure is watched from its start, and `onLeft` is called when its
 * client leaves before its answer was finished. A callback hook (see echoRequestId).
 */
export const watchDeparture =
  (onLeft: (reply: FastifyReply) => void) =>
  (_request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    reply.departure = new ClientDeparture(reply, onLeft);
    done();
  };

/** The status a request whose client left is logged with (nginx's 499). */
export const CLIENT_LEFT = 499;

/**
 * Whether the request's client left before its answer was finished (its socket closed): nothing
 * can reach it any more. Logged as such (CLIENT_LEFT), not as a failure of the server.
 */
export const clientLeft = (reply: FastifyReply): boolean => !reply.raw.writableFinished && reply.request.raw.socket?.destroyed === true;
