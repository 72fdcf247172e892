import { sql } from 'kysely';
import type { Database } from '../db/database.js';

export interface RateLimitRule {
  maxRequests: number;
  windowSeconds: number;
}

export interface RateLimitDecision {
  accepted: boolean;
  /** Accepted requests in the window, this one included when accepted. */
  used: number;
  /** Unix time of the decision, in seconds (database clock, microsecond precision). */
  nowSeconds: number;
  /** On refusal: seconds until the request that blocks this one leaves the window. */
  retryAfterSeconds: number;
}

interface DecisionRow {
  accepted: boolean;
  used: number;
  now_seconds: number;
  retry_after_seconds: number | null;
}

/**
 * Decides and records one request of a user in ONE statement (spec §1.10).
 *
 * A first request inserts the user's row. Later ones take the ON CONFLICT DO UPDATE path, which
 * locks the row and evaluates SET against its latest committed version, so concurrent requests
 * (on any instance) are serialized per user and never both take the last slot. The time is read
 * with clock_timestamp() after the lock, keeping `hits` in order; times that left the window are
 * dropped on the way. A refused request records nothing but the decision.
 */
export async function recordRequest(
  db: Database,
  userId: number,
  realmId: number,
  rule: RateLimitRule,
): Promise<RateLimitDecision> {
  const max = sql`${rule.maxRequests}::integer`;
  const window = sql`(${rule.windowSeconds}::integer * interval '1 second')`;
  const { rows } = await sql<DecisionRow>`
    INSERT INTO rate_limit_logs AS log (user_id, realm_id, hits, last_checked_at, last_accepted)
    SELECT ${userId}::integer, ${realmId}::integer, ARRAY[clock.t], clock.t, true
    FROM (SELECT clock_timestamp() AS t) AS clock
    ON CONFLICT (user_id) DO UPDATE SET (hits, last_checked_at, last_accepted) = (
      SELECT CASE WHEN cardinality(recent.hits) < ${max} THEN recent.hits || recent.t ELSE recent.hits END,
             recent.t,
             cardinality(recent.hits) < ${max}
      FROM (
        SELECT clock.t,
               ARRAY(SELECT hit FROM unnest(log.hits) AS hit WHERE hit > clock.t - ${window} ORDER BY hit) AS hits
        FROM (SELECT clock_timestamp() AS t) AS clock
      ) AS recent
    )
    RETURNING last_accepted AS accepted,
              cardinality(hits) AS used,
              extract(epoch FROM last_checked_at)::float8 AS now_seconds,
              -- With more than max hits (the limit was lowered), a slot frees when the
              -- (count − max + 1)-th oldest leaves the window.
              extract(epoch FROM hits[cardinality(hits) - ${max} + 1] + ${window} - last_checked_at)::float8
                AS retry_after_seconds
  `.execute(db);
  const row = rows[0]!;
  return {
    accepted: row.accepted,
    used: row.used,
    nowSeconds: row.now_seconds,
    retryAfterSeconds: row.retry_after_seconds ?? 0,
  };
}
