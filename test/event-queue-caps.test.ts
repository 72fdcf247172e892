import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildApp } from '../src/app.js';
import { createDatabase } from '../src/db/database.js';
import { PollRechecks } from '../src/modules/events/poll-rechecks.js';
import { api, createTestContext, type TestAppOptions, type TestContext } from './helpers/app.js';
import { badQueueBody, OK } from './helpers/envelope.js';
import { createQueue, ids } from './helpers/fixture.js';
import { getEvents, pendingEvents, queueRow, storedEventIds, waited } from './helpers/events.js';
import { auditRows, bulk, subscriptionEvent, subscriptionOf } from './helpers/subscriptions.js';
import { eventually } from './helpers/wait.js';

/**
 * Pending events per queue (QUEUE_MAX_PENDING_EVENTS; README "Limits on one request's work"): a
 * write that would leave a queue with more pending events than the cap deletes that queue instead,
 * as expiry would; its client's next poll gets BAD_EVENT_QUEUE_ID. The write itself succeeds.
 */

const { U, V, P } = ids;

let ctx: TestContext;
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  await ctx.close();
});

const setUp = async (options: TestAppOptions) => (ctx = await createTestContext(options));

/** `count` entries pinning P, alternately true and false. */
const pins = (count: number, first = true) =>
  Array.from({ length: count }, (_, i) => ({ stream_id: P, property: 'pin_to_top', value: i % 2 === 0 ? first : !first }));

const addView = () =>
  api(ctx.app, {
    method: 'POST',
    url: '/api/v1/navigation_views',
    as: 'U',
    form: { fragment: 'narrow/is/alerted', is_pinned: 'true', name: 'Alerts' },
  });
const ALERTS_ADDED = {
  type: 'navigation_view',
  op: 'add',
  navigation_view: { fragment: 'narrow/is/alerted', is_pinned: true, name: 'Alerts' },
  id: 0,
};

/** The next poll of a dropped queue: the exact Zulip error, whatever last_event_id says. */
async function expectDropped(queueId: string) {
  expect(await queueRow(ctx.db, queueId)).toBeUndefined();
  expect(await storedEventIds(ctx.db, queueId)).toEqual([]);
  const res = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1', dont_block: 'true' });
  expect(res.statusCode).toBe(400);
  expect(res.body).toBe(badQueueBody(queueId));
}

