import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { badQueueBody, expectError, OK, success } from './helpers/envelope.js';
import { deleteQueue, getEvents, pendingEvents, pinEvent, queueRow, registerQueue, setPinToTop, storedEventIds } from './helpers/events.js';
import { databaseNow } from './helpers/database.js';

/**
 * GET and DELETE /api/v1/events without waiting (docs/api.md §3.13, docs/api.md §3.14; acceptance cases 159–163,
 * 166, 168, 170) and the delivery of the other modules' events through register's queues.
 */

const ctx = useTestContext(createTestContext);

/** Queue row and events, to prove a request changed nothing. */
async function queueState(queueId: string) {
  return { row: await queueRow(ctx.db, queueId), events: await storedEventIds(ctx.db, queueId) };
}

describe('GET /api/v1/events', () => {
  it('case 159: dont_block on a new queue answers [] without queue_id', async () => {
    const queueId = await registerQueue(ctx.app);
    const res = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1', dont_block: 'true' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(success({ events: [] }));
    const row = await queueRow(ctx.db, queueId);
    expect(row).toMatchObject({ last_acked_id: -1, poll_id: null, poll_lease_until: null });
  });

  it('case 160: unknown, malformed and foreign queue ids', async () => {
    const queueId = await registerQueue(ctx.app);
    const before = await queueState(queueId);
    for (const [id, as] of [
      ['abc', 'U'],
      [queueId, 'V'],
      ['00000000-0000-4000-8000-000000000000', 'U'],
      [queueId.toUpperCase(), 'U'],
      ['', 'U'],
    ] as const) {
      const res = await getEvents(ctx.app, { queue_id: id, last_event_id: '-1', dont_block: 'true' }, as);
      expect(res.statusCode).toBe(400);
      expect(res.body).toBe(badQueueBody(id));
    }
    expect(await queueState(queueId)).toEqual(before);
  });

  it('case 160: the exact body for queue_id=abc', async () => {
    const res = await getEvents(ctx.app, { queue_id: 'abc', last_event_id: '-1' });
    expect(res.body).toBe('{"result":"error","msg":"Bad event queue ID: abc","queue_id":"abc","code":"BAD_EVENT_QUEUE_ID"}');
  });

  it('case 161: missing queue_id or last_event_id are plain BAD_REQUEST errors', async () => {
    const queueId = await registerQueue(ctx.app);
    expectError(await getEvents(ctx.app, { queue_id: queueId }), "Missing 'last_event_id' argument");
    expectError(await getEvents(ctx.app, { queue_id: queueId, dont_block: 'true' }), "Missing 'last_event_id' argument");
    expectError(await getEvents(ctx.app, {}), "Missing 'queue_id' argument");
    expectError(await getEvents(ctx.app, { dont_block: 'true' }), "Missing 'queue_id' argument");
    expectError(await getEvents(ctx.app, { last_event_id: '-1', dont_block: 'true' }), "Missing 'queue_id' argument");
    expect((await getEvents(ctx.app, {})).body).toBe('{"result":"error","msg":"Missing \'queue_id\' argument","code":"BAD_REQUEST"}');
  });

  it('case 162: type errors come first, in table order', async () => {
    const queueId = await registerQueue(ctx.app);
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: 'x' }), 'last_event_id is not valid JSON');
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1', dont_block: '1' }), 'dont_block is not a boolean');
    expectError(await getEvents(ctx.app, { last_event_id: 'x' }), 'last_event_id is not valid JSON');
    expectError(await getEvents(ctx.app, { last_event_id: '"1"', dont_block: 'x' }), 'last_event_id is not an integer');
    expectError(await getEvents(ctx.app, { dont_block: '1' }), 'dont_block is not a boolean');
    expectError(await getEvents(ctx.app, { queue_id: 'abc', dont_block: 'yes' }), 'dont_block is not valid JSON');
  });

  it('case 163: acknowledgement, pruning and unknown ids', async () => {
    const queueId = await registerQueue(ctx.app);
    for (const value of [true, false, true]) expect((await setPinToTop(ctx.app, value)).statusCode).toBe(200);

    expect(await pendingEvents(ctx.app, queueId)).toEqual([pinEvent(true, 0), pinEvent(false, 1), pinEvent(true, 2)]);

    // Events remain: answered at once even without dont_block, and without queue_id.
    const res = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '1' });
    expect(res.body).toBe(success({ events: [pinEvent(true, 2)] }));
    expect(await storedEventIds(ctx.db, queueId)).toEqual([2]);
    expect((await queueRow(ctx.db, queueId))!.last_acked_id).toBe(1);

    const before = await queueState(queueId);
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '0' }), 'An event newer than 0 has already been pruned!');
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '5', dont_block: 'true' }), 'Event 5 was not in this queue');
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '3', dont_block: 'true' }), 'Event 3 was not in this queue');
    // Far beyond any id (and beyond bigint): still a plain 400, never a 500.
    const huge = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '1e30', dont_block: 'true' });
    expect(huge.statusCode).toBe(400);
    expect(huge.json().msg).toMatch(/^Event .* was not in this queue$/);
    expect(await queueState(queueId)).toEqual(before);

    expect(await pendingEvents(ctx.app, queueId, 'U', 1)).toEqual([pinEvent(true, 2)]);
    expect(await pendingEvents(ctx.app, queueId, 'U', 2)).toEqual([]);
    expect(await storedEventIds(ctx.db, queueId)).toEqual([]);
    expect((await queueRow(ctx.db, queueId))!.last_acked_id).toBe(2);
    // The newest acknowledged id stays acceptable; the next one is not assigned yet.
    expect(await pendingEvents(ctx.app, queueId, 'U', 2)).toEqual([]);
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '3', dont_block: 'true' }), 'Event 3 was not in this queue');
  });

  it('a new queue rejects ids below -1 as pruned and any other id as unknown', async () => {
    const queueId = await registerQueue(ctx.app);
    expectError(
      await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-2', dont_block: 'true' }),
      'An event newer than -2 has already been pruned!',
    );
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '0', dont_block: 'true' }), 'Event 0 was not in this queue');
  });

  it('an immediate answer restarts the idle clock; an error does not', async () => {
    const queueId = await registerQueue(ctx.app);
    await ctx.db
      .updateTable('event_queues')
      .set({ last_active_at: new Date('2020-01-01T00:00:00Z') })
      .execute();
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '7', dont_block: 'true' }), 'Event 7 was not in this queue');
    expect((await queueRow(ctx.db, queueId))!.last_active_at).toEqual(new Date('2020-01-01T00:00:00Z'));
    const answeredFrom = await databaseNow(ctx.db);
    await pendingEvents(ctx.app, queueId);
    expect((await queueRow(ctx.db, queueId))!.last_active_at.getTime()).toBeGreaterThanOrEqual(answeredFrom);
  });

  it('reports unknown parameters after the events; one statement besides authentication', async () => {
    const queueId = await registerQueue(ctx.app);
    ctx.database.statements.length = 0;
    const res = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1', dont_block: 'true', foo: '1', client: 'x' });
    expect(res.body).toBe(success({ events: [], ignored_parameters_unsupported: ['foo'] }));
    expect(ctx.database.statements).toHaveLength(2);
  });

  it('HEAD answers like GET without a body', async () => {
    const queueId = await registerQueue(ctx.app);
    const res = await api(ctx.app, { method: 'HEAD', url: `/api/v1/events?queue_id=${queueId}&last_event_id=-1&dont_block=true`, as: 'U' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('');
  });
});

