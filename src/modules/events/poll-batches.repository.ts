import { sql } from 'kysely';
import type { Database } from '../../db/database.js';
import { sqlStatement } from '../../db/reusable-statement.js';
import type { Transactions } from '../../db/transactions.js';
import { POLL_LEASE_SECONDS, type QueueOwner, type StoredEvent, type WaitingPoll, withIds } from './event-polls.repository.js';
import { type ApiEvent, EVENTS_CHANNEL } from '../event-log/event-log.repository.js';

/**
 * The statements of many long polls at once (poll-batches.ts). With `skipLocked` (a batch), a queue
 * row another transaction holds is skipped rather than waited for (many users' rows in one
 * statement must never wait in a lock cycle with a write): its poll gets no result, and the caller
 * sends it again alone, without skipping.
 */

export type PollStart =
  | { outcome: 'missing' }
  | { outcome: 'pruned' }
  | { outcome: 'not_in_queue' }
  /** Acknowledged; `events` are the pending ones when answered at once. */
  | { outcome: 'answered' | 'waiting'; events: ApiEvent[]; replacedPoll: boolean };

export interface PollStartRequest {
  owner: QueueOwner;
  queueId: string;
  lastEventId: number;
  pollId: string;
  answerNow: boolean;
}

/**
 * Steps 4–8 of docs/api.md §3.13 for each poll, several polls of distinct queues in one statement: under the
 * queue's row lock, checks last_event_id against the acknowledged and assigned ids, then (only when
 * it is acceptable) deletes the acknowledged events and either answers at once with the pending ones
 * (the poll ends: idle clock restarts) or takes the queue over for a waiting poll, with a lease. A
 * poll it replaces is notified so it answers. With `skipLocked`, an unknown queue is skipped too.
 */
export async function startPolls(
  db: Database,
  requests: readonly PollStartRequest[],
  skipLocked: boolean,
): Promise<(PollStart | undefined)[]> {
  const input = JSON.stringify(
    requests.map((request, ord) => ({
      ord,
      queue_id: request.queueId,
      user_id: request.owner.id,
      realm_id: request.owner.realmId,
      // numeric: last_event_id may be any JSON integer, far beyond bigint.
      last: String(request.lastEventId),
      poll_id: request.pollId,
      answer_now: request.answerNow,
    })),
  );
  const { rows } = await sql<{
    ord: number;
    accepted: boolean;
    answered: boolean;
    replaced_poll: boolean;
    last_acked_id: number;
    events: StoredEvent[];
  }>`
    WITH input AS (
      SELECT ord, queue_id, user_id, realm_id, last::numeric AS last, poll_id, answer_now
      FROM jsonb_to_recordset(${input}::jsonb)
        AS i (ord integer, queue_id uuid, user_id integer, realm_id integer, last text, poll_id uuid, answer_now boolean)
    ), q AS (
      SELECT eq.id, eq.last_acked_id, eq.next_event_id, eq.poll_id, i.ord, i.last, i.poll_id AS new_poll_id, i.answer_now
      FROM input i JOIN event_queues eq ON eq.id = i.queue_id AND eq.user_id = i.user_id AND eq.realm_id = i.realm_id
      ORDER BY eq.id
      FOR UPDATE OF eq ${skipLocked ? sql`SKIP LOCKED` : sql``}
    ), accepted AS (
      SELECT * FROM q WHERE last >= last_acked_id AND (last = last_acked_id OR last < next_event_id)
    ), pending AS (
      -- One index probe per queue (OFFSET 0 keeps it a lateral subquery): the planner then uses the
      -- index even when one queue holds most of the table (a join estimate would scan all of it).
      SELECT a.id AS queue_id, p.id, p.payload FROM accepted a
      CROSS JOIN LATERAL (SELECT e.id, e.payload FROM events e WHERE e.queue_id = a.id AND e.id > a.last OFFSET 0) p
    ), answer AS (
      SELECT a.id, a.answer_now OR EXISTS (SELECT 1 FROM pending p WHERE p.queue_id = a.id) AS at_once FROM accepted a
    ), acknowledged AS (
      DELETE FROM events e USING accepted a WHERE e.queue_id = a.id AND e.id <= a.last
    ), updated AS (
      UPDATE event_queues eq SET
        last_acked_id = GREATEST(eq.last_acked_id, a.last),
        poll_id = CASE WHEN answer.at_once THEN NULL ELSE a.new_poll_id END,
        poll_lease_until = CASE WHEN answer.at_once THEN NULL ELSE now() + make_interval(secs => ${POLL_LEASE_SECONDS}) END,
        last_active_at = CASE WHEN answer.at_once THEN now() ELSE eq.last_active_at END
      FROM accepted a JOIN answer ON answer.id = a.id WHERE eq.id = a.id
    )
    SELECT
      q.ord,
      a.id IS NOT NULL AS accepted,
      coalesce(answer.at_once, false) AS answered,
      q.poll_id IS NOT NULL AS replaced_poll,
      q.last_acked_id,
      coalesce(
        (SELECT json_agg(json_build_object('id', p.id, 'event', p.payload) ORDER BY p.id) FROM pending p WHERE p.queue_id = q.id), '[]'
      ) AS events,
      (SELECT pg_notify(${EVENTS_CHANNEL}, q.id::text) WHERE q.poll_id IS NOT NULL AND a.id IS NOT NULL) AS notified
    FROM q LEFT JOIN accepted a ON a.id = q.id LEFT JOIN answer ON answer.id = q.id
  `.execute(db);
  const starts: (PollStart | undefined)[] = requests.map(() => (skipLocked ? undefined : { outcome: 'missing' }));
  for (const row of rows) {
    const lastEventId = requests[row.ord]!.lastEventId;
    starts[row.ord] = !row.accepted
      ? { outcome: lastEventId < row.last_acked_id ? 'pruned' : 'not_in_queue' }
      : { outcome: row.answered ? 'answered' : 'waiting', events: withIds(row.events), replacedPoll: row.replaced_poll };
  }
  return starts;
}

