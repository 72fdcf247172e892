import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { createDatabase, type DatabaseHandle } from '../src/db/database.js';
import { USER_EVENT_LOCK_NAMESPACE } from '../src/db/transactions.js';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { userLockWaiters } from './helpers/database.js';
import { OK } from './helpers/envelope.js';
import { ids } from './helpers/fixture.js';
import { auditRows, PROPERTIES_URL, subscriptionOf } from './helpers/subscriptions.js';
import { eventually } from './helpers/wait.js';

/**
 * A burst of one user's writes must not take the instance's pool connections while they wait for
 * the user's event lock: other users' requests would time out waiting for a connection (503).
 */

const { U, P } = ids;
const POOL_MAX = 3;

let ctx: TestContext;
let handle: DatabaseHandle;
let app: FastifyInstance;
let lockHolder: pg.Client;
beforeEach(async () => {
  ctx = await createTestContext();
  // A small pool with a short wait, so that holding every connection shows as 503s quickly.
  handle = createDatabase(ctx.database.url, { poolMax: POOL_MAX, connectTimeoutMs: 1000 });
  app = await buildApp({ config: ctx.config, ...handle });
  await app.ready();
  lockHolder = new pg.Client({ connectionString: ctx.database.url });
  await lockHolder.connect();
});
afterEach(async () => {
  await lockHolder.end();
  await app.close();
  await handle.close();
  await ctx.close();
});

/** The backends blocked on U's event lock. */
const lockWaiters = () => userLockWaiters(lockHolder, U);

describe("one user's writes wait in the user's queue without holding pool connections", () => {
  it("a burst by U while U's lock is held elsewhere uses one connection; V is served meanwhile", async () => {
    // Another instance (here: another session) holds U's event lock.
    await lockHolder.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, U]);
    const colors = Array.from({ length: 2 * POOL_MAX }, (_, i) => `#00000${i}`);
    const burst = colors.map((color) =>
      api(app, {
        method: 'POST',
        url: PROPERTIES_URL,
        as: 'U',
        form: { subscription_data: JSON.stringify([{ stream_id: P, property: 'color', value: color }]) },
      }),
    );
    await eventually(async () => (await lockWaiters()) === 1);
    expect(handle.transactions.activeUsers).toBe(1);

    // Longer than the pool's connection wait: V's requests still get connections.
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(await lockWaiters()).toBe(1);
    const other = await api(app, { url: `/api/v1/users/${U}`, as: 'V' });
    expect(other.statusCode).toBe(200);
    const otherWrite = await api(app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'V',
      form: { subscription_data: JSON.stringify([{ stream_id: P, property: 'is_muted', value: true }]) },
    });
    expect(otherWrite.body).toBe(OK);

    await lockHolder.query('SELECT pg_advisory_unlock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, U]);
    const responses = await Promise.all(burst);
    for (const res of responses) expect(res.body).toBe(OK);
    // One after the other: each audit row starts from the previous one's value, the last one stays.
    const audit = (await auditRows(ctx)).filter((row) => row.property === 'color');
    expect(audit.map((row) => row.new_value).sort()).toEqual(colors);
    for (let i = 1; i < audit.length; i++) expect(audit[i]!.old_value).toBe(audit[i - 1]!.new_value);
    expect((await subscriptionOf(ctx, U, P)).color).toBe(audit.at(-1)!.new_value);
    expect(handle.transactions.activeUsers).toBe(0);
  });
});
