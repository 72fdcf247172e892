import { type RawBuilder, sql } from 'kysely';
import type { Database } from '../../db/database.js';
import type { Transactions } from '../../db/transactions.js';

/** An event as clients receive it, before the queue appends its "id" (docs/api.md §3.15). */
export interface ApiEvent {
  type: string;
  [key: string]: unknown;
}

export const EVENTS_CHANNEL = 'zulip_events';

/** The arguments a write statement that appends events must have (see withEventAppend). */
export interface EventAppendArgs extends Record<string, unknown> {
  userId: number;
  realmId: number;
  /** The events as one JSON array, in order ('[]': none). */
  events: string;
  /** A queue this write would leave with more pending events is deleted instead (QUEUE_MAX_PENDING_EVENTS). */
  maxPendingEvents: number;
}

/** Where a user's event-producing writes run, and the bound they keep on each queue's pending events. */
export interface EventWrites {
  transactions: Transactions;
  maxPendingEvents: number;
}

/**
 * The CTEs that append events, in order, to every queue of the user that accepts their type,
 * numbering them per queue, and notify waiting long polls on commit: the first part of every
 * write statement (settings, navigation views), which then adds its own CTEs. A write that refuses
 * raises (refuse_write), which undoes these too; so they need no condition of their own.
 *
 * Each queue's counter is bumped first and its events numbered from what the UPDATE returns: it
 * locks the row and works on its latest version, so no separate SELECT … FOR UPDATE is needed, and
 * a queue deleted meanwhile (expiry, DELETE /events) gets nothing.
 *
 * The events travel as one JSON array (node-postgres escapes every element of an array parameter,
 * milliseconds for a thousand events); json_array_elements returns each element's text as sent, so
 * payloads keep their key order.
 *
 * A queue the write would leave with more than `maxPendingEvents` pending events is deleted instead
 * and its poll woken: the client gets BAD_EVENT_QUEUE_ID and registers again, as after expiry
 * (docs/api.md §2.10), so a queue whose client stops polling stops growing.
 */
export function withEventAppend(db: Database, args: EventAppendArgs) {
  // Raw: a table function WITH ORDINALITY (parenthesized: Kysely writes a raw CTE body as it is).
  const items = sql<IncomingItem>`(
    SELECT e.payload, e.ord, e.payload->>'type', 1
    FROM json_array_elements(${args.events}::json) WITH ORDINALITY AS e(payload, ord))`;
  const recipients = sql<Recipient>`(SELECT 1, ${args.userId}::integer)`;
  return appendEvents(db, { ...args, items, recipients, onlyUserId: args.userId });
}

/** An event to append: its payload, its place in the write's order, its type and its set of recipients. */
interface IncomingItem {
  payload: unknown;
  ord: number;
  type: string;
  set_no: number;
}

/** A member of a set of recipients. */
interface Recipient {
  set_no: number;
  user_id: number;
}

/**
 * The CTEs of withEventAppend and withEventsForUsers: `items` lists the events, in order, each
 * with the number of its set of recipients, and `recipients` the sets' members. Events meet
 * queues through the sets (a few), never one row per event and recipient: a subscribe's peer
 * events, a hundred of them to the same thousand users, are one set of a thousand rows, not a
 * hundred thousand rows to join and sort. `onlyUserId`: they all go to that user, whose queues
 * are then found by their index (the planner cannot tell how few rows the CTEs hold).
 */
