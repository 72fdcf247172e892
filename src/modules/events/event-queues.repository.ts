import { sql } from 'kysely';
import type { Database } from '../../db/database.js';
import { EVENTS_CHANNEL } from '../event-log/event-log.repository.js';

export interface NewEventQueue {
  id: string;
  realmId: number;
  userId: number;
  /** null accepts every type. */
  eventTypes: string[] | null;
  lifespanSeconds: number;
  /** The client's user_list_incomplete capability: it gets no inaccessible-user placeholder events. */
  userListIncomplete: boolean;
}

/**
 * Creates a queue; when the user already has `maxPerUser` queues, the least recently used ones
 * (last poll or creation; a queue with a poll in progress counts as in use) are deleted first and
 * their waiting polls woken, so they answer BAD_EVENT_QUEUE_ID (spec O12). Runs in the user's
 * transaction (src/db/transactions.ts), so the count cannot change underneath.
 */
export function createEventQueue(db: Database, queue: NewEventQueue, maxPerUser: number) {
  return db
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
      user_list_incomplete: queue.userListIncomplete,
    });
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
 * docs/api.md §2.10 Expiry), with their events, and wakes anything still waiting on them; a lease left by a
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
        .limit(limit)
        // A queue a write holds (it appends to expired queues too) is left for the next sweep:
        // waiting for it, while holding other users' queues, could deadlock with a commit group
        // (src/db/commit-groups.ts), which holds several users' queues at once.
        .forUpdate()
        .skipLocked(),
    )
    .returning(sql<string>`pg_notify(${EVENTS_CHANNEL}, id::text)`.as('notified'))
    .execute();
  return deleted.length;
}
