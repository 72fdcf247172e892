import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { hashApiKey } from '../src/lib/api-keys.js';
import { heartbeatDelay } from '../src/modules/events/events.service.js';
import { PollWaiter, QueueWakeups } from '../src/modules/events/event-wakeups.js';
import { Batcher } from '../src/lib/batcher.js';
import { HeartbeatBatches, HeartbeatWheel, LeftPollBatches, PollGathering } from '../src/modules/events/poll-batches.js';
import { answerHeartbeats, endLeftPolls, type PollStartRequest, startPolls } from '../src/modules/events/poll-batches.repository.js';
import { createTestContext, type TestContext } from './helpers/app.js';
import { expectError } from './helpers/envelope.js';
import { auth, createQueue, ids } from './helpers/fixture.js';
import { getEvents, originalMethod, pinEvent, queueRow, registerQueue, setPinToTop, storedEventIds, waited } from './helpers/events.js';
import { eventually } from './helpers/wait.js';
import { databaseNow, waitForLockWaiter } from './helpers/database.js';

/**
 * The steady state of connected clients: a poll answered by its heartbeat and opened
 * again at once, 200 times a second at 10,000 clients. Polls starting in one turn of the event loop
 * share one statement, heartbeats due within 250 ms of each other one transaction; each test here
 * pins a guarantee the batching must keep: the same outcomes as a poll alone, no gap between a
 * heartbeat and the next poll, leases, authentication and rate limiting of every re-poll.
 */

let ctx: TestContext;
afterEach(async () => {
  // A test that fakes Date or spies and fails before its own restore must not leave them so.
  vi.useRealTimers();
  vi.restoreAllMocks();
  await ctx?.close();
});

const U = { realmId: ids.R, id: ids.U };
const FAST_HEARTBEATS = { HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '0', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' };

const APPEND = `WITH bumped AS (UPDATE event_queues SET next_event_id = next_event_id + 1 WHERE id = $1 RETURNING id, realm_id, next_event_id - 1 AS n)
  INSERT INTO events (queue_id, id, realm_id, payload) SELECT id, n, realm_id, $2::json FROM bumped`;

/** Appends an event to a queue as a write does (the next id, under the row's lock); `client` may hold a transaction open. */
async function appendEvent(client: pg.ClientBase | undefined, queueId: string, payload: object): Promise<void> {
  if (client) {
    await client.query(APPEND, [queueId, JSON.stringify(payload)]);
    return;
  }
  const other = await otherConnection();
  try {
    await other.query(APPEND, [queueId, JSON.stringify(payload)]);
  } finally {
    await other.end();
  }
}

async function otherConnection(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: ctx.database.url });
  await client.connect();
  return client;
}

const request = (queueId: string, lastEventId: number, answerNow = false): PollStartRequest => ({
  owner: U,
  queueId,
  lastEventId,
  pollId: randomUUID(),
  answerNow,
});