function appendEvents(
  db: Database,
  args: {
    realmId: number;
    maxPendingEvents: number;
    items: RawBuilder<IncomingItem>;
    recipients: RawBuilder<Recipient>;
    onlyUserId?: number;
  },
) {
  const single = args.onlyUserId;
  return (
    db
      // Materialized: referenced twice, and each item's fields taken out of its JSON once.
      .with(
        (cte) => cte('incoming_item(payload, ord, type, set_no)').materialized(),
        () => args.items,
      )
      .with('recipient(set_no, user_id)', () => args.recipients)
      // Which (set, type) pairs each recipient's queues accept (a queue's types never change): each
      // queue's type list (at most 256 names) is searched once per distinct type of its sets.
      .with('accepting', (db) =>
        db
          .selectFrom('event_queues as q')
          .innerJoin('recipient as r', 'r.user_id', 'q.user_id')
          .innerJoin(
            (eb) => eb.selectFrom('incoming_item').select(['set_no', 'type']).distinct().as('t'),
            (join) => join.onRef('t.set_no', '=', 'r.set_no').on(sql<boolean>`(q.event_types IS NULL OR t.type = ANY (q.event_types))`),
          )
          .select(['q.id as queue_id', 't.set_no', 't.type'])
          .$if(single !== undefined, (qb) => qb.where('q.user_id', '=', single!))
          .$if(single === undefined, (qb) => qb.where('q.realm_id', '=', args.realmId)),
      )
      // Several users' queues: locked first, in (user, id) order, the order commit groups lock their
      // members' queues in; else the update would lock them in its plan's order and could deadlock
      // with a group of small writes. Not referenced, so never run, for one user's own queues.
      .with(
        (cte) => cte('locked_queue').materialized(),
        (db) =>
          db
            .selectFrom('event_queues as lq')
            .select('lq.id')
            .where('lq.id', 'in', (eb) => eb.selectFrom('accepting').select('accepting.queue_id'))
            .orderBy('lq.user_id')
            .orderBy('lq.id')
            .forUpdate(),
      )
      // Each queue's events: (queue, item) pairs only, the payloads joined back at the insert.
      .with('delivery', (db) =>
        db
          .selectFrom('accepting as a')
          .innerJoin('incoming_item as i', (join) => join.onRef('i.set_no', '=', 'a.set_no').onRef('i.type', '=', 'a.type'))
          .$if(single === undefined, (qb) => qb.innerJoin('locked_queue as l', 'l.id', 'a.queue_id'))
          .select(['a.queue_id', 'i.ord']),
      )
      .with('event_count', (db) =>
        db
          .selectFrom('delivery')
          .select((eb) => ['delivery.queue_id', eb.fn.countAll<number>().as('n')])
          .groupBy('delivery.queue_id'),
      )
      .with('bumped_queue', (db) =>
        db
          .updateTable('event_queues as eq')
          .from('event_count as c')
          .set((eb) => ({ next_event_id: eb('eq.next_event_id', '+', eb.ref('c.n')) }))
          .$if(single !== undefined, (qb) => qb.where('eq.user_id', '=', single!))
          .whereRef('eq.id', '=', 'c.queue_id')
          // Pending afterwards: the ids after the acknowledged one. Checked on the row's latest
          // version, like the numbering (a poll may have acknowledged meanwhile).
          .where((eb) =>
            eb(
              eb(eb('eq.next_event_id', '+', eb.ref('c.n')), '-', eb.ref('eq.last_acked_id')),
              '<=',
              sql<number>`${args.maxPendingEvents}::bigint + 1`,
            ),
          )
          // Data-modifying CTEs always run to the end, RETURNING included: one NOTIFY per queue.
          .returning((eb) => [
            'eq.id',
            eb('eq.next_event_id', '-', eb.ref('c.n')).as('first_id'),
            sql<string>`pg_notify(${sql.lit(EVENTS_CHANNEL)}, eq.id::text)`.as('notified'),
          ]),
      )
      // The queues the update skipped for their cap, known from its output rather than from the
      // opposite condition: rechecked on a row a poll changed meanwhile, that could fail as well, and
      // the queue would lose these events without an error. Reading bumped_queue also runs the update
      // first, so the two never touch the same row. The NOTIFY ends a poll waiting on a dropped queue.
      .with('dropped_queue', (db) =>
        db
          // Not aliased: Kysely cannot type an aliased DELETE inside a CTE.
          .deleteFrom('event_queues')
          .$if(single !== undefined, (qb) => qb.where('event_queues.user_id', '=', single!))
          .where('event_queues.id', 'in', (eb) => eb.selectFrom('event_count').select('queue_id'))
          .where('event_queues.id', 'not in', (eb) => eb.selectFrom('bumped_queue').select('id'))
          .returning(sql<string>`pg_notify(${sql.lit(EVENTS_CHANNEL)}, event_queues.id::text)`.as('notified')),
      )
      .with('inserted_event', (db) =>
        db
          .insertInto('events')
          .columns(['queue_id', 'id', 'realm_id', 'payload'])
          .expression((eb) =>
            eb
              .selectFrom('bumped_queue as b')
              .innerJoin(
                // Numbered on the narrow pairs: the sort never carries the payloads.
                (eb) =>
                  eb
                    .selectFrom('delivery as d')
                    .select((eb) => [
                      'd.queue_id',
                      'd.ord',
                      eb.fn
                        .agg<number>('row_number')
                        .over((over) => over.partitionBy('d.queue_id').orderBy('d.ord'))
                        .as('n'),
                    ])
                    .as('numbered'),
                (join) => join.onRef('numbered.queue_id', '=', 'b.id'),
              )
              .innerJoin('incoming_item as i', 'i.ord', 'numbered.ord')
              .select((eb) => [
                'b.id as queue_id',
                eb(eb('b.first_id', '-', sql.lit(1)), '+', eb.ref('numbered.n')).as('id'),
                sql<number>`${args.realmId}::integer`.as('realm_id'),
                'i.payload',
              ]),
          ),
      )
  );
}

