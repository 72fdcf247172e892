import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildApp } from '../src/app.js';
import { createDatabase } from '../src/db/database.js';
import { LISTENER_APPLICATION_NAME } from '../src/db/event-listener.js';
import { HeartbeatWheel } from '../src/modules/events/poll-batches.js';
import { PollRechecks } from '../src/modules/events/poll-rechecks.js';
import { api, createTestContext, type TestAppOptions, type TestContext } from './helpers/app.js';
import { badQueueBody } from './helpers/envelope.js';
import { auth, type FixtureUser } from './helpers/fixture.js';
import {
  deleteQueue,
  getEvents,
  originalMethod,
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
  vi.restoreAllMocks();
  for (const instance of extraInstances.splice(0)) await instance.close();
  await ctx?.close();
});

/**
 * From now on only a wake-up answers a waiting poll before its heartbeat (45 s on): no check runs,
 * periodic or after a reconnection. A test then waits for the answer however slow the machine,
 * instead of timing it against the check's interval.
 */
function onlyWakeUps(): void {
  vi.spyOn(PollRechecks.prototype, 'request').mockImplementation(() => undefined);
}

/** The heartbeat delays the polls drew (HeartbeatWheel.add), in milliseconds. */
function heartbeatDelays(): number[] {
  const delays: number[] = [];
  const add = originalMethod(HeartbeatWheel.prototype, 'add');
  vi.spyOn(HeartbeatWheel.prototype, 'add').mockImplementation(function (this: HeartbeatWheel, poll, delayMs) {
    delays.push(delayMs);
    return add.call(this, poll, delayMs);
  });
  return delays;
}

