import { sql } from 'kysely';
import { beforeEach, describe, expect, it } from 'vitest';
import { createDatabase } from '../src/db/database.js';
import { USER_EVENT_LOCK_NAMESPACE } from '../src/db/transactions.js';
import { api, createTestContext, multipart, useTestContext } from './helpers/app.js';
import { errorBody, INTERNAL_ERROR, OK } from './helpers/envelope.js';
import { createQueue, ids, queueEvents } from './helpers/fixture.js';
import { auditRows, bulk, PROPERTIES_URL, subscriptionOf, writableState } from './helpers/subscriptions.js';
import { queueRow } from './helpers/events.js';
import { eventually } from './helpers/wait.js';

/** Cost, scale, atomicity and concurrency of the bulk update (docs/api.md §3.2 step 5, design "Performance"). */

const { U, P, Q, W } = ids;

const ctx = useTestContext(createTestContext);
beforeEach(async () => {
  // More than one subscription, so that entries touch several rows.
  await ctx.db
    .insertInto('subscriptions')
    .values([
      { realm_id: 1, user_id: U, stream_id: Q },
      { realm_id: 1, user_id: U, stream_id: W },
    ])
    .execute();
});

const PROPERTY_CYCLE = [
  (i: number) => ({ property: 'color', value: `#${(i % 4096).toString(16).padStart(3, '0')}` }),
  (i: number) => ({ property: 'is_muted', value: i % 3 === 0 }),
  (i: number) => ({ property: 'in_home_view', value: i % 5 === 0 }),
  (i: number) => ({ property: 'pin_to_top', value: i % 2 === 0 }),
  (i: number) => ({ property: 'desktop_notifications', value: i % 7 === 0 }),
  (i: number) => ({ property: 'wildcard_mentions_notify', value: i % 2 === 1 }),
];

/** n valid entries spread over U's three subscriptions and every kind of property. */
function entries(n: number) {
  const streams = [P, Q, W];
  return Array.from({ length: n }, (_, i) => ({
    stream_id: streams[i % streams.length]!,
    ...PROPERTY_CYCLE[i % PROPERTY_CYCLE.length]!(i),
  }));
}

/** What the entries should leave behind: the last value per (stream, stored column). */
function expectedFinal(list: ReturnType<typeof entries>) {
  const final = new Map<number, Record<string, unknown>>();
  for (const entry of list) {
    const row = final.get(entry.stream_id) ?? {};
    if (entry.property === 'in_home_view') row.is_muted = !entry.value;
    else row[entry.property] = entry.value;
    final.set(entry.stream_id, row);
  }
  return final;
}

const eventCount = (list: ReturnType<typeof entries>) =>
  list.reduce((sum, entry) => sum + (entry.property === 'is_muted' || entry.property === 'in_home_view' ? 2 : 1), 0);

describe('bulk update cost and scale', () => {
  it('runs the same number of statements for 1 and for 500 entries', async () => {
    await createQueue(ctx.db, 'U');
    await createQueue(ctx.db, 'U');
    const count = async (n: number) => {
      ctx.database.statements.length = 0;
      const res = await bulk(ctx, entries(n));
      expect(res.body).toBe(OK);
      return ctx.database.statements.length;
    };
    const one = await count(1);
    const many = await count(500);
    expect(many).toBe(one);
    // Two round trips: authentication (with the rate-limit decision); then BEGIN, the lock, the
    // checked write (settings, audit rows and events in one statement) and COMMIT, in one burst.
    expect(one).toBe(5);
    expect(ctx.database.statements.slice(1)).toEqual(['BEGIN', 'SELECT pg_advisory_xact_lock($1, $2)', expect.any(String), 'COMMIT']);
  });

  it('a failing request costs no more than a successful one, and a shape error at index 0 needs no query', async () => {
    await createQueue(ctx.db, 'U');
    ctx.database.statements.length = 0;
    await bulk(ctx, [...entries(300), { stream_id: 999999, property: 'pin_to_top', value: true }]);
    // The same statements: the checked write refuses, and its transaction rolls back: nothing is written.
    expect(ctx.database.statements).toHaveLength(5);
    expect(await ctx.db.selectFrom('subscription_audit_log').select('id').execute()).toEqual([]);
    expect(await ctx.db.selectFrom('events').select('id').execute()).toEqual([]);
    ctx.database.statements.length = 0;
    await bulk(ctx, [5, ...entries(300)]);
    expect(ctx.database.statements).toHaveLength(1); // authentication only
  });

  it('applies 10,000 entries in one request; a queue their events would take past QUEUE_MAX_PENDING_EVENTS is dropped', async () => {
    const queue = await createQueue(ctx.db, 'U');
    const list = entries(10_000);
    // is_muted and in_home_view make two events each.
    expect(eventCount(list)).toBeGreaterThan(ctx.config.queueMaxPendingEvents);
    const res = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      ...multipart({ subscription_data: JSON.stringify(list) }),
    });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    for (const [streamId, values] of expectedFinal(list)) {
      expect(await subscriptionOf(ctx, U, streamId)).toMatchObject(values);
    }
    expect(await queueRow(ctx.db, queue)).toBeUndefined();
    expect(await queueEvents(ctx.db, queue)).toEqual([]);
    // One audit row per (channel, stored setting), with its final value, not one per entry.
    const final = [...expectedFinal(list)].flatMap(([streamId, values]) =>
      Object.entries(values).map(([property, value]) => [streamId, property, value]),
    );
    expect(final).toHaveLength(6);
    const audit = await auditRows(ctx);
    expect(audit.map((row) => [row.stream_id, row.property, row.new_value]).sort()).toEqual(final.sort());
  });

  it('10,000 one-event entries reach a caught-up queue whole (the default cap), numbered in order', async () => {
    const queue = await createQueue(ctx.db, 'U');
    const list = Array.from({ length: 10_000 }, (_, i) => ({ stream_id: [P, Q, W][i % 3]!, property: 'pin_to_top', value: i % 2 === 0 }));
    const res = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      ...multipart({ subscription_data: JSON.stringify(list) }),
    });
    expect(res.body).toBe(OK);
    const events = await queueEvents(ctx.db, queue);
    expect(events).toHaveLength(ctx.config.queueMaxPendingEvents);
    expect(events.map((e) => e.id)).toEqual(events.map((_, index) => index));
    expect(events.at(-1)).toMatchObject({ property: 'pin_to_top', value: false, stream_id: list.at(-1)!.stream_id, id: 9_999 });
  });
});

