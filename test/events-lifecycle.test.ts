import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import type { Config } from '../src/config.js';
import { createDatabase } from '../src/db/database.js';
import { LISTENER_APPLICATION_NAME } from '../src/db/event-listener.js';
import { createTestContext, type TestContext } from './helpers/app.js';
import { badQueueBody, success } from './helpers/envelope.js';
import { auth } from './helpers/fixture.js';
import { getEvents, pendingEvents, pinEvent, queueRow, registerQueue, setPinToTop, storedEventIds, waited } from './helpers/events.js';
import { eventually, sleep } from './helpers/wait.js';

/**
 * Queues outliving instances and instances outliving queues: restart (case 169), expiry (case
 * 172), graceful shutdown, and the official Python client's event loop over a real socket.
 */

let ctx: TestContext;
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await ctx?.close();
});

/** An app instance with a pool of its own on the test database; close() closes both. */
async function instance(config: Partial<Config> = {}) {
  const handle = createDatabase(ctx.database.url);
  const app = await buildApp({ config: { ...ctx.config, ...config }, ...handle });
  await app.ready();
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await app.close();
    await handle.close();
  };
  cleanups.push(close);
  return { app, close };
}

async function waitUntilPolling(queueId: string) {
  await eventually(async () => (await queueRow(ctx.db, queueId))?.poll_id != null);
}

