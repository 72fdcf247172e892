import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestContext, type TestContext } from './helpers/app.js';
import { auth, createQueue } from './helpers/fixture.js';
import { eventually } from './helpers/wait.js';

/**
 * A storm of polls of one queue (a buggy client's retry loop, or an account doing it on purpose):
 * the starts of one queue take their turns, one at a time, so the storm holds about one pooled
 * connection and another organization's requests find the pool free.
 */

const POOL = 8;
const STORM = 200;

let ctx: TestContext;
beforeAll(async () => {
  ctx = await createTestContext({ env: { DB_POOL_MAX: String(POOL) } });
});
afterAll(() => ctx.close());

const poll = (queueId: string, dontBlock = false) =>
  ctx.app.inject({
    method: 'GET',
    url: `/api/v1/events?queue_id=${queueId}&last_event_id=-1${dontBlock ? '&dont_block=true' : ''}`,
    headers: { host: 'chat.example.com', authorization: auth('U') },
  });

describe('a storm of polls of one queue', () => {
  it("holds few pooled connections and leaves none waiting: another organization's request answers meanwhile", async () => {
    const queueId = await createQueue(ctx.db, 'U');
    const pool = ctx.database.pool;
    let peakInUse = 0;
    let peakWaiting = 0;
    let sampling = true;
    const sample = () => {
      peakInUse = Math.max(peakInUse, pool.totalCount - pool.idleCount);
      peakWaiting = Math.max(peakWaiting, pool.waitingCount);
      if (sampling) setImmediate(sample);
    };
    sample();
    const storm = Array.from({ length: STORM }, () => poll(queueId));
    const victim = await ctx.app.inject({
      method: 'GET',
      url: '/api/v1/users/me/subscriptions',
      headers: { host: 'other.chat.example.com', authorization: auth('X') },
    });
    // Every poll but the newest is replaced by the next one: it answers with what is pending, nothing.
    // Every poll but the one that came last is replaced by the next: it answers with what is
    // pending, nothing. The last waits; a poll that does not block replaces it.
    let answered = 0;
    for (const request of storm) void request.then(() => answered++);
    await eventually(() => answered === STORM - 1, 60_000);
    expect((await poll(queueId, true)).statusCode).toBe(200);
    const answers = await Promise.all(storm);
    sampling = false;
    expect(victim.statusCode).toBe(200);
    expect(victim.json()).toMatchObject({ result: 'success' });
    for (const answer of answers) {
      expect(answer.statusCode).toBe(200);
      expect(answer.json()).toEqual({ result: 'success', msg: '', events: [], queue_id: queueId });
    }
    // The storm's starts take their turns: one start of the queue at a time, the replaced poll's
    // end beside it, the victim's statements (4 or 5 seen): never the whole pool (before: all 8 in use and 192
    // statements waiting for one), and no request waits for a connection.
    expect(peakWaiting).toBe(0);
    expect(peakInUse).toBeLessThan(POOL);
  });
});
