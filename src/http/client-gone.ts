import type { FastifyReply } from 'fastify';
import type { Departure } from '../lib/departure.js';

class ClientDeparture implements Departure {
  gone: boolean;
  private listeners: (() => void)[] = [];

  constructor(reply: FastifyReply) {
    // Made in a handler: the client may have left already (a blocking poll waits up to 50 ms
    // before its handler runs), and its response's close will not come again.
    this.gone = clientLeft(reply);
    reply.raw.once('close', () => {
      if (reply.raw.writableFinished) return;
      this.gone = true;
      for (const listener of this.listeners.splice(0)) listener();
    });
  }

  onGone(listener: () => void): () => void {
    this.listeners.push(listener);
    return () => {
      const index = this.listeners.indexOf(listener);
      if (index >= 0) this.listeners.splice(index, 1);
    };
  }
}

export const clientGone = (reply: FastifyReply): Departure => new ClientDeparture(reply);

/** The status a request whose client left is logged with (nginx's 499). */
export const CLIENT_LEFT = 499;

/**
 * Whether the request's client left before its answer was finished (its socket closed): nothing
 * can reach it any more. Logged as such (CLIENT_LEFT), not as a failure of the server.
 */
export const clientLeft = (reply: FastifyReply): boolean => !reply.raw.writableFinished && reply.request.raw.socket?.destroyed === true;
