import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildApp } from '../src/app.js';
import { createDatabase } from '../src/db/database.js';
import { LISTENER_APPLICATION_NAME } from '../src/modules/events/event-listener.js';
import { api, createTestContext, type TestAppOptions, type TestContext } from './helpers/app.js';
import { badQueueBody } from './helpers/envelope.js';
import { auth, type FixtureUser } from './helpers/fixture.js';
import {
  deleteQueue,
  getEvents,
  pendingEvents,
  pinEvent,
  queueRow,
  registerQueue,
  setPinToTop,
  storedEventIds,
  waited,
} from './helpers/events.js';
import { eventually, sleep } from './helpers/wait.js';

/**
 * Long polls of GET /api/v1/events (docs/api.md §2.10, docs/api.md §3.13 step 9–10, docs/api.md §3.14; acceptance cases 164,
 * 165, 167, 168): wake-ups within and across instances, heartbeats, superseded and deleted
 * queues, client disconnects and shutdown.
 */

let ctx: TestContext;
const extraInstances: { close(): Promise<void> }[] = [];

async function setUp(options: TestAppOptions = {}): Promise<TestContext> {
  ctx = await createTestContext(options);
  return ctx;
}

afterEach(async () => {
  for (const instance of extraInstances.splice(0)) await instance.close();
  await ctx?.close();
});

/** Another app instance on the same database, with a connection pool of its own. */
async function anotherInstance(): Promise<FastifyInstance> {
  const handle = createDatabase(ctx.database.url);
  const app = await buildApp({ config: ctx.config, ...handle });
  await app.ready();
  extraInstances.push({
    close: async () => {
      await app.close();
      await handle.close();
    },
  });
  return app;
}

/** Starts a blocking poll and resolves once it holds the queue (it is really waiting). */
async function startWaiting(app: FastifyInstance, queueId: string, lastEventId = '-1', as: FixtureUser = 'U') {
  const before = (await queueRow(ctx.db, queueId))?.poll_id ?? null;
  const poll = getEvents(app, { queue_id: queueId, last_event_id: lastEventId }, as);
  let settled = false;
  void poll.then(
    () => (settled = true),
    () => (settled = true),
  );
  await eventually(async () => settled || ((await queueRow(ctx.db, queueId))?.poll_id ?? null) !== before);
  expect(settled).toBe(false);
  return { poll, isSettled: () => settled };
}

async function timed(promise: Promise<LightMyRequestResponse>, since: number) {
  const res = await promise;
  return { res, elapsed: Date.now() - since };
}

const listenerSessions = async () => {
  const { rows } = await sql<{ pid: number }>`
    SELECT pid FROM pg_stat_activity WHERE application_name = ${LISTENER_APPLICATION_NAME} AND datname = current_database()
  `.execute(ctx.db);
  return rows.map((row) => row.pid);
};

