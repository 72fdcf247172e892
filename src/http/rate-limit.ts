import type { FastifyReply } from 'fastify';
import type { RefusedLimit } from '../metrics/metrics.js';
import { ApiError } from './errors.js';

/** The per-user rule (docs/api.md §1.10): at most maxRequests accepted requests in any windowSeconds. */
export interface RateLimitRule {
  maxRequests: number;
  windowSeconds: number;
}

/** The rate-limit decision as the authentication statement returns it (null when rate limiting is off or the credentials were refused). */
export interface RateLimitColumns {
  rate_limit_accepted: boolean | null;
  /** Accepted requests in the window, this one included when accepted. */
  rate_limit_used: number | null;
  /** Unix time of the decision, in seconds (database clock, microsecond precision). */
  rate_limit_now: number | null;
  /** On refusal: seconds until the request that blocks this one leaves the window. */
  rate_limit_retry_after: number | null;
}

/** 429 whose body carries `retry-after` AFTER `code`, as Zulip sends it (docs/api.md §1.8). */
class RateLimitExceeded extends ApiError {
  constructor(
    readonly retryAfterSeconds: number,
    /** Which limit refused: the metrics count them apart. */
    readonly limit: RefusedLimit,
  ) {
    super(429, 'API usage exceeded rate limit', 'RATE_LIMIT_HIT', {}, { 'retry-after': String(retryAfterSeconds) });
    this.name = 'RateLimitExceeded';
  }

  override toBody(): Record<string, unknown> {
    return { ...super.toBody(), 'retry-after': this.retryAfterSeconds };
  }
}

/** The 429 of a user holding too many request bodies at once (src/http/request-memory.ts). */
export const userBodyMemoryExceeded = (retryAfterSeconds: number): ApiError => new RateLimitExceeded(retryAfterSeconds, 'user_body_memory');

/** Which limit an error is the refusal of, if it is one. */
export const refusedLimit = (error: ApiError): RefusedLimit | undefined => (error instanceof RateLimitExceeded ? error.limit : undefined);

/**
 * The `X-RateLimit-*` headers of an authenticated request, from the decision the authentication
 * statement took (src/http/auth.repository.ts), set before anything else can fail so that every
 * later answer (success, 4xx, 429, 500) carries them; a refusal is thrown as 429.
 */
export function applyRateLimit(reply: FastifyReply, rule: RateLimitRule, decision: RateLimitColumns): void {
  const accepted = decision.rate_limit_accepted;
  // Present whenever the statement accepted the credentials, which authenticate checks first.
  if (accepted === null) throw new Error('the authentication statement took no rate-limit decision');
  const retryAfterSeconds = decision.rate_limit_retry_after ?? 0;
  const resetAfter = accepted ? rule.windowSeconds : retryAfterSeconds;
  reply.headers({
    'x-ratelimit-limit': String(rule.maxRequests),
    'x-ratelimit-remaining': String(accepted ? Math.max(0, rule.maxRequests - (decision.rate_limit_used ?? 0)) : 0),
    'x-ratelimit-reset': String(Math.trunc((decision.rate_limit_now ?? 0) + resetAfter)),
  });
  if (!accepted) throw new RateLimitExceeded(retryAfterSeconds, 'rate_limit');
}