describe('pending events per queue (QUEUE_MAX_PENDING_EVENTS, 5 here)', () => {
  it('a write that would take a queue past the cap deletes it; the others get their events; the write is whole', async () => {
    await setUp({ env: { QUEUE_MAX_PENDING_EVENTS: '5' } });
    const [behind, caughtUp, viewsOnly, others] = [
      await createQueue(ctx.db, 'U'),
      await createQueue(ctx.db, 'U'),
      await createQueue(ctx.db, 'U', ['navigation_view']),
      await createQueue(ctx.db, 'V'),
    ];
    expect((await bulk(ctx, pins(3))).body).toBe(OK);
    // caughtUp's client acknowledges the three; behind's never polls.
    expect(await pendingEvents(ctx.app, caughtUp, 'U', 2)).toEqual([]);

    // Three events: behind would hold 6, caughtUp holds 3.
    ctx.database.statements.length = 0;
    const res = await bulk(ctx, [
      { stream_id: P, property: 'is_muted', value: true },
      { stream_id: P, property: 'color', value: '#abcdef' },
    ]);
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    // The statements of any write: authentication, then BEGIN, the lock, the write and COMMIT in one burst.
    expect(ctx.database.statements).toHaveLength(5);
    await expectDropped(behind);
    expect(await subscriptionOf(ctx, U, P)).toMatchObject({ is_muted: true, color: '#abcdef', pin_to_top: true });
    // One audit row per setting a request sets (three pins of P: one).
    expect((await auditRows(ctx)).map((row) => row.property)).toEqual(['pin_to_top', 'is_muted', 'color']);
    expect(await pendingEvents(ctx.app, caughtUp, 'U', 2)).toEqual([
      subscriptionEvent('in_home_view', false, P, 3),
      subscriptionEvent('is_muted', true, P, 4),
      subscriptionEvent('color', '#abcdef', P, 5),
    ]);

    // Exactly the cap is kept: caughtUp now holds 5.
    expect((await bulk(ctx, pins(2, false))).body).toBe(OK);
    expect(await storedEventIds(ctx.db, caughtUp)).toEqual([3, 4, 5, 6, 7]);
    // One more, from another kind of write, is one too many; viewsOnly takes it (its first).
    expect((await addView()).body).toBe(OK);
    await expectDropped(caughtUp);
    expect(await ctx.db.selectFrom('navigation_views').select('name').where('user_id', '=', U).execute()).toEqual([{ name: 'Alerts' }]);
    expect(await pendingEvents(ctx.app, viewsOnly)).toEqual([ALERTS_ADDED]);
    // Another user's queue is neither counted nor touched.
    expect(await queueRow(ctx.db, others)).toMatchObject({ user_id: V, next_event_id: 0 });
  });

  it('a client that keeps acknowledging never reaches the cap; one that does not is dropped', async () => {
    await setUp({ env: { QUEUE_MAX_PENDING_EVENTS: '5' } });
    const [polled, unpolled] = [await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'U')];
    let last = -1;
    for (let round = 0; round < 6; round++) {
      expect((await bulk(ctx, pins(2, round % 2 === 0))).body).toBe(OK);
      // As clients do: each poll acknowledges the batch before (those count until then: 4 pending).
      const events = await pendingEvents(ctx.app, polled, 'U', last);
      expect(events.map((event) => event.id)).toEqual([last + 1, last + 2]);
      last += 2;
      if (round === 1) expect(await queueRow(ctx.db, unpolled)).toBeDefined();
    }
    expect(await queueRow(ctx.db, polled)).toMatchObject({ next_event_id: 12, last_acked_id: 9 });
    await expectDropped(unpolled);
  });

  it('the write of one request fills a queue at most up to the cap: more events than that never go in', async () => {
    await setUp({ env: { QUEUE_MAX_PENDING_EVENTS: '5' } });
    const [fresh, viewsOnly] = [await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'U', ['navigation_view'])];
    expect((await bulk(ctx, pins(6))).body).toBe(OK);
    await expectDropped(fresh);
    expect(await queueRow(ctx.db, viewsOnly)).toMatchObject({ next_event_id: 0 });
    expect(await ctx.db.selectFrom('events').select('id').execute()).toEqual([]);
  });

  it('a poll waiting on a queue the write drops answers BAD_EVENT_QUEUE_ID at once, also on another instance', async () => {
    // No periodic check within the test: only the write's notification can end the polls promptly.
    await setUp({ env: { QUEUE_MAX_PENDING_EVENTS: '5', POLL_RECHECK_SECONDS: '20' } });
    const handle = createDatabase(ctx.database.url);
    const other: FastifyInstance = await buildApp({ config: ctx.config, ...handle });
    await other.ready();
    closers.push(async () => {
      await other.close();
      await handle.close();
    });

    const queues = [await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'U')] as const;
    const viewsOnly = await createQueue(ctx.db, 'U', ['navigation_view']);
    const polls = [
      getEvents(ctx.app, { queue_id: queues[0], last_event_id: '-1' }),
      getEvents(other, { queue_id: queues[1], last_event_id: '-1' }),
    ];
    let viewsOnlyAnswered = false;
    const viewsOnlyPoll = getEvents(ctx.app, { queue_id: viewsOnly, last_event_id: '-1' }).finally(() => (viewsOnlyAnswered = true));
    await eventually(
      async () => (await ctx.db.selectFrom('event_queues').select('id').where('poll_id', 'is not', null).execute()).length === 3,
    );

    // Only their wake-ups can answer them now (before their heartbeats, 45 s on): no checks.
    const checks = vi.spyOn(PollRechecks.prototype, 'request').mockImplementation(() => undefined);
    expect((await bulk(ctx, pins(6))).body).toBe(OK);
    const answers = await Promise.all(polls);
    checks.mockRestore();
    for (const [index, res] of answers.entries()) {
      expect(res.statusCode).toBe(400);
      expect(res.body).toBe(badQueueBody(queues[index]!));
    }
    // A queue the write did not concern keeps waiting, and gets its next event.
    expect(viewsOnlyAnswered).toBe(false);
    expect((await addView()).body).toBe(OK);
    expect((await viewsOnlyPoll).body).toBe(waited(viewsOnly, [ALERTS_ADDED]));
  });
});