describe('events delivered through registered queues', () => {
  it('muting gives two subscription events, in order; colour and single settings give one', async () => {
    const queueId = await registerQueue(ctx.app);
    const bulk = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      as: 'U',
      form: {
        subscription_data: JSON.stringify([
          { stream_id: 100, property: 'is_muted', value: true },
          { stream_id: 100, property: 'color', value: '#abcdef' },
        ]),
      },
    });
    expect(bulk.body).toBe(OK);
    const single = await api(ctx.app, {
      method: 'PATCH',
      url: '/api/v1/users/me/subscriptions/100',
      as: 'U',
      form: { property: 'in_home_view', value: 'true' },
    });
    expect(single.body).toBe(OK);
    const res = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1', dont_block: 'true' });
    expect(res.body).toBe(
      success({
        events: [
          { type: 'subscription', op: 'update', property: 'in_home_view', value: false, stream_id: 100, id: 0 },
          { type: 'subscription', op: 'update', property: 'is_muted', value: true, stream_id: 100, id: 1 },
          { type: 'subscription', op: 'update', property: 'color', value: '#abcdef', stream_id: 100, id: 2 },
          { type: 'subscription', op: 'update', property: 'in_home_view', value: true, stream_id: 100, id: 3 },
          { type: 'subscription', op: 'update', property: 'is_muted', value: false, stream_id: 100, id: 4 },
        ],
      }),
    );
  });

  it('case 166: a navigation_view queue gets navigation-view events and no subscription events', async () => {
    const views = await registerQueue(ctx.app, { event_types: '["navigation_view"]' });
    const all = await registerQueue(ctx.app);
    const other = await registerQueue(ctx.app, {}, 'V');
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    const add = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/navigation_views',
      as: 'U',
      form: { fragment: 'narrow/is/alerted', is_pinned: 'true', name: 'Alert Words' },
    });
    expect(add.body).toBe(OK);
    const update = await api(ctx.app, {
      method: 'PATCH',
      url: '/api/v1/navigation_views/narrow%2Fis%2Falerted',
      as: 'U',
      form: { is_pinned: 'false', name: 'Watched' },
    });
    expect(update.body).toBe(OK);
    const remove = await api(ctx.app, { method: 'DELETE', url: '/api/v1/navigation_views/narrow/is/alerted', as: 'U' });
    expect(remove.body).toBe(OK);

    const viewEvents = [
      { type: 'navigation_view', op: 'add', navigation_view: { fragment: 'narrow/is/alerted', is_pinned: true, name: 'Alert Words' } },
      { type: 'navigation_view', op: 'update', fragment: 'narrow/is/alerted', data: { name: 'Watched', is_pinned: false } },
      { type: 'navigation_view', op: 'remove', fragment: 'narrow/is/alerted' },
    ];
    const res = await getEvents(ctx.app, { queue_id: views, last_event_id: '-1', dont_block: 'true' });
    expect(res.body).toBe(success({ events: viewEvents.map((event, id) => ({ ...event, id })) }));
    expect(await pendingEvents(ctx.app, all)).toEqual([
      pinEvent(true, 0),
      ...viewEvents.map((event, index) => ({ ...event, id: index + 1 })),
    ]);
    expect(await pendingEvents(ctx.app, other, 'V')).toEqual([]);
  });

  it('a queue registered with event_types=[] receives nothing', async () => {
    const queueId = await registerQueue(ctx.app, { event_types: '[]' });
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    expect(await pendingEvents(ctx.app, queueId)).toEqual([]);
  });

  it('case 170: a rejected bulk update and a rolled-back one leave no event and no change', async () => {
    const queueId = await registerQueue(ctx.app);
    const rejected = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      as: 'U',
      form: {
        subscription_data: JSON.stringify([
          { stream_id: 100, property: 'pin_to_top', value: true },
          { stream_id: 101, property: 'pin_to_top', value: true },
        ]),
      },
    });
    expect(rejected.statusCode).toBe(400);
    expect(await pendingEvents(ctx.app, queueId)).toEqual([]);

    // Injected failure: the events insert fails after the settings were written.
    await sql`CREATE FUNCTION fail_event_insert() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'injected failure'; END $$`.execute(ctx.db);
    await sql`CREATE TRIGGER fail_event_insert BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION fail_event_insert()`.execute(ctx.db);
    const failed = await setPinToTop(ctx.app, true);
    expect(failed.statusCode).toBe(500);
    await sql`DROP TRIGGER fail_event_insert ON events`.execute(ctx.db);

    const sub = await ctx.db
      .selectFrom('subscriptions')
      .select('pin_to_top')
      .where('user_id', '=', 13)
      .where('stream_id', '=', 100)
      .executeTakeFirstOrThrow();
    expect(sub.pin_to_top).toBe(false);
    expect(await pendingEvents(ctx.app, queueId)).toEqual([]);
    expect((await queueRow(ctx.db, queueId))!.next_event_id).toBe(0);
  });
});