/** Another app instance on the same database, with a connection pool of its own (its statements counted with the first's). */
async function anotherInstance(): Promise<FastifyInstance> {
  const handle = createDatabase(ctx.database.url, { onQuery: (text) => ctx.database.statements.push(text) });
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

/** A queue of U's, idle since 2020: a poll's end (its idle clock restarted) shows in last_active_at. */
async function setUpIdleQueue(options: TestAppOptions = {}): Promise<string> {
  await setUp(options);
  const queueId = await registerQueue(ctx.app);
  await ctx.db
    .updateTable('event_queues')
    .set({ last_active_at: new Date('2020-01-01T00:00:00Z') })
    .execute();
  return queueId;
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
  it('case 164: a change answers a waiting poll (its wake-up, not a check), with queue_id last', async () => {
    await setUp();
    onlyWakeUps();
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(ctx.app, queueId);
    const lease = (await queueRow(ctx.db, queueId))!.poll_lease_until!;
    expect(lease.getTime() - Date.now()).toBeGreaterThan(20_000);

    const changedAt = Date.now();
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    const res = await poll;
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(waited(queueId, [pinEvent(true, 0)]));

    // The poll ended: lease released, idle clock restarted; the event waits for its acknowledgement.
    const row = await queueRow(ctx.db, queueId);
    expect(row).toMatchObject({ poll_id: null, poll_lease_until: null, last_acked_id: -1 });
    expect(row!.last_active_at.getTime()).toBeGreaterThanOrEqual(changedAt - 1000);
    expect(await storedEventIds(ctx.db, queueId)).toEqual([0]);
    expect(await pendingEvents(ctx.app, queueId, 'U', 0)).toEqual([]);
  });

  it("deactivation ends the user's waiting poll at once (BAD_EVENT_QUEUE_ID) and answers the others' with peer_remove and realm_user/update", async () => {
    await setUp();
    onlyWakeUps();
    const queueV = await registerQueue(ctx.app, {}, 'V');
    const queueU = await registerQueue(ctx.app, {}, 'U');
    const waitingV = await startWaiting(ctx.app, queueV, '-1', 'V');
    const waitingU = await startWaiting(ctx.app, queueU);
    const res = await api(ctx.app, { method: 'DELETE', url: '/api/v1/users/14', as: 'A' });
    expect(res.statusCode).toBe(200);
    const v = await waitingV.poll;
    expect(v.statusCode).toBe(400);
    expect(v.body).toBe(badQueueBody(queueV));
    const u = await waitingU.poll;
    // V's channels' peer_remove events (P, Q, W for a member), then the deactivation, all at once.
    const peerRemove = (streamId: number, id: number) => ({
      type: 'subscription',
      op: 'peer_remove',
      stream_ids: [streamId],
      user_ids: [14],
      id,
    });
    expect(u.body).toBe(
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
    onlyWakeUps();
    const b = await anotherInstance();
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(b, queueId);
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    expect((await poll).body).toBe(waited(queueId, [pinEvent(true, 0)]));
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
    // Nothing but a check can answer it before its heartbeat (45 s on).
    const res = await poll;
    // Written as jsonb here, its keys come back in jsonb's order.
    expect(res.json()).toEqual(JSON.parse(waited(queueId, [{ ...event, id: 0 }])));
  });

  it('waiting polls send no statement of their own: one statement per check renews every lease', async () => {
    await setUp({ env: { POLL_RECHECK_SECONDS: '1' } });
    const queueIds = await Promise.all(Array.from({ length: 12 }, () => registerQueue(ctx.app)));
    const polls = [];
    for (const queueId of queueIds) polls.push((await startWaiting(ctx.app, queueId)).poll);
    /** When each queue's lease runs out, by queue id. */
    const leases = (rows: { id: string; poll_lease_until: Date | null }[]) =>
      new Map(rows.map((row) => [row.id, row.poll_lease_until!.getTime()]));
    // Fresh leases (60 s) are left alone; those about to run out (less than 35 s left) are renewed.
    // All set by one statement, whose answer is the "before": a check between setting and reading
    // would have renewed the short ones already, and a slow start must not age the fresh ones.
    const soon = queueIds.slice(0, 4);
    const before = leases(
      (
        await sql<{ id: string; poll_lease_until: Date }>`
          UPDATE event_queues
          SET poll_lease_until = now() + CASE WHEN id = ANY(${soon}::uuid[]) THEN interval '20 seconds' ELSE interval '60 seconds' END
          WHERE id = ANY(${queueIds}::uuid[]) RETURNING id, poll_lease_until
        `.execute(ctx.db)
      ).rows,
    );
    const checks = vi.spyOn(PollRechecks.prototype, 'request'); // counts them, and calls through
    ctx.database.statements.length = 0;
    // Checks (a second apart), each one statement whatever the number of polls; nothing else.
    // A statement per poll would show 12 at the first check. Counted against the checks asked for
    // (plus one in flight at the reset), not the time: a stalled process may run several at once.
    await eventually(() => ctx.database.statements.length >= 2);
    expect(ctx.database.statements.length).toBeLessThanOrEqual(checks.mock.calls.length + 1);
    for (const statement of ctx.database.statements) expect(statement).toMatch(/unnest\(/);
    const after = leases(await ctx.db.selectFrom('event_queues').select(['id', 'poll_lease_until']).where('id', 'in', queueIds).execute());
    expect(after.size).toBe(queueIds.length);
    for (const [queueId, until] of after) {
      // Renewed: a full lease (60 s) from a moment after the 20 s ones were set.
      if (soon.includes(queueId)) expect(until).toBeGreaterThan(before.get(queueId)! + 39_000);
      else expect(until).toBe(before.get(queueId)); // not renewed
    }
    for (const poll of polls) expect(await Promise.race([poll.then(() => 'answered'), sleep(0).then(() => 'waiting')])).toBe('waiting');
    await setPinToTop(ctx.app, true);
    for (const [index, poll] of polls.entries()) expect((await poll).body).toBe(waited(queueIds[index]!, [pinEvent(true, 0)]));
  });

  it('a check skips a queue row another transaction holds, instead of waiting for it (no lock cycle with writes)', async () => {
    // No statement_timeout: a check that waited for the row would wait until it is released, not
    // end after 5 s and let the next one come.
    await setUp({ env: { POLL_RECHECK_SECONDS: '1', DB_STATEMENT_TIMEOUT_MS: '0' } });
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(ctx.app, queueId);
    const holder = createDatabase(ctx.database.url, { poolMax: 1 });
    let release: () => void = () => undefined;
    try {
      let holding!: Promise<void>;
      let held20s!: number;
      // The row held with less than 35 s of lease left (a check wants to renew it). A check between
      // the UPDATE and the lock renews it first: then it is set and held again.
      await eventually(async () => {
        const released = new Promise<void>((resolve) => (release = resolve));
        const set = await sql<{ until: Date }>`
          UPDATE event_queues SET poll_lease_until = now() + interval '20 seconds' WHERE id = ${queueId}::uuid RETURNING poll_lease_until AS until
        `.execute(ctx.db);
        held20s = set.rows[0]!.until.getTime();
        let heldUntil: number | undefined;
        let markHeld!: () => void;
        const locked = new Promise<void>((resolve) => (markHeld = resolve));
        holding = holder.db.transaction().execute(async (tx) => {
          const { rows } = await sql<{ until: Date }>`
            SELECT poll_lease_until AS until FROM event_queues WHERE id = ${queueId}::uuid FOR UPDATE
          `.execute(tx);
          heldUntil = rows[0]!.until.getTime();
          markHeld();
          await released;
        });
        await Promise.race([locked, holding]); // a failed transaction fails the test
        if (heldUntil === held20s) return true;
        release();
        await holding;
        return false;
      });
      ctx.database.statements.length = 0;
      // Checks kept coming (a blocked one would have been the only one: the next waits for it),
      // and left the lease alone.
      await eventually(() => ctx.database.statements.filter((statement) => /unnest\(/.test(statement)).length >= 2);
      const lease = async () => (await queueRow(ctx.db, queueId))!.poll_lease_until!.getTime();
      expect(await lease()).toBe(held20s);
      release();
      await holding;
      // Renewed: a full lease (60 s) from a moment after the 20 s one was set.
      await eventually(async () => (await lease()) > held20s + 39_000);
    } finally {
      release(); // a holder left waiting would hang the close
      await holder.close();
    }
    await setPinToTop(ctx.app, true);
    expect((await poll).body).toBe(waited(queueId, [pinEvent(true, 0)]));
  });

  it('the listener reconnects after losing its connection, and polls still wake promptly', async () => {
    // No periodic check: only the one after the reconnection can find what was missed.
    vi.spyOn(PollRechecks.prototype, 'start').mockImplementation(() => undefined);
    await setUp();
    const [pid] = await listenerSessions();
    expect(pid).toBeDefined();
    const queueId = await registerQueue(ctx.app);
    const { poll } = await startWaiting(ctx.app, queueId);
    const otherQueueId = await registerQueue(ctx.app);
    const other = await startWaiting(ctx.app, otherQueueId);
    ctx.database.statements.length = 0;
    await sql`SELECT pg_terminate_backend(${pid!})`.execute(ctx.db);
    // Committed while nobody listens: found by the check that follows the reconnection, one
    // statement for every waiting poll.
    await setPinToTop(ctx.app, true);
    const res = await poll;
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
    onlyWakeUps();
    const next = await startWaiting(ctx.app, queueId, '0');
    await setPinToTop(ctx.app, false);
    expect((await next.poll).body).toBe(waited(queueId, [pinEvent(false, 1)]));
  });
});

describe('heartbeat', () => {
  it('case 165: an idle poll gets a heartbeat after HEARTBEAT_SECONDS, whatever event_types says', async () => {
    await setUp({ env: { HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '0', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' } });
    const forms: Record<string, string>[] = [{}, { event_types: '["navigation_view"]' }, { event_types: '[]' }];
    const delays = heartbeatDelays();
    for (const form of forms) {
      const queueId = await registerQueue(ctx.app, form);
      const { res, elapsed } = await timed(getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' }), Date.now());
      // Not before the heartbeat's time (a slower machine only answers later), which was 1 s (the
      // wheel's tick on top, test/events-steady-state.test.ts).
      expect(elapsed).toBeGreaterThanOrEqual(950);
      expect(delays.splice(0)).toEqual([1000]);
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
      const delays = heartbeatDelays();
      const { res, elapsed } = await timed(getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' }), Date.now());
      // On the heartbeat wheel's 250 ms ticks: the last tick of the jitter, the wheel's on top.
      expect(delays).toEqual([1750]);
      expect(elapsed).toBeGreaterThanOrEqual(1750);
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
    onlyWakeUps();
    const b = await anotherInstance();
    const queueId = await registerQueue(ctx.app);
    const first = await startWaiting(b, queueId);
    const second = await startWaiting(ctx.app, queueId);
    expect((await first.poll).body).toBe(waited(queueId, []));
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
    onlyWakeUps();
    const b = await anotherInstance();
    for (const [waitOn, deleteOn] of [
      [ctx.app, ctx.app],
      [b, ctx.app],
    ] as const) {
      const queueId = await registerQueue(ctx.app);
      const { poll } = await startWaiting(waitOn, queueId);
      expect((await deleteQueue(deleteOn, { queue_id: queueId })).statusCode).toBe(200);
      const res = await poll;
      expect(res.statusCode).toBe(400);
      expect(res.body).toBe(badQueueBody(queueId));
    }
  });

  it('a client that disconnects gets nothing; its events stay for the next poll', async () => {
    const queueId = await setUpIdleQueue();
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
    const abortedAt = Date.now();
    abort.abort();
    expect(await outcome).toBe('aborted');
    // The poll ended on the server: lease released and idle clock restarted.
    await eventually(async () => (await queueRow(ctx.db, queueId))!.poll_id === null);
    const row = await queueRow(ctx.db, queueId);
    expect(row!.poll_lease_until).toBeNull();
    expect(row!.last_active_at.getTime()).toBeGreaterThanOrEqual(abortedAt - 1000);
    await setPinToTop(ctx.app, true);
    expect(await pendingEvents(ctx.app, queueId)).toEqual([pinEvent(true, 0)]);
  });

  it('a client that leaves while its poll gathers or authenticates: the poll ends, not at its heartbeat', async () => {
    // A heartbeat (100 s on) past the wait below: only the client's departure can end the poll.
    const queueId = await setUpIdleQueue({ env: { HEARTBEAT_SECONDS: '100', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '115' } });
    await ctx.app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = ctx.app.server.address() as AddressInfo;
    // The server has the request (Fastify's listener, which runs first, took it): the poll now
    // waits up to 50 ms for others before its authentication, and its client leaves meanwhile.
    const received = new Promise<void>((resolve) => ctx.app.server.once('request', () => resolve()));
    const sent = http.get({
      host: '127.0.0.1',
      port,
      path: `/api/v1/events?queue_id=${queueId}&last_event_id=-1`,
      headers: { host: 'chat.example.com', authorization: auth('U') },
      agent: false,
    });
    sent.on('error', () => undefined);
    await received;
    sent.destroy();
    // Ended as a poll whose client left (idle clock restarted).
    await eventually(async () => {
      const row = await queueRow(ctx.db, queueId);
      return row!.poll_id === null && row!.last_active_at.getFullYear() > 2020;
    });
  });
});
