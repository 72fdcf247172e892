import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import type { Database } from '../db/database.js';
import { ApiError } from './errors.js';
import { recordRequest } from './rate-limit.repository.js';

/** 429 whose body carries `retry-after` AFTER `code`, as Zulip sends it (spec §1.8). */
export class RateLimitExceeded extends ApiError {
  constructor(readonly retryAfterSeconds: number) {
    super(429, 'API usage exceeded rate limit', 'RATE_LIMIT_HIT', {}, { 'retry-after': String(retryAfterSeconds) });
    this.name = 'RateLimitExceeded';
  }

  override toBody(): Record<string, unknown> {
    return { ...super.toBody(), 'retry-after': this.retryAfterSeconds };
  }
}

/**
 * preHandler that applies the per-user sliding-log limit (spec §1.10). Registered right after the
 * authentication preHandler, so it sees only authenticated callers and runs before any parameter
 * is parsed. The headers go on the reply before anything else can fail, so every later answer
 * (success, 4xx, 429, 500) carries them.
 */
export function rateLimitHook(db: Database, config: Pick<Config, 'rateLimitMaxRequests' | 'rateLimitWindowSeconds'>) {
  const rule = { maxRequests: config.rateLimitMaxRequests, windowSeconds: config.rateLimitWindowSeconds };
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (request.routeOptions.config.auth === false) return;
    const { id, realmId } = request.caller;
    const decision = await recordRequest(db, id, realmId, rule);
    const resetAfter = decision.accepted ? rule.windowSeconds : decision.retryAfterSeconds;
    reply.headers({
      'x-ratelimit-limit': String(rule.maxRequests),
      'x-ratelimit-remaining': String(decision.accepted ? Math.max(0, rule.maxRequests - decision.used) : 0),
      'x-ratelimit-reset': String(Math.trunc(decision.nowSeconds + resetAfter)),
    });
    if (!decision.accepted) throw new RateLimitExceeded(decision.retryAfterSeconds);
  };
}
