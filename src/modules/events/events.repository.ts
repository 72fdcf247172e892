import { type Kysely, sql, type Transaction } from 'kysely';
import type { Database } from '../../db/database.js';
import type { DB } from '../../db/types.js';
import { KeyedTurns } from '../../lib/keyed-turns.js';

/** An event as clients receive it, before the queue appends its "id" (spec §3.15). */
export interface ApiEvent {
  type: string;
  [key: string]: unknown;
}

export const EVENTS_CHANNEL = 'zulip_events';
export const USER_EVENT_LOCK_NAMESPACE = 7001;

type Executor = Kysely<DB> | Transaction<DB>;

const userTurns = new KeyedTurns<number>();

/**
 * Runs `work` in a transaction holding the user's event lock, which serializes the user's
 * event-producing writes and register (spec §2.10 "Register consistency") across instances.
 * Within this process the user's calls first wait their turn WITHOUT a pool connection: otherwise a
 * burst of one user's writes would fill the pool with connections waiting for that lock, and every
 * other request of the instance would time out waiting for a connection (503).
 */
export function inUserEventTransaction<T>(db: Database, userId: number, work: (trx: Transaction<DB>) => Promise<T>): Promise<T> {
  return userTurns.run(userId, () =>
    db.transaction().execute(async (trx) => {
      await sql`SELECT pg_advisory_xact_lock(${USER_EVENT_LOCK_NAMESPACE}, ${userId})`.execute(trx);
      return work(trx);
    }),
  );
}

/** How many users have an event transaction running or waiting in this process. */
export const usersWithEventTransactions = (): number => userTurns.activeKeys;

/**
 * Appends events, in order, to every queue of the user that accepts their type, numbering them
 * per queue, and notifies waiting long polls on commit. One statement whatever the event count.
 */
export async function appendEvents(trx: Executor, realmId: number, userId: number, events: ApiEvent[]): Promise<void> {
  if (events.length === 0) return;
  // One JSON array, not a text[] of payloads: node-postgres escapes every element of an array
  // parameter (two regular expressions each), which cost milliseconds for a thousand events.
  // json_array_elements returns each element's text as sent, so payloads keep their key order.
  await sql`
    WITH queues AS (
      SELECT id, next_event_id, event_types FROM event_queues WHERE user_id = ${userId} FOR UPDATE
    ), incoming AS (
      SELECT payload, ord, payload->>'type' AS type
      FROM json_array_elements(${JSON.stringify(events)}::json) WITH ORDINALITY AS e(payload, ord)
    ), accepting AS (
      -- Each queue's type list (at most 256 names) is searched once per distinct event type, not
      -- once per event: the events then meet their queues through a hash join on the type.
      SELECT q.id AS queue_id, q.next_event_id, t.type
      FROM queues q JOIN (SELECT DISTINCT type FROM incoming) t ON q.event_types IS NULL OR t.type = ANY (q.event_types)
    ), numbered AS (
      SELECT a.queue_id, a.next_event_id + row_number() OVER (PARTITION BY a.queue_id ORDER BY i.ord) - 1 AS id, i.payload
      FROM accepting a JOIN incoming i ON i.type = a.type
    ), inserted AS (
      INSERT INTO events (queue_id, id, realm_id, payload)
      SELECT queue_id, id, ${realmId}, payload FROM numbered
      RETURNING queue_id
    ), counted AS (
      SELECT queue_id, count(*) AS n FROM inserted GROUP BY queue_id
    ), bumped AS (
      UPDATE event_queues eq SET next_event_id = eq.next_event_id + counted.n
      FROM counted WHERE eq.id = counted.queue_id
      RETURNING eq.id
    )
    SELECT pg_notify(${EVENTS_CHANNEL}, id::text) FROM bumped
  `.execute(trx);
}

export interface NewEventQueue {
  id: string;
  realmId: number;
  userId: number;
  /** null accepts every type. */
  eventTypes: string[] | null;
  lifespanSeconds: number;
}

/**
 * Creates a queue; when the user already has `maxPerUser` queues, the least recently used ones
 * (last poll or creation; a queue with a poll in progress counts as in use) are deleted first and
 * their waiting polls woken, so they answer BAD_EVENT_QUEUE_ID (spec O12). Runs under the user's
 * event lock (inUserEventTransaction), so the count cannot change underneath.
 */
export async function createEventQueue(db: Executor, queue: NewEventQueue, maxPerUser: number): Promise<void> {
  await db
    .with('evicted', (db) =>
      db
        .deleteFrom('event_queues')
        .where('id', 'in', (eb) =>
          eb
            .selectFrom('event_queues')
            .select('id')
            .where('user_id', '=', queue.userId)
            .orderBy(sql`poll_id IS NOT NULL`, 'desc')
            .orderBy('last_active_at', 'desc')
            .orderBy('created_at', 'desc')
            .offset(maxPerUser - 1),
        )
        // RETURNING runs for every deleted row (an unreferenced SELECT CTE would not run at all).
        .returning(sql<string>`pg_notify(${EVENTS_CHANNEL}, id::text)`.as('notified')),
    )
    .insertInto('event_queues')
    .values({
      id: queue.id,
      realm_id: queue.realmId,
      user_id: queue.userId,
      event_types: queue.eventTypes,
      lifespan_seconds: queue.lifespanSeconds,
    })
    .execute();
}

/** The queue's pending events in id order, each with its "id" appended last. */
export async function listQueueEvents(db: Database, queueId: string): Promise<ApiEvent[]> {
  const rows = await db
    .selectFrom('events')
    .select(['id', 'payload'])
    .where('queue_id', '=', queueId)
    .orderBy('id')
    .execute();
  return rows.map((row) => ({ ...(row.payload as ApiEvent), id: row.id }));
}

/** Deletes one of the user's queues (its events go with it) and wakes a poll waiting on it. */
export async function deleteEventQueue(db: Database, owner: { realmId: number; id: number }, queueId: string): Promise<boolean> {
  const { rows } = await sql`
    WITH deleted AS (
      DELETE FROM event_queues WHERE id = ${queueId}::uuid AND user_id = ${owner.id} AND realm_id = ${owner.realmId}
      RETURNING id
    )
    SELECT pg_notify(${EVENTS_CHANNEL}, id::text) FROM deleted
  `.execute(db);
  return rows.length > 0;
}

/**
 * Deletes up to `limit` queues idle longer than their lifespan that no live poll holds (spec
 * §2.10 Expiry), with their events, and wakes anything still waiting on them; a lease left by a
 * crashed instance runs out by itself. Bounded, so that one statement stays well within the
 * statement timeout however many queues expired at once: the sweep repeats it.
 */
export async function deleteExpiredQueues(db: Database, limit: number): Promise<number> {
  const deleted = await db
    .deleteFrom('event_queues')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('event_queues')
        .select('id')
        .where(sql<boolean>`last_active_at + make_interval(secs => lifespan_seconds) < now()`)
        .where((eb) => eb.or([eb('poll_lease_until', 'is', null), eb('poll_lease_until', '<', sql<Date>`now()`)]))
        .limit(limit),
    )
    .returning(sql<string>`pg_notify(${EVENTS_CHANNEL}, id::text)`.as('notified'))
    .execute();
  return deleted.length;
}
