import { isDeepStrictEqual } from 'node:util';
import type { Database } from '../../src/db/database.js';
import type { Exchange, LoadUser } from '../lb/traffic.js';
import type { Polling, WriteAttempt } from './load.js';

/** The checks of `npm run test:failover`; each returns the problems it found (empty: it holds). */

type ApiEvent = Record<string, unknown>;
const withoutId = ({ id: _id, ...event }: ApiEvent) => event;

export interface WriteOutcomes {
  problems: string[];
  /** Per answer status: how many attempts were applied (in the database) and how many were not. */
  byStatus: Map<number, { applied: number; notApplied: number }>;
  /** Per user, the attempts found applied, in order. */
  applied: WriteAttempt[][];
}

/**
 * Every write answered 200 is in the database once, with its audit rows (colors) and the events
 * of its never-polled witness queue; every other answer left all of it or none of it (counted by
 * status); a 503 left none of it (the app answers 503 only for what it knows was not committed);
 * nothing is in the database that no attempt sent.
 */
export async function checkWrites(
  db: Database,
  users: LoadUser[],
  attempts: WriteAttempt[],
  witnessQueues: string[],
): Promise<WriteOutcomes> {
  const problems: string[] = [];
  const byStatus = new Map<number, { applied: number; notApplied: number }>();
  const applied: WriteAttempt[][] = [];
  for (const [index, user] of users.entries()) {
    const views = await db
      .selectFrom('navigation_views')
      .select('fragment')
      .where('user_id', '=', user.id)
      .where('fragment', 'like', '%-fo/user/%')
      .execute();
    const audit = await db
      .selectFrom('subscription_audit_log')
      .select('new_value')
      .where('acting_user_id', '=', user.id)
      .where('property', '=', 'color')
      .execute();
    const stored = new Map<string, number>();
    for (const key of [
      ...views.map((row) => row.fragment),
      ...audit.map((row) => (typeof row.new_value === 'string' ? row.new_value : JSON.stringify(row.new_value))),
    ])
      stored.set(key, (stored.get(key) ?? 0) + 1);
    const mine = attempts.filter((attempt) => attempt.user === user.index);
    const userApplied: WriteAttempt[] = [];
    for (const attempt of mine) {
      const rows = stored.get(attempt.key) ?? 0;
      stored.delete(attempt.key);
      const whole = attempt.kind === 'color' ? attempt.streamIds.length : 1;
      const what = `user ${index} ${attempt.kind} ${attempt.key} answered ${attempt.status}`;
      if (rows !== 0 && rows !== whole) problems.push(`${what}: ${rows} rows stored, ${whole} when applied once`);
      const isApplied = rows === whole;
      if (isApplied) userApplied.push(attempt);
      if (attempt.status === 200 && !isApplied) problems.push(`${what}: not in the database (an acknowledged write lost)`);
      if (attempt.status === 503 && isApplied) problems.push(`${what}: applied, but a 503 promises it was not`);
      const count = byStatus.get(attempt.status) ?? { applied: 0, notApplied: 0 };
      if (isApplied) count.applied++;
      else count.notApplied++;
      byStatus.set(attempt.status, count);
    }
    for (const [key, rows] of stored) problems.push(`user ${index}: ${rows} rows for ${key}, which no attempt sent`);
    // The witness queue nobody polls holds the events of exactly the applied writes, in order.
    const events = await db.selectFrom('events').select('payload').where('queue_id', '=', witnessQueues[index]!).orderBy('id').execute();
    const stored_ = events.map((row) => withoutId(row.payload as ApiEvent));
    const expected = userApplied.flatMap((attempt) => attempt.events);
    if (!isDeepStrictEqual(stored_, expected)) {
      problems.push(
        `user ${index}: the witness queue holds ${stored_.length} events, the applied writes made ${expected.length} (or not the same, in order)`,
      );
    }
    applied.push(userApplied);
  }
  return { problems, byStatus, applied };
}

/** Every queue whose register was answered 200 exists. */
export async function checkRegistered(db: Database, registered: string[]): Promise<string[]> {
  if (registered.length === 0) return ['no register was answered 200'];
  const rows = await db.selectFrom('event_queues').select('id').where('id', 'in', registered).execute();
  const found = new Set(rows.map((row) => row.id));
  const missing = registered.filter((id) => !found.has(id));
  return missing.length === 0 ? [] : [`${missing.length} queues registered with a 200 are missing: ${missing.slice(0, 5).join(', ')}`];
}

/** Each poller whose queue survived received the events of exactly the applied writes, in order. */
export function checkPolls(pollings: Polling[], applied: WriteAttempt[][]): string[] {
  const problems: string[] = [];
  for (const [index, polling] of pollings.entries()) {
    const unexpected = Object.keys(polling.statuses)
      .map(Number)
      .filter((status) => ![200, 503, 504].includes(status));
    if (unexpected.length > 0) problems.push(`user ${index}: polls answered ${JSON.stringify(polling.statuses)}`);
    if (polling.reregistered > 0) continue;
    const received = polling.events.map(withoutId);
    const expected = applied[index]!.flatMap((attempt) => attempt.events);
    if (!isDeepStrictEqual(received, expected)) {
      problems.push(
        `user ${index}: the poller received ${received.length} events, the applied writes made ${expected.length} (or not the same, in order)`,
      );
    }
  }
  return problems;
}

/** Only 200s, 503s (nothing done) and 504s (outcome unknown): no 500, no request left without an answer. */
export function checkStatuses(exchanges: Exchange[]): string[] {
  const bad = exchanges.filter(
    (exchange) =>
      ![200, 503, 504].includes(exchange.status) &&
      !(exchange.status === 400 && (exchange.body as { code?: string } | undefined)?.code === 'BAD_EVENT_QUEUE_ID'),
  );
  return bad
    .slice(0, 10)
    .map(
      (exchange) => `answered ${exchange.status}: ${exchange.method} ${exchange.path} ${exchange.error ?? JSON.stringify(exchange.body)}`,
    )
    .concat(bad.length > 10 ? [`... ${bad.length - 10} more`] : []);
}

export interface Recovery {
  /** Failed writes after the fault. */
  failed: number;
  /** From the fault to the end of the first successful write sent after the last failure (ms). */
  recoveryMs: number;
  /** The longest time without a successful write ending, around the fault (ms). */
  longestGapMs: number;
}

/** Recovery of the writes from a fault at `at`, looking at the attempts until `until`. */
export function recoveryFrom(attempts: WriteAttempt[], at: number, until: number): Recovery {
  const window = attempts.filter((attempt) => attempt.startedAt >= at - 1000 && attempt.startedAt < until);
  const failures = window.filter((attempt) => attempt.status !== 200 && attempt.endedAt >= at);
  const lastFailure = failures.reduce((last, attempt) => Math.max(last, attempt.startedAt), at);
  const firstSuccess = window
    .filter((attempt) => attempt.status === 200 && attempt.startedAt >= lastFailure)
    .reduce((first, attempt) => Math.min(first, attempt.endedAt), Number.POSITIVE_INFINITY);
  const ends = window
    .filter((attempt) => attempt.status === 200)
    .map((attempt) => attempt.endedAt)
    .sort((a, b) => a - b);
  let longestGapMs = 0;
  for (let i = 1; i < ends.length; i++) longestGapMs = Math.max(longestGapMs, ends[i]! - ends[i - 1]!);
  return { failed: failures.length, recoveryMs: firstSuccess - at, longestGapMs };
}
