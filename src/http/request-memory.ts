import type { FastifyInstance, FastifyReply, FastifyRequest, RequestPayload } from 'fastify';
import { serviceUnavailable } from './errors.js';
import { rateLimitExceeded } from './rate-limit.js';

/**
 * Bounds the memory an instance gives to request bodies, whoever sends them (issue 31). A body is
 * held from the moment it starts to arrive until its answer is sent: read, parsed, decoded, then
 * waiting for its user's turn (a user's writes run one at a time, src/db/user-transactions.ts), and
 * a decoded bulk update holds several times its size. So:
 *
 * - instance: the bodies being read or served may declare at most `totalBytes` together (a body
 *   of unknown length counts as the body limit). Beyond it a request is answered 503 before its
 *   body is read: it costs nothing but its headers, credentials or not.
 * - user: once authenticated, a user's requests with a body may hold at most `userBytes` and
 *   `userRequests` at once on this instance. Beyond it: 429 RATE_LIMIT_HIT with a retry-after of a
 *   second, which the official clients wait out and retry; the others' requests are not held up.
 *
 * A reservation ends when the answer is handed to Fastify (onSend): every request, answered or
 * failed, passes there once its handler, and so its waiting write, is done. Not when its client
 * leaves, unless its body had not all arrived: a write already queued stays in memory until its turn.
 */
export interface RequestMemoryLimits {
  totalBytes: number;
  userBytes: number;
  userRequests: number;
  /** The body limit: what a body of unknown length may still grow to. */
  bodyLimit: number;
  retryAfterSeconds: number;
}

const BODY_METHODS = new Set(['POST', 'PATCH', 'DELETE']);

/** Seconds a client refused for its own queue waits before retrying: its queued writes take milliseconds each. */
const USER_RETRY_AFTER_SECONDS = 1;

interface Reservation {
  bytes: number;
  userId?: number;
  released: boolean;
}

const reservations = new WeakMap<FastifyRequest, Reservation>();

export class RequestMemory {
  private total = 0;
  private readonly users = new Map<number, { bytes: number; requests: number }>();

  constructor(private readonly limits: RequestMemoryLimits) {}

  /** Bytes reserved by bodies on this instance now. */
  get reservedBytes(): number {
    return this.total;
  }

  /** Users with a request holding a body now (for tests: the map must not grow without bound). */
  get activeUsers(): number {
    return this.users.size;
  }

  /** Reserves each body of `app`'s routes before it is read, and releases it once answered. */
  register(app: FastifyInstance): void {
    app.addHook('preParsing', (request: FastifyRequest, _reply: FastifyReply, payload: RequestPayload, done: (error: Error | null, payload?: RequestPayload) => void) => {
      if (!BODY_METHODS.has(request.method)) return done(null, payload);
      const bytes = this.declaredBytes(request);
      if (this.total + bytes > this.limits.totalBytes) return done(serviceUnavailable(this.limits.retryAfterSeconds));
      this.total += bytes;
      reservations.set(request, { bytes, released: false });
      // A client that leaves before its whole body arrived never reaches its handler (nor onSend).
      request.raw.once('close', () => {
        if (!request.raw.complete) this.release(request);
      });
      done(null, payload);
    });
    app.addHook('onSend', (request: FastifyRequest, _reply: FastifyReply, payload: unknown, done: (error: Error | null, payload?: unknown) => void) => {
      this.release(request);
      done(null, payload);
    });
  }

  /** preHandler, after authentication and the rate limit: the body counts against its user. */
  readonly admitUser = (request: FastifyRequest, _reply: FastifyReply, done: (error?: Error) => void): void => {
    try {
      this.countAgainstUser(request);
      done();
    } catch (error) {
      done(error as Error);
    }
  };

  private declaredBytes(request: FastifyRequest): number {
    const declared = request.headers['content-length'];
    // Chunked: its length is unknown. Neither header: a request without a body (RFC 9112 §6.3).
    if (request.headers['transfer-encoding'] !== undefined) return this.limits.bodyLimit;
    if (declared === undefined) return 0;
    if (!/^\d+$/.test(declared)) return this.limits.bodyLimit;
    // A body declared larger than the limit is refused with 413 as soon as it is read.
    return Math.min(Number(declared), this.limits.bodyLimit);
  }

  /** 429 when the user holds too much already. */
  private countAgainstUser(request: FastifyRequest): void {
    const reservation = reservations.get(request);
    const userId = request.caller?.id;
    if (!reservation || userId === undefined) return;
    const held = this.users.get(userId) ?? { bytes: 0, requests: 0 };
    // A user's first body is always admitted: the body limit bounds it, and the instance's budget let it in.
    if (held.requests > 0 && (held.requests >= this.limits.userRequests || held.bytes + reservation.bytes > this.limits.userBytes)) {
      throw rateLimitExceeded(USER_RETRY_AFTER_SECONDS);
    }
    held.bytes += reservation.bytes;
    held.requests += 1;
    this.users.set(userId, held);
    reservation.userId = userId;
  }

  private release(request: FastifyRequest): void {
    const reservation = reservations.get(request);
    if (!reservation || reservation.released) return;
    reservation.released = true;
    this.total -= reservation.bytes;
    if (reservation.userId === undefined) return;
    const held = this.users.get(reservation.userId);
    if (!held) return;
    held.bytes -= reservation.bytes;
    held.requests -= 1;
    if (held.requests === 0) this.users.delete(reservation.userId);
  }
}
