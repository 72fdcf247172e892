import { sql } from 'kysely';
import type { Database } from '../../db/database.js';
import type { Caller } from '../../http/auth.js';
import type { ApiEvent } from '../event-log/event-log.repository.js';

/**
 * The statements of GET /events long polls (docs/api.md §3.13) but their starts and heartbeats
 * (poll-batches.repository.ts). A queue row records which poll holds it (poll_id) and until when.
 */

/**
 * How long a poll's hold on its queue lasts without a renewal. Each instance checks its waiting
 * polls every POLL_RECHECK_SECONDS (at most 20) and renews the leases about to run out
 * (leaseRenewalSeconds), so only a crashed instance's leases run out, and its queues expire this
 * much later than their idle lifespan says.
 */
export const POLL_LEASE_SECONDS = 60;

export type QueueOwner = Pick<Caller, 'realmId' | 'id'>;

export interface StoredEvent {
  id: number;
  event: ApiEvent;
}

export const withIds = (events: StoredEvent[]): ApiEvent[] => events.map(({ id, event }) => ({ ...event, id }));

export interface WaitingPoll {
  queueId: string;
  pollId: string;
}

/**
 * A waiting poll's lease is renewed once less than this is left (every 25–30 s at the default 5 s
 * interval); with longer intervals, early enough that two failed checks in a row still leave time.
 */
export const leaseRenewalSeconds = (checkIntervalSeconds: number): number => Math.max(35, 3 * checkIntervalSeconds + 5);

/**
 * The array literal of UUIDs (`{a,b,…}`), sent as one text value: pg's own serialization of a
 * JavaScript array escapes and quotes each element, 20,000 of them every POLL_RECHECK_SECONDS at
 * 10,000 waiting polls. UUIDs need neither.
 */
const uuidArray = (ids: readonly string[]): string => `{${ids.join(',')}}`;

/**
 * One statement for all the waiting polls of an instance: renews the leases about to run out of
 * those that still hold their queue, and returns the polls that should answer now (events are
 * pending, or the queue is gone or held by a newer poll), by poll id: what a missed notification
 * would have said. Only expiring leases are written, so most checks write nothing.
 */
export async function recheckWaitingPolls(db: Database, polls: readonly WaitingPoll[], renewBelowSeconds: number): Promise<string[]> {
  const { rows } = await sql<{ poll_id: string }>`
    WITH waiting AS (
      SELECT * FROM unnest(${uuidArray(polls.map((poll) => poll.queueId))}::uuid[], ${uuidArray(polls.map((poll) => poll.pollId))}::uuid[]) AS w (queue_id, poll_id)
    ), held AS (
      SELECT w.queue_id, w.poll_id FROM waiting w JOIN event_queues q ON q.id = w.queue_id AND q.poll_id = w.poll_id
    ), renewable AS (
      -- Locked in id order, skipping rows another transaction holds (their lease is renewed at the
      -- next check): many users' rows in one statement must never deadlock with a write.
      SELECT q.id FROM event_queues q JOIN held h ON q.id = h.queue_id AND q.poll_id = h.poll_id
      WHERE q.poll_lease_until < now() + make_interval(secs => ${renewBelowSeconds})
      ORDER BY q.id
      FOR NO KEY UPDATE OF q SKIP LOCKED
    ), renewed AS (
      UPDATE event_queues q SET poll_lease_until = now() + make_interval(secs => ${POLL_LEASE_SECONDS})
      FROM renewable r WHERE q.id = r.id
    )
    -- A join, not NOT EXISTS: inside an OR that would be a scan of held per waiting poll.
    SELECT w.poll_id::text AS poll_id FROM waiting w LEFT JOIN held h ON h.poll_id = w.poll_id
    WHERE h.poll_id IS NULL OR EXISTS (SELECT 1 FROM events e WHERE e.queue_id = w.queue_id)
  `.execute(db);
  return rows.map((row) => row.poll_id);
}

/**
 * Ends a poll: restarts the queue's idle clock, releases the queue if this poll still holds it,
 * and returns every pending event; undefined when the queue no longer exists. `onlyIfReady` (a
 * woken poll): only when events are pending or a newer poll holds the queue, else 'waiting'.
 */
async function endPoll(db: Database, queueId: string, pollId: string, onlyIfReady: boolean): Promise<ApiEvent[] | 'waiting' | undefined> {
  const { rows } = await sql<{ ready: boolean; found: boolean; events: StoredEvent[] | null }>`
    WITH q AS (
      SELECT NOT ${onlyIfReady}::boolean OR poll_id IS DISTINCT FROM ${pollId}::uuid
        OR EXISTS (SELECT 1 FROM events e WHERE e.queue_id = ${queueId}::uuid) AS ready
      FROM event_queues WHERE id = ${queueId}::uuid
    ), finished AS (
      UPDATE event_queues SET
        last_active_at = now(),
        poll_id = CASE WHEN poll_id = ${pollId}::uuid THEN NULL ELSE poll_id END,
        poll_lease_until = CASE WHEN poll_id = ${pollId}::uuid THEN NULL ELSE poll_lease_until END
      WHERE id = ${queueId}::uuid AND (SELECT ready FROM q)
      RETURNING id
    )
    SELECT
      q.ready,
      EXISTS (SELECT 1 FROM finished) AS found,
      CASE WHEN q.ready THEN coalesce(
        (SELECT json_agg(json_build_object('id', e.id, 'event', e.payload) ORDER BY e.id)
         FROM events e WHERE e.queue_id = ${queueId}::uuid), '[]'
      ) END AS events
    FROM q
  `.execute(db);
  const row = rows[0];
  if (!row) return undefined;
  if (!row.ready) return 'waiting';
  // Deleted while the update waited for its row: gone all the same.
  return row.found ? withIds(row.events!) : undefined;
}

/** Unconditionally: the statement's `ready` is then always true, so never 'waiting'. */
export const finishPoll = (db: Database, queueId: string, pollId: string) =>
  endPoll(db, queueId, pollId, false) as Promise<ApiEvent[] | undefined>;

export const finishPollIfReady = (db: Database, queueId: string, pollId: string) => endPoll(db, queueId, pollId, true);