describe('DELETE /api/v1/events', () => {
  it('case 168: deletes the queue and its events; afterwards the id is unknown', async () => {
    const queueId = await registerQueue(ctx.app);
    const kept = await registerQueue(ctx.app);
    await setPinToTop(ctx.app, true);
    const res = await deleteQueue(ctx.app, { queue_id: queueId });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect(await queueRow(ctx.db, queueId)).toBeUndefined();
    expect(await storedEventIds(ctx.db, queueId)).toEqual([]);
    expect(await storedEventIds(ctx.db, kept)).toEqual([0]);

    const get = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1', dont_block: 'true' });
    expect(get.statusCode).toBe(400);
    expect(get.body).toBe(badQueueBody(queueId));
    const again = await deleteQueue(ctx.app, { queue_id: queueId });
    expect(again.statusCode).toBe(400);
    expect(again.body).toBe(badQueueBody(queueId));
  });

  it('case 168: queue_id is required (REQUEST_VARIABLE_MISSING)', async () => {
    const res = await deleteQueue(ctx.app, {});
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(
      '{"result":"error","msg":"Missing \'queue_id\' argument","var_name":"queue_id","code":"REQUEST_VARIABLE_MISSING"}',
    );
  });

  it("another user's or a malformed queue id is BAD_EVENT_QUEUE_ID and deletes nothing", async () => {
    const queueId = await registerQueue(ctx.app);
    for (const [id, as] of [
      [queueId, 'V'],
      ['abc', 'U'],
    ] as const) {
      const res = await deleteQueue(ctx.app, { queue_id: id }, as);
      expect(res.statusCode).toBe(400);
      expect(res.body).toBe(badQueueBody(id));
    }
    expect(await queueRow(ctx.db, queueId)).toBeDefined();
  });

  it('accepts queue_id from the query string and reports unknown parameters', async () => {
    const queueId = await registerQueue(ctx.app);
    const res = await api(ctx.app, { method: 'DELETE', url: `/api/v1/events?queue_id=${queueId}&foo=1`, as: 'U' });
    expect(res.body).toBe(success({ ignored_parameters_unsupported: ['foo'] }));
  });
});