describe('poll starts of one turn, one statement', () => {
  it('gives each poll the outcome it gets alone, and the lease of a waiting poll', async () => {
    ctx = await createTestContext();
    const [fresh, pending, ahead, pruned, foreign, held, dontBlock] = await Promise.all([
      createQueue(ctx.db, 'U'),
      createQueue(ctx.db, 'U'),
      createQueue(ctx.db, 'U'),
      createQueue(ctx.db, 'U'),
      createQueue(ctx.db, 'V'),
      createQueue(ctx.db, 'U'),
      createQueue(ctx.db, 'U'),
    ]);
    await appendEvent(undefined, pending, { type: 'a' });
    await appendEvent(undefined, pending, { type: 'b' });
    await ctx.db.updateTable('event_queues').set({ last_acked_id: 3, next_event_id: 5 }).where('id', '=', pruned).execute();
    const holder = randomUUID();
    await ctx.db
      .updateTable('event_queues')
      .set({ poll_id: holder, poll_lease_until: new Date(Date.now() + 60_000) })
      .where('id', '=', held)
      .execute();
    const requests = [
      request(fresh, -1),
      request(pending, 0),
      request(ahead, 7),
      request(pruned, 1),
      request(foreign, -1),
      request(randomUUID(), -1),
      request(held, -1),
      request(dontBlock, -1, true),
    ];
    const startedAt = Date.now();
    const starts = await startPolls(ctx.db, requests, true);
    const answeredAt = Date.now();
    expect(starts).toEqual([
      { outcome: 'waiting', events: [], replacedPoll: false },
      // Event 0 acknowledged (deleted), event 1 answered at once.
      { outcome: 'answered', events: [{ type: 'b', id: 1 }], replacedPoll: false },
      { outcome: 'not_in_queue' },
      { outcome: 'pruned' },
      // Another user's queue and an unknown one: sent again alone, which says 'missing'.
      undefined,
      undefined,
      { outcome: 'waiting', events: [], replacedPoll: true },
      { outcome: 'answered', events: [], replacedPoll: false },
    ]);
    expect(await startPolls(ctx.db, [request(foreign, -1), request(randomUUID(), -1)], false)).toEqual([
      { outcome: 'missing' },
      { outcome: 'missing' },
    ]);

    const waiting = (await queueRow(ctx.db, fresh))!;
    expect(waiting.poll_id).toBe(requests[0]!.pollId);
    // A minute from the statement, whenever it ran (the database's clock is this machine's).
    const lease = waiting.poll_lease_until!.getTime();
    expect(lease).toBeGreaterThanOrEqual(startedAt + 60_000 - 1000);
    expect(lease).toBeLessThanOrEqual(answeredAt + 60_000 + 1000);
    expect((await queueRow(ctx.db, held))!.poll_id).toBe(requests[6]!.pollId);
    const answered = (await queueRow(ctx.db, pending))!;
    expect([answered.poll_id, answered.poll_lease_until, answered.last_acked_id]).toEqual([null, null, 0]);
    expect(await storedEventIds(ctx.db, pending)).toEqual([1]);
    // Refused starts change nothing.
    expect((await queueRow(ctx.db, ahead))!.poll_id).toBeNull();
    expect((await queueRow(ctx.db, pruned))!.last_acked_id).toBe(3);
  });

  it('skips a queue row another transaction holds instead of waiting for it', async () => {
    ctx = await createTestContext();
    const [locked, free] = [await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'U')];
    const other = await otherConnection();
    try {
      await other.query('BEGIN');
      await other.query('SELECT 1 FROM event_queues WHERE id = $1 FOR UPDATE', [locked]);
      const starts = await startPolls(ctx.db, [request(locked, -1), request(free, -1)], true);
      expect(starts).toEqual([undefined, { outcome: 'waiting', events: [], replacedPoll: false }]);
    } finally {
      await other.query('ROLLBACK');
      await other.end();
    }
  });
});

/** Another connection's transaction holding the queue's row: it appended `written` and has not committed. */
async function writeInProgress(queueId: string): Promise<pg.Client> {
  const writer = await otherConnection();
  await writer.query('BEGIN');
  await appendEvent(writer, queueId, { type: 'written' });
  return writer;
}

/** A queue of U held by a waiting poll (lease a minute ahead). */
async function heldQueue(): Promise<{ queueId: string; pollId: string }> {
  const queueId = await createQueue(ctx.db, 'U');
  const pollId = randomUUID();
  await ctx.db
    .updateTable('event_queues')
    .set({ poll_id: pollId, poll_lease_until: new Date(Date.now() + 60_000) })
    .where('id', '=', queueId)
    .execute();
  return { queueId, pollId };
}

/**
 * Three queues of U whose polls end together: `mine` held by its poll with an event pending,
 * `replaced` held by a newer poll than the one ending, `gone` deleted; idle clocks long past.
 */
