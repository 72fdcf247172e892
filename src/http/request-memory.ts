import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { serviceUnavailable } from './errors.js';
import { userBodyMemoryExceeded } from './rate-limit.js';

/** Seconds a client refused for its own queue waits before retrying: its queued writes take milliseconds each. */
const USER_RETRY_AFTER_SECONDS = 1;

interface Reservation {
  userId: number;
  bytes: number;
}

const reservations = new WeakMap<FastifyRequest, Reservation>();

/**
 * Bounds the memory an instance gives to the bodies of authenticated requests while they are
 * served. Once read, a body is parsed and decoded, then may wait in its user's queue (a user's
 * writes run one at a time, src/db/transactions.ts); a decoded bulk update holds several
 * times its size, and the rate limit alone does not bound how many wait. So, right after
 * authentication and the rate limit, before its parameters are decoded:
 *
 * - user: a user's requests with a body may hold at most USER_REQUEST_BODY_BYTES and
 *   USER_REQUEST_BODIES at once on this instance (its first one is always admitted: the body limit
 *   bounds it). Beyond it: 429 RATE_LIMIT_HIT with a retry-after of a second, which the official
 *   clients wait out and retry.
 * - instance: all users' together at most REQUEST_BODY_MEMORY_BYTES. Beyond it: 503 SERVER_NOT_READY.
 *
 * Counted after authentication, not while bodies arrive: what unauthenticated requests cost is
 * bounded per request (the body limit, BODY_TIMEOUT_SECONDS; their bodies are never decoded), and
 * they can never fill the budget that the users' writes need. A reservation ends when the answer
 * is handed to Fastify (onSend), which every request passes once its handler, and so its waiting
 * write, is done, whether or not its client is still there.
 */
export class RequestMemory {
  private total = 0;
  private readonly users = new Map<number, { bytes: number; requests: number }>();

  constructor(
    private readonly limits: Pick<Config, 'requestBodyMemoryBytes' | 'userRequestBodyBytes' | 'userRequestBodies' | 'retryAfterSeconds'>,
  ) {}

  /** preHandler of the authenticated routes that take a body, after authentication and the rate limit: the body counts against its user and the instance. */
  readonly admit = (request: FastifyRequest, _reply: FastifyReply, done: (error?: Error) => void): void => {
    const userId = request.caller?.id;
    if (userId === undefined) return done();
    const bytes = bodyBytes(request);
    const held = this.users.get(userId) ?? { bytes: 0, requests: 0 };
    if (held.requests > 0 && (held.requests >= this.limits.userRequestBodies || held.bytes + bytes > this.limits.userRequestBodyBytes)) {
      return done(userBodyMemoryExceeded(USER_RETRY_AFTER_SECONDS));
    }
    if (this.total + bytes > this.limits.requestBodyMemoryBytes) return done(serviceUnavailable(this.limits.retryAfterSeconds));
    held.bytes += bytes;
    held.requests += 1;
    this.users.set(userId, held);
    this.total += bytes;
    reservations.set(request, { userId, bytes });
    done();
  };

  /** onSend of the same routes: the request's reservation ends once it is answered. */
  readonly release = (
    request: FastifyRequest,
    _reply: FastifyReply,
    payload: unknown,
    done: (error: Error | null, payload?: unknown) => void,
  ): void => {
    const reservation = reservations.get(request);
    if (reservation) {
      reservations.delete(request);
      this.total -= reservation.bytes;
      const held = this.users.get(reservation.userId);
      if (held) {
        held.bytes -= reservation.bytes;
        held.requests -= 1;
        if (held.requests === 0) this.users.delete(reservation.userId);
      }
    }
    done(null, payload);
  };
}

/** The body's size: as declared, or (chunked) what its fields hold. */
function bodyBytes(request: FastifyRequest): number {
  const declared = request.headers['content-length'];
  if (declared !== undefined && request.headers['transfer-encoding'] === undefined) return Number(declared) || 0;
  let bytes = 0;
  for (const [name, value] of request.parameterSources.body) bytes += name.length + value.length;
  return bytes;
}