export const EVENT_APPEND_ARGUMENTS = ['userId', 'realmId', 'events', 'maxPendingEvents'] as const;

// --- Events with recipients of their own (subscription membership changes) ---

/** The arguments of a statement that appends events to several users' queues (see withEventsForUsers). */
export interface MultiUserEventArgs extends Record<string, unknown> {
  realmId: number;
  /** The distinct lists of recipients, `[[ids…]…]`, as one JSON array. */
  recipients: string;
  /** `[{"to":n,"event":{…}}…]`, n the 0-based index of its list in `recipients`, as one JSON array, in order ('[]': none). */
  events: string;
  maxPendingEvents: number;
}

export const MULTI_USER_EVENT_ARGUMENTS = ['realmId', 'recipients', 'events', 'maxPendingEvents'] as const;

/** An event and the users it goes to. */
export interface AddressedEvent {
  users: number[];
  event: ApiEvent;
}

/** The `recipients` and `events` arguments of withEventsForUsers: each distinct list of users sent once. */
export function addressedEventArgs(events: AddressedEvent[]): Pick<MultiUserEventArgs, 'recipients' | 'events'> {
  const lists = new Map<string, number>();
  const recipients: number[][] = [];
  const items = events.map(({ users, event }) => {
    const key = users.join(',');
    let to = lists.get(key);
    if (to === undefined) {
      to = recipients.push(users) - 1;
      lists.set(key, to);
    }
    return { to, event };
  });
  return { recipients: JSON.stringify(recipients), events: JSON.stringify(items) };
}

/**
 * withEventAppend for events each sent to its own list of users: every queue of each recipient
 * that accepts the event's type gets it, numbered per queue in the array's order, and the same
 * cap applies (a queue left with more than maxPendingEvents pending is deleted instead). For the
 * writes that change what several users see (subscribe, unsubscribe), which hold their
 * organization's membership lock (src/db/transactions.ts) rather than each recipient's.
 */
export function withEventsForUsers(db: Database, args: MultiUserEventArgs) {
  const items = sql<IncomingItem>`(
    SELECT e.item->'event', e.ord, e.item->'event'->>'type', (e.item->>'to')::integer + 1
    FROM json_array_elements(${args.events}::json) WITH ORDINALITY AS e(item, ord))`;
  const recipients = sql<Recipient>`(
    SELECT l.ord::integer, r.user_id::integer
    FROM json_array_elements(${args.recipients}::json) WITH ORDINALITY AS l(users, ord)
    CROSS JOIN LATERAL json_array_elements_text(l.users) AS r(user_id))`;
  return appendEvents(db, { realmId: args.realmId, maxPendingEvents: args.maxPendingEvents, items, recipients });
}