/**
 * A heartbeat is the end of a poll: the heartbeat appended (with the queue's next id, whatever its
 * event_types) only if the poll still holds its queue, the queue released and its idle clock
 * restarted, and every pending event answered. For many polls, one transaction of two statements
 * sent in one burst on a pooled connection (where it may wait for rows): the first locks and
 * writes the queues; the second, with a snapshot taken after those locks, reads the events of
 * every queue asked about (so it sees every event committed before the heartbeat's id was taken,
 * and the heartbeat), kept for the queues the first one ended. By poll id: the events, or null when
 * the queue no longer exists.
 */
export async function answerHeartbeats(
  transactions: Transactions,
  polls: readonly WaitingPoll[],
  skipLocked: boolean,
): Promise<Map<string, ApiEvent[] | null>> {
  const [ended, read] = (await transactions.onOwnConnection([
    sqlStatement(sql`
      WITH ${lockedPollEnds(polls, skipLocked)}, finished AS (
        UPDATE event_queues eq SET
          next_event_id = CASE WHEN q.holds THEN eq.next_event_id + 1 ELSE eq.next_event_id END,
          last_active_at = now(),
          poll_id = CASE WHEN q.holds THEN NULL ELSE eq.poll_id END,
          poll_lease_until = CASE WHEN q.holds THEN NULL ELSE eq.poll_lease_until END
        FROM q WHERE eq.id = q.id
      ), heartbeats AS (
        INSERT INTO events (queue_id, id, realm_id, payload)
        SELECT id, next_event_id, realm_id, ${JSON.stringify({ type: 'heartbeat' })}::json FROM q WHERE holds
      )
      SELECT id::text AS queue_id, ended_poll::text AS poll_id FROM q
    `),
    sqlStatement(sql`
      SELECT e.queue_id::text AS queue_id, json_agg(json_build_object('id', e.id, 'event', e.payload) ORDER BY e.id) AS events
      FROM events e WHERE e.queue_id = ANY(${polls.map((poll) => poll.queueId)}::uuid[])
      GROUP BY e.queue_id
    `),
  ])) as [{ queue_id: string; poll_id: string }[], { queue_id: string; events: StoredEvent[] }[]];
  const eventsOf = new Map(read.map((row) => [row.queue_id, row.events]));
  return endResults(polls, ended, skipLocked, (row) => withIds(eventsOf.get(row.queue_id) ?? []));
}

/** The CTEs `input` (the polls ending) and `q` (their queues' rows, locked in id order; `holds`: the poll still holds its queue). */
function lockedPollEnds(polls: readonly WaitingPoll[], skipLocked: boolean) {
  return sql`input AS (
      SELECT * FROM unnest(${polls.map((poll) => poll.queueId)}::uuid[], ${polls.map((poll) => poll.pollId)}::uuid[]) AS i (queue_id, poll_id)
    ), q AS (
      SELECT eq.id, eq.realm_id, eq.next_event_id, eq.poll_id IS NOT DISTINCT FROM i.poll_id AS holds, i.poll_id AS ended_poll
      FROM input i JOIN event_queues eq ON eq.id = i.queue_id
      ORDER BY eq.id
      FOR NO KEY UPDATE OF eq ${skipLocked ? sql`SKIP LOCKED` : sql``}
    )`;
}

/** By poll id: `result` of each poll ended, null for one whose queue is gone (absent instead when skipped). */
function endResults<Row extends { poll_id: string }, R>(
  polls: readonly WaitingPoll[],
  ended: readonly Row[],
  skipLocked: boolean,
  result: (row: Row) => R,
): Map<string, R | null> {
  const results = new Map<string, R | null>(skipLocked ? [] : polls.map((poll) => [poll.pollId, null]));
  for (const row of ended) results.set(row.poll_id, result(row));
  return results;
}

/**
 * The end of polls whose clients left (nothing to answer): for each, its queue's idle clock
 * restarts and, when the poll still holds it, the queue is released, as finishPoll does for one.
 * By poll id: true, or null when the queue no longer exists.
 */
export async function endLeftPolls(db: Database, polls: readonly WaitingPoll[], skipLocked: boolean): Promise<Map<string, true | null>> {
  const { rows } = await sql<{ poll_id: string }>`
    WITH ${lockedPollEnds(polls, skipLocked)}, ended AS (
      UPDATE event_queues eq SET
        last_active_at = now(),
        poll_id = CASE WHEN q.holds THEN NULL ELSE eq.poll_id END,
        poll_lease_until = CASE WHEN q.holds THEN NULL ELSE eq.poll_lease_until END
      FROM q WHERE eq.id = q.id
    )
    SELECT ended_poll::text AS poll_id FROM q
  `.execute(db);
  return endResults(polls, rows, skipLocked, () => true as const);
}