describe('bulk update atomicity', () => {
  it('a failure after the writes rolls back the settings, the audit rows and the events', async () => {
    const queue = await createQueue(ctx.db, 'U');
    // Make the last statement of the transaction (appending events) fail.
    await sql`CREATE FUNCTION fail_events() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'injected failure'; END $$`.execute(ctx.db);
    await sql`CREATE TRIGGER fail_events BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION fail_events()`.execute(ctx.db);
    const before = await writableState(ctx);
    const res = await bulk(ctx, [{ stream_id: P, property: 'color', value: '#ffffff' }]);
    expect(res.statusCode).toBe(500);
    expect(res.body).toBe(INTERNAL_ERROR);
    expect(await writableState(ctx)).toEqual(before);
    expect(await queueEvents(ctx.db, queue)).toEqual([]);
  });
});

describe('bulk update concurrency', () => {
  it('20 simultaneous requests by U serialize: each one whole, events contiguous and numbered', async () => {
    const queue = await createQueue(ctx.db, 'U');
    const requests = Array.from({ length: 20 }, (_, i) => ({
      color: `#${(0x100000 + i).toString(16)}`,
      pin: i % 2 === 0,
      data: [
        { stream_id: P, property: 'color', value: `#${(0x100000 + i).toString(16)}` },
        { stream_id: P, property: 'pin_to_top', value: i % 2 === 0 },
        { stream_id: Q, property: 'is_muted', value: i % 2 === 1 },
      ],
    }));
    const responses = await Promise.all(requests.map((request) => bulk(ctx, request.data)));
    for (const res of responses) expect(res.body).toBe(OK);

    const events = await queueEvents(ctx.db, queue);
    expect(events).toHaveLength(20 * 4);
    expect(events.map((e) => e.id)).toEqual(events.map((_, index) => index));
    const seen = new Set<number>();
    for (let set = 0; set < 20; set++) {
      const [color, pin, inHomeView, muted] = events.slice(set * 4, set * 4 + 4);
      const index = requests.findIndex((request) => request.color === color!.value);
      expect(index).toBeGreaterThanOrEqual(0);
      seen.add(index);
      const request = requests[index]!;
      expect([color!.property, pin!.property, inHomeView!.property, muted!.property]).toEqual([
        'color',
        'pin_to_top',
        'in_home_view',
        'is_muted',
      ]);
      expect(pin!.value).toBe(request.pin);
      expect(muted!.value).toBe(request.data[2]!.value);
      expect(inHomeView!.value).toBe(!request.data[2]!.value);
    }
    expect(seen.size).toBe(20);

    // The final state is that of the request whose events came last.
    const last = requests.find((request) => request.color === events.at(-4)!.value)!;
    expect(await subscriptionOf(ctx, U, P)).toMatchObject({ color: last.color, pin_to_top: last.pin });
    expect((await subscriptionOf(ctx, U, Q)).is_muted).toBe(last.data[2]!.value);
    // Each request read the values the previous one left: the audit rows form one chain.
    const audit = await auditRows(ctx);
    expect(audit).toHaveLength(60);
    const colors = audit.filter((row) => row.property === 'color');
    expect(colors[0]!.old_value).toBe('#76ce90');
    for (let i = 1; i < colors.length; i++) expect(colors[i]!.old_value).toBe(colors[i - 1]!.new_value);
    expect(colors.map((row) => row.new_value)).toEqual(events.filter((e) => e.property === 'color').map((e) => e.value));
  });

  it('a queue deleted while the write waits for it gets no event, the others theirs, and the write succeeds', async () => {
    const deleted = await createQueue(ctx.db, 'U');
    const kept = await createQueue(ctx.db, 'U');
    const holder = createDatabase(ctx.database.url, { poolMax: 1 });
    try {
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let markDeleted!: () => void;
      const deletedUncommitted = new Promise<void>((resolve) => (markDeleted = resolve));
      // Deleted (the sweeper or DELETE /events) but not yet committed when the write reaches the queue.
      const deleting = holder.db.transaction().execute(async (tx) => {
        await tx.deleteFrom('event_queues').where('id', '=', deleted).execute();
        markDeleted();
        await released;
      });
      // The DELETE must hold the row before the write starts; a write first would take the lock itself.
      await deletedUncommitted;
      expect((await ctx.db.selectFrom('event_queues').select('id').where('id', '=', deleted).execute()).length).toBe(1);
      const response = bulk(ctx, [{ stream_id: P, property: 'pin_to_top', value: true }]);
      try {
        // A lock wait in this test's database (other test files run beside it).
        await eventually(
          async () =>
            (
              await sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE NOT l.granted AND a.datname = current_database()`.execute(ctx.db)
            ).rows[0]!.n > 0,
        );
      } finally {
        // Released whatever happened: a holder left waiting would hang the close below.
        release();
      }
      await deleting;
      expect((await response).body).toBe(OK);
    } finally {
      await holder.close();
    }
    expect(await queueEvents(ctx.db, deleted)).toEqual([]);
    expect(await queueEvents(ctx.db, kept)).toEqual([
      { type: 'subscription', op: 'update', stream_id: P, property: 'pin_to_top', value: true, id: 0 },
    ]);
    expect(
      (await ctx.db.selectFrom('event_queues').select('next_event_id').where('id', '=', kept).executeTakeFirstOrThrow()).next_event_id,
    ).toBe(1);
    expect(await subscriptionOf(ctx, U, P)).toMatchObject({ pin_to_top: true });
    expect(await auditRows(ctx)).toHaveLength(1);
  });

  it('writes of different users arriving together commit together, each with its own outcome', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    const queueV = await createQueue(ctx.db, 'V');
    const pin = [{ stream_id: P, property: 'pin_to_top', value: true }];
    const [u, v] = await Promise.all([bulk(ctx, pin), bulk(ctx, pin, 'V')]);
    expect([u.body, v.body]).toEqual([OK, OK]);
    // One commit: the rows of both carry the same transaction id.
    const writers = await sql<{
      acting_user_id: number;
      xid: string;
    }>`SELECT acting_user_id, xmin::text AS xid FROM subscription_audit_log ORDER BY acting_user_id`.execute(ctx.db);
    expect(writers.rows).toEqual([
      { acting_user_id: U, xid: expect.any(String) },
      { acting_user_id: ids.V, xid: writers.rows[0]!.xid },
    ]);
    expect((await queueEvents(ctx.db, queueV)).map((event) => event.id)).toEqual([0]);

    // A refusal of one (no such channel) leaves the other's write whole, and writes nothing of its own.
    const [again, refused] = await Promise.all([
      bulk(ctx, [{ stream_id: P, property: 'pin_to_top', value: false }]),
      bulk(ctx, [{ stream_id: 999999, property: 'pin_to_top', value: false }], 'V'),
    ]);
    expect(again.body).toBe(OK);
    expect(refused.statusCode).toBe(400);
    expect(refused.body).toBe(errorBody('Invalid channel ID'));
    expect(await subscriptionOf(ctx, U, P)).toMatchObject({ pin_to_top: false });
    expect(await subscriptionOf(ctx, ids.V, P)).toMatchObject({ pin_to_top: true });
    expect((await queueEvents(ctx.db, queueU)).map((event) => [event.id, event.value])).toEqual([
      [0, true],
      [1, false],
    ]);
    expect((await queueEvents(ctx.db, queueV)).map((event) => event.id)).toEqual([0]);
    expect((await auditRows(ctx)).map((row) => [row.acting_user_id, row.new_value])).toEqual([
      [U, true],
      [ids.V, true],
      [U, false],
    ]);
  });

  it('an audit row is stamped when it is written, after the lock, not when its transaction began', async () => {
    const other = createDatabase(ctx.database.url, { poolMax: 1 });
    try {
      await sql`SELECT pg_advisory_lock(${USER_EVENT_LOCK_NAMESPACE}, ${U})`.execute(other.db);
      const response = bulk(ctx, [{ stream_id: P, property: 'pin_to_top', value: true }]);
      await eventually(
        async () =>
          (
            await sql<{
              n: number;
            }>`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`.execute(
              ctx.db,
            )
          ).rows[0]!.n === 1,
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      const releasedAt = (await sql<{ at: Date }>`SELECT clock_timestamp() AS at`.execute(other.db)).rows[0]!.at;
      await sql`SELECT pg_advisory_unlock(${USER_EVENT_LOCK_NAMESPACE}, ${U})`.execute(other.db);
      expect((await response).body).toBe(OK);
      const written = await ctx.db.selectFrom('subscription_audit_log').select('created_at').executeTakeFirstOrThrow();
      expect(written.created_at.getTime()).toBeGreaterThanOrEqual(releasedAt.getTime());
    } finally {
      await other.close();
    }
  });
});