async function queuesToEnd() {
  const [mine, replaced, gone] = [await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'U')];
  const [minePoll, oldPoll, newPoll, gonePoll] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
  const hold = (queueId: string, pollId: string) =>
    ctx.db
      .updateTable('event_queues')
      .set({ poll_id: pollId, poll_lease_until: new Date(Date.now() + 60_000), last_active_at: new Date('2020-01-01') })
      .where('id', '=', queueId)
      .execute();
  await hold(mine, minePoll);
  await hold(replaced, newPoll);
  await appendEvent(undefined, mine, { type: 'a' });
  await ctx.db.deleteFrom('event_queues').where('id', '=', gone).execute();
  const polls = [
    { queueId: mine, pollId: minePoll },
    { queueId: replaced, pollId: oldPoll },
    { queueId: gone, pollId: gonePoll },
  ];
  return { mine, replaced, minePoll, oldPoll, newPoll, gonePoll, polls };
}

describe('heartbeats due together, one transaction', () => {
  it('appends the heartbeat only while the poll holds its queue, releases it and restarts its idle clock', async () => {
    ctx = await createTestContext();
    const { mine, replaced, minePoll, oldPoll, newPoll, gonePoll, polls } = await queuesToEnd();
    await appendEvent(undefined, replaced, { type: 'b' });
    const answeredFrom = await databaseNow(ctx.db);
    const skipping = await answerHeartbeats(ctx.database.transactions, polls, true);
    expect(Object.fromEntries(skipping)).toEqual({
      [minePoll]: [
        { type: 'a', id: 0 },
        { type: 'heartbeat', id: 1 },
      ],
      // Held by a newer poll: no heartbeat of its own, the pending events all the same.
      [oldPoll]: [{ type: 'b', id: 0 }],
    });
    // Alone (no skipping), a queue gone answers null.
    expect(Object.fromEntries(await answerHeartbeats(ctx.database.transactions, [polls[2]!], false))).toEqual({ [gonePoll]: null });

    const row = (await queueRow(ctx.db, mine))!;
    expect([row.poll_id, row.poll_lease_until, row.next_event_id]).toEqual([null, null, 2]);
    expect(row.last_active_at.getTime()).toBeGreaterThanOrEqual(answeredFrom);
    const newer = (await queueRow(ctx.db, replaced))!;
    expect([newer.poll_id, newer.next_event_id]).toEqual([newPoll, 1]);
    expect(newer.poll_lease_until).not.toBeNull();
  });

  it('no gap: a write holding the queue when the heartbeat falls due is answered before the heartbeat', async () => {
    ctx = await createTestContext();
    const { queueId, pollId } = await heldQueue();
    const writer = await writeInProgress(queueId);
    try {
      // The batch skips the held row; alone, the heartbeat waits for it.
      expect((await answerHeartbeats(ctx.database.transactions, [{ queueId, pollId }], true)).size).toBe(0);
      const alone = answerHeartbeats(ctx.database.transactions, [{ queueId, pollId }], false);
      await waitForLockWaiter(ctx.db);
      await writer.query('COMMIT');
      expect((await alone).get(pollId)).toEqual([
        { type: 'written', id: 0 },
        { type: 'heartbeat', id: 1 },
      ]);
    } finally {
      await writer.end();
    }
  });

  it('two polls of one queue due in one tick go in separate statements: one heartbeat, one id', async () => {
    ctx = await createTestContext();
    const queueId = await createQueue(ctx.db, 'U');
    const [oldPoll, newPoll] = [randomUUID(), randomUUID()];
    await ctx.db
      .updateTable('event_queues')
      .set({ poll_id: newPoll, poll_lease_until: new Date(Date.now() + 60_000) })
      .where('id', '=', queueId)
      .execute();
    const batches = new HeartbeatBatches(ctx.database.transactions, 50);
    const answers = await Promise.all([batches.add({ queueId, pollId: oldPoll }), batches.add({ queueId, pollId: newPoll })]);
    expect(answers.map((events) => events!.filter((event) => event.type === 'heartbeat'))).toContainEqual([{ type: 'heartbeat', id: 0 }]);
    expect((await queueRow(ctx.db, queueId))!.next_event_id).toBe(1);
    expect(await storedEventIds(ctx.db, queueId)).toEqual([0]);
  });

  it('through the app: heartbeats due together are one transaction, and the polls started again hold their queues', async () => {
    ctx = await createTestContext({ env: FAST_HEARTBEATS });
    const queueIds = await Promise.all(Array.from({ length: 5 }, () => registerQueue(ctx.app)));
    // The wheel's firings that told polls their heartbeat was due, by number: the polls' starts
    // may straddle tick boundaries (more of them on a loaded machine), so the ticks are counted.
    const wheel = HeartbeatWheel.prototype as unknown as { fire(target: number): void };
    let firings = 0;
    const fire = originalMethod(wheel, 'fire');
    vi.spyOn(wheel, 'fire').mockImplementation(function (this: HeartbeatWheel, target: number) {
      firings++;
      fire.call(this, target);
    });
    const toldAt = new Set<number>();
    const add = originalMethod(HeartbeatWheel.prototype, 'add');
    vi.spyOn(HeartbeatWheel.prototype, 'add').mockImplementation(function (this: HeartbeatWheel, poll, delayMs) {
      const due = poll.heartbeatDue.bind(poll);
      poll.heartbeatDue = () => {
        toldAt.add(firings);
        due();
      };
      return add.call(this, poll, delayMs);
    });
    const statementsBefore = ctx.database.statements.length;
    const answers = await Promise.all(queueIds.map((queueId) => getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' })));
    answers.forEach((res, i) => expect(res.body).toBe(waited(queueIds[i]!, [{ type: 'heartbeat', id: 0 }])));
    const ticks = toldAt.size;
    const statements = ctx.database.statements.slice(statementsBefore);
    // One transaction per tick the heartbeats fell due in: mostly one or two here; one per poll
    // (five) was the cost before.
    const heartbeatStatements = statements.filter((text) => /INSERT INTO events/.test(text)).length;
    expect(heartbeatStatements).toBeGreaterThanOrEqual(1);
    expect(heartbeatStatements).toBeLessThanOrEqual(ticks);
    expect(statements.filter((text) => /^begin/i.test(text))).toHaveLength(heartbeatStatements);
    // A poll whose heartbeat falls due answers with it, without first checking its queue as a woken
    // poll does (timers fire up to a millisecond early by Date.now(): that check ran in most cycles).
    expect(statements.filter((text) => /poll_id IS DISTINCT FROM/.test(text))).toEqual([]);

    // The clients poll again at once with the heartbeat's id; a write between the two is not missed.
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    const again = await Promise.all(
      queueIds.map((queueId) => getEvents(ctx.app, { queue_id: queueId, last_event_id: '0', dont_block: 'true' })),
    );
    for (const res of again) expect(res.json().events).toEqual([pinEvent(true, 1)]);
    const polls = queueIds.map((queueId) => getEvents(ctx.app, { queue_id: queueId, last_event_id: '1' }));
    await eventually(async () => {
      const rows = await Promise.all(queueIds.map((queueId) => queueRow(ctx.db, queueId)));
      return rows.every((row) => row!.poll_id !== null && row!.poll_lease_until !== null && row!.last_acked_id === 1);
    });
    // The heartbeats of the second round acknowledge nothing they did not deliver.
    const second = await Promise.all(polls);
    second.forEach((res, i) => expect(res.body).toBe(waited(queueIds[i]!, [{ type: 'heartbeat', id: 2 }])));
  });
});

describe('polls whose clients left, ended together', () => {
  it('restart each idle clock and release a queue only while the poll holds it; nothing is appended', async () => {
    ctx = await createTestContext();
    const { mine, replaced, minePoll, oldPoll, newPoll, gonePoll, polls } = await queuesToEnd();
    const endedFrom = await databaseNow(ctx.db);
    expect(Object.fromEntries(await endLeftPolls(ctx.db, polls, true))).toEqual({ [minePoll]: true, [oldPoll]: true });
    // Alone (no skipping), a queue gone is null.
    expect(Object.fromEntries(await endLeftPolls(ctx.db, [polls[2]!], false))).toEqual({ [gonePoll]: null });

    const row = (await queueRow(ctx.db, mine))!;
    expect([row.poll_id, row.poll_lease_until, row.next_event_id]).toEqual([null, null, 1]);
    expect(row.last_active_at.getTime()).toBeGreaterThanOrEqual(endedFrom);
    // Its pending event stays for the next poll.
    expect(await storedEventIds(ctx.db, mine)).toEqual([0]);
    const newer = (await queueRow(ctx.db, replaced))!;
    expect(newer.poll_id).toBe(newPoll);
    expect(newer.poll_lease_until).not.toBeNull();
    expect(newer.last_active_at.getTime()).toBeGreaterThanOrEqual(endedFrom);
  });

  it('a row a write holds is skipped by the batch and ended alone once the write commits', async () => {
    ctx = await createTestContext();
    const { queueId, pollId } = await heldQueue();
    const writer = await writeInProgress(queueId);
    try {
      const batches = new LeftPollBatches(ctx.db, 10);
      const ended = batches.add({ queueId, pollId });
      await waitForLockWaiter(ctx.db);
      expect((await queueRow(ctx.db, queueId))!.poll_id).toBe(pollId);
      await writer.query('COMMIT');
      expect(await ended).toBe(true);
      expect((await queueRow(ctx.db, queueId))!.poll_id).toBeNull();
    } finally {
      await writer.end();
    }
  });

  it('through the app: clients leaving together cost one statement, and each queue is free again', async () => {
    ctx = await createTestContext();
    const queueIds = await Promise.all([registerQueue(ctx.app), registerQueue(ctx.app), registerQueue(ctx.app)]);
    await ctx.app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = ctx.app.server.address() as AddressInfo;
    const requests = queueIds.map((queueId) =>
      http.get({
        host: '127.0.0.1',
        port,
        path: `/api/v1/events?queue_id=${queueId}&last_event_id=-1`,
        headers: { host: 'chat.example.com', authorization: auth('U') },
        agent: false,
      }),
    );
    for (const request of requests) request.on('error', () => undefined);
    await eventually(async () =>
      (await Promise.all(queueIds.map((queueId) => queueRow(ctx.db, queueId)))).every((row) => row!.poll_id !== null),
    );
    const before = ctx.database.statements.length;
    for (const request of requests) request.destroy();
    await eventually(async () =>
      (await Promise.all(queueIds.map((queueId) => queueRow(ctx.db, queueId)))).every((row) => row!.poll_id === null),
    );
    const statements = ctx.database.statements.slice(before);
    expect(statements.filter((text) => /SELECT ended_poll::text AS poll_id FROM q\s*$/.test(text))).toHaveLength(1);
    // No poll ended alone (finishPoll's statement).
    expect(statements.filter((text) => /SELECT ready FROM q/.test(text))).toEqual([]);
  });
});

describe('a poll whose heartbeat falls due', () => {
  it("answers with the heartbeat when its tick comes before Date.now() reaches the heartbeat time, without a woken poll's check", async () => {
    ctx = await createTestContext({ env: FAST_HEARTBEATS });
    const queueId = await registerQueue(ctx.app);
    // Node's timers run on the event loop's own clock, and fire up to a millisecond early by
    // Date.now(). Here Date.now() stands still (only Date is faked; timers and the database are
    // real), so the poll's timer fires "early" by any amount: it must still be taken for the
    // heartbeat, not for a wake-up that checks the queue and waits again.
    vi.useFakeTimers({ toFake: ['Date'] });
    const before = ctx.database.statements.length;
    const res = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' });
    vi.useRealTimers();
    expect(res.body).toBe(waited(queueId, [{ type: 'heartbeat', id: 0 }]));
    expect(ctx.database.statements.slice(before).filter((text) => /poll_id IS DISTINCT FROM/.test(text))).toEqual([]);
  });
});

describe("a poll's heartbeat delay", () => {
  it("falls on the heartbeat tick's grid, 45 to 55 s after the start with the tick, uniformly", () => {
    const zulip = { heartbeatSeconds: 45, heartbeatJitterSeconds: 10 };
    const tickMs = 250;
    const delays = new Set<number>();
    let draw = 0;
    // Evenly spread draws in [0, 1): every value the jitter can take, each as often.
    for (let i = 0; i < 4000; i++) delays.add(heartbeatDelay(zulip, tickMs, () => (draw++ % 4000) / 4000));
    const expected = Array.from({ length: 40 }, (_, k) => 45_000 + k * tickMs);
    expect([...delays].sort((a, b) => a - b)).toEqual(expected);
    // The batch's tick comes on top of the largest: 55 s at most.
    expect(heartbeatDelay(zulip, tickMs, () => 0.999_999) + tickMs).toBe(55_000);
    expect(heartbeatDelay({ heartbeatSeconds: 1, heartbeatJitterSeconds: 0 }, tickMs, () => 0.999_999)).toBe(1000);
  });

  it('waiting polls hold no timer of their own, and each is answered at the first tick at least its delay away', async () => {
    // One wheel timer for all of them (HeartbeatWheel); a timer per poll was part of the memory
    // each connected client held all day.
    ctx = await createTestContext({
      env: { HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '1', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' },
    });
    const queueIds = await Promise.all(Array.from({ length: 12 }, () => registerQueue(ctx.app)));
    const pollTimers: number[] = [];
    // Counted in the wheel's ticks, not in milliseconds: a loaded machine runs a tick late, and a
    // late tick tells every poll due by then, so only fewer ticks pass, never more.
    const wheel = HeartbeatWheel.prototype as unknown as { fire(target: number): void };
    let ticks = 0;
    let lastTarget: number | undefined;
    const fire = originalMethod(wheel, 'fire');
    const fireSpy = vi.spyOn(wheel, 'fire').mockImplementation(function (this: HeartbeatWheel, target: number) {
      // A timer run a moment early fires again for the same tick: one tick.
      if (target !== lastTarget) ticks++;
      lastTarget = target;
      fire.call(this, target);
    });
    const told: { delayMs: number; ticks: number }[] = [];
    const add = originalMethod(HeartbeatWheel.prototype, 'add');
    const addSpy = vi.spyOn(HeartbeatWheel.prototype, 'add').mockImplementation(function (this: HeartbeatWheel, poll, delayMs) {
      const addedAt = ticks;
      const due = poll.heartbeatDue.bind(poll);
      poll.heartbeatDue = () => {
        told.push({ delayMs, ticks: ticks - addedAt });
        due();
      };
      return add.call(this, poll, delayMs);
    });
    const setTimeoutSpy = vi.spyOn(globalThis, 'setTimeout');
    let answers: { elapsed: number; body: string }[];
    try {
      const startedAt = performance.now();
      const polls = queueIds.map(async (queueId) => {
        const res = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' });
        return { elapsed: performance.now() - startedAt, body: res.body };
      });
      await eventually(async () => {
        const rows = await Promise.all(queueIds.map((queueId) => queueRow(ctx.db, queueId)));
        return rows.every((row) => row!.poll_id !== null);
      });
      // A poll's own wait would be 1 to 2 s (other timers, such as a request's body deadline, are longer).
      for (const [, ms] of setTimeoutSpy.mock.calls) if (typeof ms === 'number' && ms >= 1000 && ms < 2000) pollTimers.push(ms);
      answers = await Promise.all(polls);
    } finally {
      setTimeoutSpy.mockRestore();
      addSpy.mockRestore();
      fireSpy.mockRestore();
    }
    expect(pollTimers).toEqual([]);
    answers.forEach(({ elapsed, body }, i) => {
      expect(body).toBe(waited(queueIds[i]!, [{ type: 'heartbeat', id: 0 }]));
      // Never before its delay (a slower machine only answers later).
      expect(elapsed).toBeGreaterThanOrEqual(999);
    });
    expect(told).toHaveLength(12);
    for (const { delayMs, ticks } of told) {
      // 1 s and a jitter of whole ticks, less the tick that comes on top.
      expect([1000, 1250, 1500, 1750]).toContain(delayMs);
      // Told at the first tick at least its delay away: the delay's ticks, and one more when it
      // was added between two.
      expect(ticks).toBeLessThanOrEqual(delayMs / 250 + 1);
    }
  });
});

describe('the heartbeat wheel', () => {
  afterEach(() => vi.useRealTimers());

  it('tells each poll at the first tick at least its delay away, once; a removed poll never; one onTick per tick', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    vi.advanceTimersByTime(1005);
    const told: string[] = [];
    const ticks: number[] = [];
    const wheel = new HeartbeatWheel(100, () => ticks.push(performance.now()));
    const poll = (name: string) => ({ heartbeatDue: () => told.push(`${name}@${performance.now()}`) });
    const [a, b, c] = [poll('a'), poll('b'), poll('c')];
    wheel.add(a, 250); // due 1255: the tick at 1300
    const tickOfB = wheel.add(b, 250);
    wheel.add(c, 495); // due 1500: that tick
    wheel.remove(b, tickOfB);
    vi.advanceTimersByTime(294); // 1299
    expect(told).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(told).toEqual(['a@1300']);
    vi.advanceTimersByTime(200);
    expect(told).toEqual(['a@1300', 'c@1500']);
    expect(ticks).toEqual([1300, 1500]);
    // Empty: its timer stopped.
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(10_000);
    expect(told).toHaveLength(2);
  });

  it('stop ends its timer', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const told: number[] = [];
    const wheel = new HeartbeatWheel(100, () => {});
    wheel.add({ heartbeatDue: () => told.push(1) }, 50);
    expect(vi.getTimerCount()).toBe(1);
    wheel.stop();
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(1000);
    expect(told).toEqual([]);
  });
});

describe("a queue's waiters", () => {
  it('one or several: each is told, but the one excepted; the last to leave removes the queue', () => {
    const wakeups = new QueueWakeups();
    const [first, second, third] = [new PollWaiter(), new PollWaiter(), new PollWaiter()];
    wakeups.subscribe('q', first);
    wakeups.wake('q');
    expect(first.notified).toBe(true);
    first.notified = false;
    wakeups.subscribe('q', second);
    wakeups.subscribe('q', third);
    wakeups.wake('q', second);
    expect([first.notified, second.notified, third.notified]).toEqual([true, false, true]);
    for (const waiter of [first, second, third]) waiter.notified = false;
    wakeups.unsubscribe('q', first);
    wakeups.unsubscribe('q', third);
    wakeups.wake('q', undefined, 7);
    expect([first.notified, second.notified, third.notified]).toEqual([false, true, false]);
    expect(second.notifiedAt).toBe(7);
    wakeups.unsubscribe('q', second);
    second.notified = false;
    wakeups.wake('q');
    expect(second.notified).toBe(false);
  });

  it('close waits for every poll in flight, however many closes wait', async () => {
    const wakeups = new QueueWakeups();
    wakeups.begin();
    wakeups.begin();
    let closed = 0;
    const closes = [wakeups.close(), wakeups.close()].map((closing) => closing.then(() => closed++));
    await new Promise((resolve) => setImmediate(resolve));
    expect(closed).toBe(0);
    wakeups.end();
    await new Promise((resolve) => setImmediate(resolve));
    expect(closed).toBe(0);
    wakeups.end();
    await Promise.all(closes);
    expect(closed).toBe(2);
    expect(wakeups.closing).toBe(true);
  });
});

describe('blocking polls arriving close together', () => {
  it('share one authentication statement and one start statement', async () => {
    ctx = await createTestContext();
    // Four users: one statement authenticates one request per user (their rate-limit rows).
    const users = ['U', 'V', 'M', 'A'] as const;
    const queueIds = await Promise.all(users.map((user) => registerQueue(ctx.app, {}, user)));
    // The gathering's 50 ms end once all four have arrived: a loaded machine may run the four turns
    // further apart than that.
    let arrived = 0;
    const [wait, flush] = [originalMethod(PollGathering.prototype, 'wait'), originalMethod(Batcher.prototype, 'flush')];
    vi.spyOn(PollGathering.prototype, 'wait').mockImplementation(function (this: PollGathering) {
      arrived++;
      return wait.call(this);
    });
    vi.spyOn(PollGathering.prototype, 'flush').mockImplementation(function (this: PollGathering) {
      void eventually(() => arrived === users.length).then(() => flush.call(this));
    });
    const before = ctx.database.statements.length;
    // Separate turns of the event loop, as clients' polls arrive.
    const polls = [];
    for (const [i, queueId] of queueIds.entries()) {
      polls.push(getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' }, users[i]));
      await new Promise((resolve) => setImmediate(resolve));
    }
    await eventually(async () => {
      const rows = await Promise.all(queueIds.map((queueId) => queueRow(ctx.db, queueId)));
      return rows.every((row) => row!.poll_id !== null);
    });
    const statements = ctx.database.statements.slice(before).filter((text) => !/count\(|FROM "event_queues"/.test(text));
    expect(statements.filter((text) => /api_key_hash/.test(text))).toHaveLength(1);
    expect(statements.filter((text) => /FOR UPDATE OF eq/.test(text))).toHaveLength(1);
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    expect((await polls[0]!).body).toBe(waited(queueIds[0]!, [pinEvent(true, 0)]));
    // The others are answered when the app closes.
  });
});

describe('every re-poll is a request like any other', () => {
  it("a deactivated user's or a rotated key's next poll is refused at once (its waiting poll ends at its heartbeat)", async () => {
    ctx = await createTestContext({ env: FAST_HEARTBEATS });
    const queueId = await registerQueue(ctx.app);
    const heartbeat = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' });
    expect(heartbeat.json().events).toEqual([{ type: 'heartbeat', id: 0 }]);
    await ctx.db.updateTable('users').set({ is_active: false }).where('id', '=', ids.U).execute();
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '0' }), 'Account is deactivated', 'UNAUTHORIZED', 401);
    await ctx.db
      .updateTable('users')
      .set({ is_active: true, api_key_hash: hashApiKey('rotated'.padEnd(32, '0')) })
      .where('id', '=', ids.U)
      .execute();
    expectError(await getEvents(ctx.app, { queue_id: queueId, last_event_id: '0' }), 'Invalid API key', 'UNAUTHORIZED', 401);
    // Nothing was acknowledged or taken by the refused polls.
    const row = (await queueRow(ctx.db, queueId))!;
    expect([row.last_acked_id, row.poll_id]).toEqual([-1, null]);
  });

  it('re-polls after heartbeats count towards the rate limit', async () => {
    ctx = await createTestContext({
      env: { ...FAST_HEARTBEATS, RATE_LIMITING: 'true', RATE_LIMIT_MAX_REQUESTS: '3', RATE_LIMIT_WINDOW_SECONDS: '60' },
    });
    const queueId = await registerQueue(ctx.app);
    const first = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' });
    expect(first.json().events).toEqual([{ type: 'heartbeat', id: 0 }]);
    expect(first.headers['x-ratelimit-remaining']).toBe('1');
    const second = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '0' });
    expect(second.json().events).toEqual([{ type: 'heartbeat', id: 1 }]);
    expect(second.headers['x-ratelimit-remaining']).toBe('0');
    const refused = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '1' });
    expect(refused.statusCode).toBe(429);
    expect(refused.json().code).toBe('RATE_LIMIT_HIT');
    // The refused poll did not start: the queue is free, its heartbeat still unacknowledged.
    const row = (await queueRow(ctx.db, queueId))!;
    expect([row.last_acked_id, row.poll_id]).toEqual([0, null]);
  });
});
