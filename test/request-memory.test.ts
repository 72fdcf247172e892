import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { USER_EVENT_LOCK_NAMESPACE } from '../src/db/transactions.js';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { OK, UNAVAILABLE } from './helpers/envelope.js';
import { auth, ids } from './helpers/fixture.js';
import { userLockWaiters } from './helpers/database.js';
import { getEvents, registerQueue } from './helpers/events.js';
import { bulk, PROPERTIES_URL, subscriptionOf } from './helpers/subscriptions.js';
import { eventually } from './helpers/wait.js';

// The bodies an instance holds are bounded per user (429) and in all (503), whatever
// one account sends; its own writes waiting for their turn are what it may hold.

let ctx: TestContext | undefined;
let locker: pg.Client | undefined;
afterEach(async () => {
  await locker?.end();
  locker = undefined;
  await ctx?.close();
  ctx = undefined;
});

/** The held writes wait for U's lock as long as the test needs, even on a loaded machine (not 503 after the 5 s statement timeout). */
const WAIT_FOR_LOCK = { DB_STATEMENT_TIMEOUT_MS: '60000' };

const USER_QUEUE_FULL = JSON.stringify({ result: 'error', msg: 'API usage exceeded rate limit', code: 'RATE_LIMIT_HIT', 'retry-after': 1 });

/** Holds U's write lock from another connection, as U's write on another instance would: U's writes here wait. */
async function holdLockOfU(context: TestContext): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: context.database.url });
  await client.connect();
  await client.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
  return client;
}

const pinTo = (value: boolean, streamId: number = ids.P) => JSON.stringify([{ stream_id: streamId, property: 'pin_to_top', value }]);
/** A bulk body padded to about `bytes` with an ignored parameter. */
const padded = (bytes: number) => ({ padding: 'x'.repeat(bytes) });

describe('one user', () => {
  it('holds at most USER_REQUEST_BODIES bodies: the next gets 429 with retry-after 1 and changes nothing; others are served', async () => {
    ctx = await createTestContext({ env: { ...WAIT_FOR_LOCK, USER_REQUEST_BODIES: '2' } });
    locker = await holdLockOfU(ctx);
    const waiting = [bulk(ctx, pinTo(true)), bulk(ctx, pinTo(true))];
    await eventually(async () => (await userLockWaiters(locker!, ids.U)) === 1);
    const refused = await bulk(ctx, JSON.stringify([{ stream_id: ids.P, property: 'color', value: '#123456' }]));
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.body).toBe(USER_QUEUE_FULL);
    // Another user is not held up.
    expect((await bulk(ctx, pinTo(true), 'V')).body).toContain('"result":"success"');
    await locker.query('SELECT pg_advisory_unlock_all()');
    expect((await Promise.all(waiting)).map((res) => res.statusCode)).toEqual([200, 200]);
    // The refused color was never written; U's budget is free again.
    expect((await subscriptionOf(ctx, ids.U, ids.P))?.color).not.toBe('#123456');
    expect((await bulk(ctx, pinTo(false))).body).toContain('"result":"success"');
  });

  it('holds at most USER_REQUEST_BODY_BYTES: a second large body waits no queue, a small one still fits', async () => {
    ctx = await createTestContext({ env: { ...WAIT_FOR_LOCK, USER_REQUEST_BODY_BYTES: '4096' } });
    locker = await holdLockOfU(ctx);
    const first = bulk(ctx, pinTo(true), 'U', padded(3000));
    await eventually(async () => (await userLockWaiters(locker!, ids.U)) === 1);
    const large = await bulk(ctx, pinTo(false), 'U', padded(3000));
    expect(large.statusCode).toBe(429);
    expect(large.body).toBe(USER_QUEUE_FULL);
    const small = bulk(ctx, pinTo(false), 'U');
    await locker.query('SELECT pg_advisory_unlock_all()');
    expect((await first).statusCode).toBe(200);
    expect((await small).statusCode).toBe(200);
    expect((await subscriptionOf(ctx, ids.U, ids.P))?.pin_to_top).toBe(false);
  });
});