const listenerCount = async () => {
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = ${LISTENER_APPLICATION_NAME} AND datname = current_database()
  `.execute(ctx.db);
  return rows[0]!.n;
};

describe('restart', () => {
  it('case 169: an event survives stopping every instance; the next instance serves it with the same id', async () => {
    ctx = await createTestContext();
    const first = await instance();
    const queueId = await registerQueue(first.app);
    expect((await setPinToTop(first.app, true)).statusCode).toBe(200);
    await first.close();
    await ctx.app.close();

    const second = await instance();
    expect(await pendingEvents(second.app, queueId)).toEqual([pinEvent(true, 0)]);
    expect(await pendingEvents(second.app, queueId, 'U', 0)).toEqual([]);
  });

  it('a poll cut short by a shutdown is resumed on another instance without loss', async () => {
    ctx = await createTestContext();
    const first = await instance();
    const queueId = await registerQueue(ctx.app);
    const poll = getEvents(first.app, { queue_id: queueId, last_event_id: '-1' });
    await waitUntilPolling(queueId);
    await first.close();
    expect((await poll).body).toBe(waited(queueId, []));
    await setPinToTop(ctx.app, true);
    const second = await instance();
    const res = await getEvents(second.app, { queue_id: queueId, last_event_id: '-1' });
    expect(res.body).toBe(success({ events: [pinEvent(true, 0)] }));
  });
});

describe('graceful shutdown', () => {
  it('answers every waiting poll with what is pending, closes the listener and stops the sweep', async () => {
    ctx = await createTestContext();
    const other = await instance({ queueSweepIntervalSeconds: 1 });
    expect(await listenerCount()).toBe(2);
    const queues = [await registerQueue(ctx.app), await registerQueue(ctx.app)];
    const polls = queues.map((queueId) => getEvents(other.app, { queue_id: queueId, last_event_id: '-1' }));
    for (const queueId of queues) await waitUntilPolling(queueId);

    // Closing answers them at once: a close that waited for them would see their heartbeats.
    await other.close();
    const answers = await Promise.all(polls);
    answers.forEach((res, index) => expect(res.body).toBe(waited(queues[index]!, [])));
    for (const queueId of queues) expect(await queueRow(ctx.db, queueId)).toMatchObject({ poll_id: null, poll_lease_until: null });
    await eventually(async () => (await listenerCount()) === 1);

    // The stopped instance no longer sweeps (the remaining one sweeps only every 60 s).
    await ctx.db
      .updateTable('event_queues')
      .set({ last_active_at: new Date('2020-01-01T00:00:00Z') })
      .execute();
    await sleep(1600);
    expect(await queueRow(ctx.db, queues[0]!)).toBeDefined();
  });

  it('a listening server drains a waiting long poll instead of hanging, closing its kept-alive connection', async () => {
    ctx = await createTestContext();
    const server = await instance();
    await server.app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = server.app.server.address() as AddressInfo;
    const queueId = await registerQueue(ctx.app);
    // Kept alive: the connection is closed by the server's answer, not by the client's request.
    const agent = new http.Agent({ keepAlive: true });
    const response = new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
      http
        .get(
          {
            port,
            host: '127.0.0.1',
            path: `/api/v1/events?queue_id=${queueId}&last_event_id=-1`,
            headers: { authorization: auth('U') },
            agent,
          },
          (res) => {
            let body = '';
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => (body += chunk));
            res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, body }));
          },
        )
        .on('error', reject);
    });
    await waitUntilPolling(queueId);
    await server.close();
    const { status, connection, body } = await response;
    agent.destroy();
    expect([status, connection]).toEqual([200, 'close']);
    expect(JSON.parse(body)).toEqual(JSON.parse(waited(queueId, [])));
  });
});

describe('expiry', () => {
  it('case 172: an idle queue is deleted after its lifespan plus one sweep', async () => {
    ctx = await createTestContext({ env: { QUEUE_SWEEP_INTERVAL_SECONDS: '1' } });
    const longLived = await registerQueue(ctx.app);
    const registeredAt = Date.now();
    const shortLived = await registerQueue(ctx.app, { queue_lifespan_secs: '3' });
    await setPinToTop(ctx.app, true);
    expect(await storedEventIds(ctx.db, shortLived)).toEqual([0]);
    await eventually(async () => (await queueRow(ctx.db, shortLived)) === undefined);
    // Not before its lifespan (a slower machine only sweeps later).
    expect(Date.now() - registeredAt).toBeGreaterThanOrEqual(3000);
    const res = await getEvents(ctx.app, { queue_id: shortLived, last_event_id: '-1', dont_block: 'true' });
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(badQueueBody(shortLived));
    // The sweep's DELETE takes the queue's events with it; other queues keep theirs.
    expect(await storedEventIds(ctx.db, shortLived)).toEqual([]);
    expect(await queueRow(ctx.db, longLived)).toBeDefined();
    expect(await storedEventIds(ctx.db, longLived)).toEqual([0]);
  });

  it('case 172: a queue with a poll in progress is never expired; its idle clock starts when the poll ends', async () => {
    ctx = await createTestContext({ env: { QUEUE_SWEEP_INTERVAL_SECONDS: '1' } });
    const queueId = await registerQueue(ctx.app);
    const poll = getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' });
    await waitUntilPolling(queueId);
    // Expired long ago but for the poll (set once it waits: a loaded machine may take longer than a
    // short lifespan to start it).
    await ctx.db
      .updateTable('event_queues')
      .set({ lifespan_seconds: 1, last_active_at: new Date('2020-01-01T00:00:00Z') })
      .where('id', '=', queueId)
      .execute();
    // Two sweeps: the second began after the update.
    const sweeps = () => ctx.database.statements.filter((text) => /make_interval\(secs => lifespan_seconds\) < now\(\)/.test(text)).length;
    const before = sweeps();
    await eventually(() => sweeps() >= before + 2);
    expect(await queueRow(ctx.db, queueId)).toBeDefined();
    await setPinToTop(ctx.app, true);
    expect((await poll).body).toBe(waited(queueId, [pinEvent(true, 0)]));
    const endedAt = Date.now();
    await eventually(async () => (await queueRow(ctx.db, queueId)) === undefined);
    expect(Date.now() - endedAt).toBeGreaterThanOrEqual(900);
  });

  it('a lease left by a crashed instance runs out; a live lease protects an idle queue', async () => {
    ctx = await createTestContext({ env: { QUEUE_SWEEP_INTERVAL_SECONDS: '1' } });
    const crashed = await registerQueue(ctx.app);
    const live = await registerQueue(ctx.app);
    const recent = await registerQueue(ctx.app);
    const longAgo = new Date(Date.now() - 3600_000);
    const lease = (queueId: string, until: Date, lastActive: Date) =>
      ctx.db
        .updateTable('event_queues')
        .set({ poll_id: crypto.randomUUID(), poll_lease_until: until, last_active_at: lastActive })
        .where('id', '=', queueId)
        .execute();
    await lease(crashed, new Date(Date.now() - 60_000), longAgo);
    await lease(live, new Date(Date.now() + 600_000), longAgo);
    await ctx.db
      .updateTable('event_queues')
      .set({ last_active_at: new Date(Date.now() - 300_000) })
      .where('id', '=', recent)
      .execute();
    await eventually(async () => (await queueRow(ctx.db, crashed)) === undefined);
    expect(await queueRow(ctx.db, live)).toBeDefined();
    expect(await queueRow(ctx.db, recent)).toBeDefined();
  });
});

describe("the official Python client's event loop", () => {
  /** zulip.Client.do_api_query: strings as is, other values JSON-encoded; GET in the query string. */
  async function call(baseUrl: string, method: 'GET' | 'POST' | 'DELETE', endpoint: string, request: Record<string, unknown>) {
    const fields = new URLSearchParams();
    for (const [key, value] of Object.entries(request)) fields.set(key, typeof value === 'string' ? value : JSON.stringify(value));
    const url = `${baseUrl}/api/v1/${endpoint}${method === 'GET' ? `?${fields.toString()}` : ''}`;
    const res = await fetch(url, {
      method,
      headers: { authorization: auth('U'), ...(method !== 'GET' && { 'content-type': 'application/x-www-form-urlencoded' }) },
      ...(method !== 'GET' && { body: fields.toString() }),
    });
    return (await res.json()) as {
      result: string;
      code?: string;
      queue_id?: string;
      last_event_id?: number;
      events?: { id: number; type: string }[];
    };
  }

  it('register, then get_events(queue_id, last_event_id) in a loop, re-registering after BAD_EVENT_QUEUE_ID', async () => {
    ctx = await createTestContext({
      env: { HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '0', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' },
    });
    const server = await instance();
    await server.app.listen({ port: 0, host: '127.0.0.1' });
    const baseUrl = `http://127.0.0.1:${(server.app.server.address() as AddressInfo).port}`;

    const received: { queue: string; event: { id: number; type: string } }[] = [];
    const registered: string[] = [];
    let stop = false;
    // call_on_each_event, step for step.
    const loop = (async () => {
      let queueId: string | null = null;
      let lastEventId = -1;
      while (!stop) {
        if (queueId === null) {
          const res = await call(baseUrl, 'POST', 'register', { narrow: [] });
          queueId = res.queue_id!;
          lastEventId = res.last_event_id!;
          registered.push(queueId);
        }
        const res = await call(baseUrl, 'GET', 'events', { queue_id: queueId, last_event_id: lastEventId });
        if (res.result.includes('error')) {
          if (res.code === 'BAD_EVENT_QUEUE_ID') queueId = null;
          await sleep(100);
          continue;
        }
        for (const event of res.events!) {
          lastEventId = Math.max(lastEventId, Number(event.id));
          received.push({ queue: queueId, event });
        }
      }
    })();

    await eventually(() => registered.length === 1);
    const firstQueue = registered[0]!;
    await waitUntilPolling(firstQueue);
    await setPinToTop(ctx.app, true);
    await eventually(() => received.length >= 1);
    await eventually(() => received.some(({ event }) => event.type === 'heartbeat'));

    // deregister, as client.deregister(queue_id) sends it.
    expect(await call(baseUrl, 'DELETE', 'events', { queue_id: firstQueue })).toEqual({ result: 'success', msg: '' });
    await eventually(() => registered.length === 2);
    await waitUntilPolling(registered[1]!);
    await setPinToTop(ctx.app, false);
    await eventually(() => received.some(({ queue }) => queue === registered[1]));
    stop = true;
    await setPinToTop(ctx.app, true); // ends the last poll
    await loop;

    expect(received[0]).toEqual({ queue: firstQueue, event: pinEvent(true, 0) });
    expect(received[1]).toEqual({ queue: firstQueue, event: { type: 'heartbeat', id: 1 } });
    expect(received.find(({ queue }) => queue === registered[1])).toEqual({ queue: registered[1], event: pinEvent(false, 0) });
  });
});