describe('long poll wake-up', () => {
  it('case 164: a change answers a waiting poll within a second, with queue_id last', async () => {
    await setUp();
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(ctx.app, queueId);
    const lease = (await queueRow(ctx.db, queueId))!.poll_lease_until!;
    expect(lease.getTime() - Date.now()).toBeGreaterThan(20_000);

    const changedAt = Date.now();
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    const { res, elapsed } = await timed(poll, changedAt);
    expect(elapsed).toBeLessThan(1000);
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(waited(queueId, [pinEvent(true, 0)]));

    // The poll ended: lease released, idle clock restarted; the event waits for its acknowledgement.
    const row = await queueRow(ctx.db, queueId);
    expect(row).toMatchObject({ poll_id: null, poll_lease_until: null, last_acked_id: -1 });
    expect(Date.now() - row!.last_active_at.getTime()).toBeLessThan(2000);
    expect(await storedEventIds(ctx.db, queueId)).toEqual([0]);
    expect(await pendingEvents(ctx.app, queueId, 'U', 0)).toEqual([]);
  });

  it("deactivation ends the user's waiting poll at once (BAD_EVENT_QUEUE_ID) and answers the others' with peer_remove and realm_user/update", async () => {
    await setUp();
    const queueV = await registerQueue(ctx.app, {}, 'V');
    const queueU = await registerQueue(ctx.app, {}, 'U');
    const waitingV = await startWaiting(ctx.app, queueV, '-1', 'V');
    const waitingU = await startWaiting(ctx.app, queueU);
    const changedAt = Date.now();
    const res = await api(ctx.app, { method: 'DELETE', url: '/api/v1/users/14', as: 'A' });
    expect(res.statusCode).toBe(200);
    const v = await timed(waitingV.poll, changedAt);
    expect(v.elapsed).toBeLessThan(1000);
    expect(v.res.statusCode).toBe(400);
    expect(v.res.body).toBe(badQueueBody(queueV));
    const u = await timed(waitingU.poll, changedAt);
    expect(u.elapsed).toBeLessThan(1000);
    // V's channels' peer_remove events (P, Q, W for a member), then the deactivation, all at once.
    const peerRemove = (streamId: number, id: number) => ({
      type: 'subscription',
      op: 'peer_remove',
      stream_ids: [streamId],
      user_ids: [14],
      id,
    });
    expect(u.res.body).toBe(
      waited(queueU, [
        peerRemove(100, 0),
        peerRemove(101, 1),
        peerRemove(104, 2),
        { type: 'realm_user', op: 'update', person: { user_id: 14, is_active: false }, id: 3 },
      ]),
    );
  });

  it('case 164 (two instances): a change committed through A answers a poll waiting on B', async () => {
    await setUp();
    const b = await anotherInstance();
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(b, queueId);
    const changedAt = Date.now();
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    const { res, elapsed } = await timed(poll, changedAt);
    expect(elapsed).toBeLessThan(1000);
    expect(res.body).toBe(waited(queueId, [pinEvent(true, 0)]));
  });

  it('events of other users and of filtered types do not end the wait', async () => {
    await setUp();
    const queueId = await registerQueue(ctx.app, { event_types: '["navigation_view"]' });
    const { poll, isSettled } = await startWaiting(ctx.app, queueId);
    await setPinToTop(ctx.app, true);
    await api(ctx.app, { method: 'POST', url: '/api/v1/navigation_views', as: 'V', form: { fragment: 'inbox', is_pinned: 'true' } });
    await sleep(400);
    expect(isSettled()).toBe(false);
    await api(ctx.app, { method: 'POST', url: '/api/v1/navigation_views', as: 'U', form: { fragment: 'inbox', is_pinned: 'true' } });
    const res = await poll;
    expect(res.body).toBe(
      waited(queueId, [{ type: 'navigation_view', op: 'add', navigation_view: { fragment: 'inbox', is_pinned: true, name: null }, id: 0 }]),
    );
  });

  it('an event written without a notification is found by the periodic check (POLL_RECHECK_SECONDS)', async () => {
    await setUp({ env: { POLL_RECHECK_SECONDS: '1' } });
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(ctx.app, queueId);
    // An event written behind the server's back: no NOTIFY.
    await sql`UPDATE event_queues SET next_event_id = 1 WHERE id = ${queueId}::uuid`.execute(ctx.db);
    // A documented event: api() checks the answer against the documented response.
    const event = { type: 'subscription', op: 'update', property: 'pin_to_top', value: true, stream_id: 100 };
    await sql`INSERT INTO events (queue_id, id, realm_id, payload) VALUES (${queueId}::uuid, 0, 1, ${JSON.stringify(event)}::jsonb)`.execute(
      ctx.db,
    );
    const { res, elapsed } = await timed(poll, Date.now());
    expect(elapsed).toBeLessThan(2500);
    // Written as jsonb here, its keys come back in jsonb's order.
    expect(res.json()).toEqual(JSON.parse(waited(queueId, [{ ...event, id: 0 }])));
  }, 15_000);

  it('waiting polls send no statement of their own: one statement per check renews every lease', async () => {
    await setUp({ env: { POLL_RECHECK_SECONDS: '1' } });
    const queueIds = await Promise.all(Array.from({ length: 12 }, () => registerQueue(ctx.app)));
    const polls = [];
    for (const queueId of queueIds) polls.push((await startWaiting(ctx.app, queueId)).poll);
    /** Milliseconds each queue's lease has left, by queue id. */
    const leases = async () =>
      new Map(
        (await ctx.db.selectFrom('event_queues').select(['id', 'poll_lease_until']).where('id', 'in', queueIds).execute()).map((row) => [
          row.id,
          row.poll_lease_until!.getTime() - Date.now(),
        ]),
      );
    // Fresh leases (60 s) are left alone; those about to run out (less than 35 s left) are renewed.
    const soon = queueIds.slice(0, 4);
    await sql`UPDATE event_queues SET poll_lease_until = now() + interval '20 seconds' WHERE id = ANY(${soon}::uuid[])`.execute(ctx.db);
    const before = await leases();
    ctx.database.statements.length = 0;
    await sleep(2500);
    // Two or three checks in 2.5 s, whatever the number of polls; nothing else.
    expect(ctx.database.statements.length).toBeGreaterThanOrEqual(2);
    expect(ctx.database.statements.length).toBeLessThanOrEqual(3);
    for (const statement of ctx.database.statements) expect(statement).toMatch(/unnest\(/);
    const after = await leases();
    expect(after.size).toBe(queueIds.length);
    for (const [queueId, left] of after) {
      if (soon.includes(queueId)) {
        expect(before.get(queueId)).toBeLessThan(21_000);
        expect(left).toBeGreaterThan(55_000);
      } else {
        expect(left).toBeLessThan(before.get(queueId)! - 2000); // not renewed: only time passed
      }
    }
    for (const poll of polls) expect(await Promise.race([poll.then(() => 'answered'), sleep(0).then(() => 'waiting')])).toBe('waiting');
    await setPinToTop(ctx.app, true);
    for (const [index, poll] of polls.entries()) expect((await poll).body).toBe(waited(queueIds[index]!, [pinEvent(true, 0)]));
  }, 15_000);

  it('a check skips a queue row another transaction holds, instead of waiting for it (no lock cycle with writes)', async () => {
    await setUp({ env: { POLL_RECHECK_SECONDS: '1' } });
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(ctx.app, queueId);
    await sql`UPDATE event_queues SET poll_lease_until = now() + interval '20 seconds' WHERE id = ${queueId}::uuid`.execute(ctx.db);
    const holder = createDatabase(ctx.database.url, { poolMax: 1 });
    try {
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      const holding = holder.db.transaction().execute(async (tx) => {
        await sql`SELECT 1 FROM event_queues WHERE id = ${queueId}::uuid FOR UPDATE`.execute(tx);
        await released;
      });
      await sleep(200);
      ctx.database.statements.length = 0;
      await sleep(2300);
      // Checks kept coming (a blocked one would have been the only one), and left the lease alone.
      expect(ctx.database.statements.filter((statement) => /unnest\(/.test(statement)).length).toBeGreaterThanOrEqual(2);
      const leaseLeft = async () => (await queueRow(ctx.db, queueId))!.poll_lease_until!.getTime() - Date.now();
      expect(await leaseLeft()).toBeLessThan(20_000);
      release();
      await holding;
      await eventually(async () => (await leaseLeft()) > 55_000, 3000);
    } finally {
      await holder.close();
    }
    await setPinToTop(ctx.app, true);
    expect((await poll).body).toBe(waited(queueId, [pinEvent(true, 0)]));
  }, 15_000);

  it('the listener reconnects after losing its connection, and polls still wake promptly', async () => {
    await setUp({ env: { POLL_RECHECK_SECONDS: '20' } });
    const [pid] = await listenerSessions();
    expect(pid).toBeDefined();
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(ctx.app, queueId);
    const otherQueueId = await registerQueue(ctx.app);
    const other = await startWaiting(ctx.app, otherQueueId);
    ctx.database.statements.length = 0;
    await sql`SELECT pg_terminate_backend(${pid!})`.execute(ctx.db);
    // Committed while nobody listens: found by the check that follows the reconnection (the
    // periodic one is 20 s away), one statement for every waiting poll.
    await setPinToTop(ctx.app, true);
    const { res, elapsed } = await timed(poll, Date.now());
    expect(elapsed).toBeLessThan(3000);
    expect(res.body).toBe(waited(queueId, [pinEvent(true, 0)]));
    expect((await other.poll).body).toBe(waited(otherQueueId, [pinEvent(true, 0)]));
    // The checks on losing and on regaining the connection, each one statement for both polls.
    const checks = ctx.database.statements.filter((statement) => /unnest\(/.test(statement)).length;
    expect(checks).toBeGreaterThanOrEqual(1);
    expect(checks).toBeLessThanOrEqual(2);
    await eventually(async () => {
      const pids = await listenerSessions();
      return pids.length === 1 && pids[0] !== pid;
    });
    const next = await startWaiting(ctx.app, queueId, '0');
    const changedAt = Date.now();
    await setPinToTop(ctx.app, false);
    const second = await timed(next.poll, changedAt);
    expect(second.elapsed).toBeLessThan(1000);
    expect(second.res.body).toBe(waited(queueId, [pinEvent(false, 1)]));
  });
});

describe('heartbeat', () => {
  it('case 165: an idle poll gets a heartbeat after HEARTBEAT_SECONDS, whatever event_types says', async () => {
    await setUp({ env: { HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '0', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' } });
    const forms: Record<string, string>[] = [{}, { event_types: '["navigation_view"]' }, { event_types: '[]' }];
    for (const form of forms) {
      const queueId = await registerQueue(ctx.app, form);
      const startedAt = Date.now();
      const { res, elapsed } = await timed(getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' }), startedAt);
      expect(elapsed).toBeGreaterThanOrEqual(950);
      expect(elapsed).toBeLessThan(2500);
      expect(res.body).toBe(waited(queueId, [{ type: 'heartbeat', id: 0 }]));
      expect((await queueRow(ctx.db, queueId))!.next_event_id).toBe(1);
      // Acknowledged like any event.
      expect(await pendingEvents(ctx.app, queueId, 'U', 0)).toEqual([]);
    }
  });

  it('the delay adds random(0..HEARTBEAT_JITTER_SECONDS) seconds', async () => {
    await setUp({ env: { HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '1', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' } });
    const queueId = await registerQueue(ctx.app);
    const random = vi.spyOn(Math, 'random').mockReturnValue(0.999);
    try {
      const { res, elapsed } = await timed(getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' }), Date.now());
      // Answered on the heartbeat wheel's 250 ms ticks: within the last tick of the jitter.
      expect(elapsed).toBeGreaterThanOrEqual(1750);
      expect(elapsed).toBeLessThan(3500);
      expect(res.json().events).toEqual([{ type: 'heartbeat', id: 0 }]);
    } finally {
      random.mockRestore();
    }
  });

  it('register reports the configured long-poll timeout', async () => {
    await setUp({ env: { HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '0', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' } });
    const res = await api(ctx.app, { method: 'POST', url: '/api/v1/register', as: 'U', form: { fetch_event_types: '[]' } });
    expect(res.json().event_queue_longpoll_timeout_seconds).toBe(5);
  });
});

describe('superseded, deleted and abandoned polls', () => {
  it('case 167: a second poll ends the first with what is pending; the second keeps waiting', async () => {
    await setUp();
    const queueId = await registerQueue(ctx.app);
    const first = await startWaiting(ctx.app, queueId);
    const firstPollId = (await queueRow(ctx.db, queueId))!.poll_id;
    const second = await startWaiting(ctx.app, queueId);
    const { res } = await timed(first.poll, Date.now());
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(waited(queueId, []));
    await sleep(300);
    expect(second.isSettled()).toBe(false);
    // The first poll left the second one's hold on the queue alone.
    const row = await queueRow(ctx.db, queueId);
    expect(row!.poll_id).not.toBeNull();
    expect(row!.poll_id).not.toBe(firstPollId);
    expect(row!.poll_lease_until).not.toBeNull();
    await setPinToTop(ctx.app, true);
    expect((await second.poll).body).toBe(waited(queueId, [pinEvent(true, 0)]));
  });

  it('case 167 (two instances): a poll on A ends the one waiting on B', async () => {
    await setUp();
    const b = await anotherInstance();
    const queueId = await registerQueue(ctx.app);
    const first = await startWaiting(b, queueId);
    const second = await startWaiting(ctx.app, queueId);
    const { res, elapsed } = await timed(first.poll, Date.now());
    expect(elapsed).toBeLessThan(1000);
    expect(res.body).toBe(waited(queueId, []));
    expect(second.isSettled()).toBe(false);
    await setPinToTop(ctx.app, true);
    expect((await second.poll).body).toBe(waited(queueId, [pinEvent(true, 0)]));
  });

  it('a dont_block poll also ends a waiting one; a rejected poll does not', async () => {
    await setUp();
    const queueId = await registerQueue(ctx.app);
    const first = await startWaiting(ctx.app, queueId);
    const rejected = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '3', dont_block: 'true' });
    expect(rejected.statusCode).toBe(400);
    await sleep(300);
    expect(first.isSettled()).toBe(false);
    expect(await pendingEvents(ctx.app, queueId)).toEqual([]);
    expect((await first.poll).body).toBe(waited(queueId, []));
    expect(await queueRow(ctx.db, queueId)).toMatchObject({ poll_id: null, poll_lease_until: null });
  });

  it('case 168: deleting the queue ends a waiting poll with BAD_EVENT_QUEUE_ID, also across instances', async () => {
    await setUp();
    const b = await anotherInstance();
    for (const [waitOn, deleteOn] of [
      [ctx.app, ctx.app],
      [b, ctx.app],
    ] as const) {
      const queueId = await registerQueue(ctx.app);
      const { poll } = await startWaiting(waitOn, queueId);
      const deletedAt = Date.now();
      expect((await deleteQueue(deleteOn, { queue_id: queueId })).statusCode).toBe(200);
      const { res, elapsed } = await timed(poll, deletedAt);
      expect(elapsed).toBeLessThan(1000);
      expect(res.statusCode).toBe(400);
      expect(res.body).toBe(badQueueBody(queueId));
    }
  });

  it('a client that disconnects gets nothing; its events stay for the next poll', async () => {
    await setUp();
    const queueId = await registerQueue(ctx.app);
    await ctx.db
      .updateTable('event_queues')
      .set({ last_active_at: new Date('2020-01-01T00:00:00Z') })
      .execute();
    const abort = new AbortController();
    const poll = ctx.app.inject({
      method: 'GET',
      url: `/api/v1/events?queue_id=${queueId}&last_event_id=-1`,
      headers: { host: 'chat.example.com', authorization: auth('U') },
      signal: abort.signal,
    });
    const outcome = poll.then(
      () => 'answered',
      () => 'aborted',
    );
    await eventually(async () => (await queueRow(ctx.db, queueId))!.poll_id !== null);
    abort.abort();
    expect(await outcome).toBe('aborted');
    // The poll ended on the server: lease released and idle clock restarted.
    await eventually(async () => (await queueRow(ctx.db, queueId))!.poll_id === null);
    const row = await queueRow(ctx.db, queueId);
    expect(row!.poll_lease_until).toBeNull();
    expect(Date.now() - row!.last_active_at.getTime()).toBeLessThan(5000);
    await setPinToTop(ctx.app, true);
    expect(await pendingEvents(ctx.app, queueId)).toEqual([pinEvent(true, 0)]);
  });
});