describe('the instance', () => {
  it('holds at most REQUEST_BODY_MEMORY_BYTES of authenticated bodies: beyond, 503; reads and unauthenticated requests are not affected', async () => {
    ctx = await createTestContext({ env: { ...WAIT_FOR_LOCK, REQUEST_BODY_MEMORY_BYTES: '4096', BODY_LIMIT_BYTES: '4096' } });
    locker = await holdLockOfU(ctx);
    const held = bulk(ctx, pinTo(true), 'U', padded(3000));
    await eventually(async () => (await userLockWaiters(locker!, ids.U)) === 1);
    const body = `subscription_data=${encodeURIComponent(pinTo(true))}&padding=${'y'.repeat(2000)}`;
    const send = (authorization: string, headers: Record<string, string> = {}) =>
      api(ctx!.app, {
        method: 'POST',
        url: PROPERTIES_URL,
        payload: body,
        headers: { authorization, 'content-type': 'application/x-www-form-urlencoded', ...headers },
      });
    const refused = await send(auth('V'));
    expect(refused.statusCode).toBe(503);
    expect(refused.body).toBe(UNAVAILABLE);
    expect(refused.headers['retry-after']).toBe('5');
    // A chunked body counts as what its fields hold.
    expect((await send(auth('V'), { 'transfer-encoding': 'chunked' })).statusCode).toBe(503);
    // Requests without valid credentials never count against the users' budget.
    expect((await send('Basic nonsense')).statusCode).toBe(401);
    expect((await subscriptionOf(ctx, ids.V, ids.P))?.pin_to_top).toBe(false);
    expect((await api(ctx.app, { url: '/api/v1/users/14', as: 'V' })).statusCode).toBe(200);
    await locker.query('SELECT pg_advisory_unlock_all()');
    expect((await held).body).toBe(OK.replace('}', ',"ignored_parameters_unsupported":["padding"]}'));
    // Released: the same request now passes.
    expect((await send(auth('V'))).statusCode).toBe(200);
    expect((await subscriptionOf(ctx, ids.V, ids.P))?.pin_to_top).toBe(true);
  });
});

describe('a burst of large writes from one account', () => {
  it('keeps the heap bounded (under 150 MB above where it started) and serves every one: large bodies take turns, unrefused', async () => {
    ctx = await createTestContext({ env: { RATE_LIMITING: 'true' } });
    // 10,000 entries on one subscription (about 500 KB urlencoded), the largest update the limits allow.
    const entries = Array.from({ length: 10_000 }, (_, index) => ({
      stream_id: ids.P,
      property: 'color',
      value: `#${String(index).padStart(6, '0')}`,
    }));
    const payload = `subscription_data=${encodeURIComponent(JSON.stringify(entries))}`;
    global.gc?.();
    const baseline = process.memoryUsage().heapUsed;
    let peak = baseline;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().heapUsed);
    }, 5);
    try {
      const responses = await Promise.all(
        // 40, not more: one account's large bodies are served one at a time (src/http/body.ts, largeBodyTurns).
        Array.from({ length: 40 }, () =>
          api(ctx!.app, {
            method: 'POST',
            url: PROPERTIES_URL,
            as: 'U',
            payload,
            headers: { 'content-type': 'application/x-www-form-urlencoded' },
          }),
        ),
      );
      expect(responses.map((res) => res.statusCode)).toEqual(responses.map(() => 200));
    } finally {
      clearInterval(sampler);
    }
    expect(peak - baseline).toBeLessThan(150 * 1024 * 1024);
  });
});

describe("a request's raw parameters", () => {
  it('are let go once decoded: a waiting long poll or a write waiting for its turn keeps only the decoded values', async () => {
    const held: { url: string; query: number; body: number }[] = [];
    ctx = await createTestContext({
      beforeReady: (app) => {
        // onSend: after the handler, while the answer is still to be written.
        app.addHook('onSend', async (request) => {
          const sources = request.parameterSources;
          if (sources) held.push({ url: request.url.split('?')[0]!, query: sources.query.size, body: sources.body.size });
        });
      },
    });
    const queueId = await registerQueue(ctx.app, { event_types: '["subscription"]' });
    const res = await getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1', dont_block: 'true' });
    expect(res.json()).toEqual({ result: 'success', msg: '', events: [] });
    expect(held).toEqual([
      { url: '/api/v1/register', query: 0, body: 0 },
      { url: '/api/v1/events', query: 0, body: 0 },
    ]);
  });
});
