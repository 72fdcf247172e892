import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { REALM_MEMBERSHIP_LOCK_NAMESPACE } from '../src/db/transactions.js';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { register } from './helpers/events.js';
import { type FixtureUser, ids, queueEvents } from './helpers/fixture.js';
import { MEMBERSHIP_URL, subscribe } from './helpers/membership.js';
import { eventually } from './helpers/wait.js';

/**
 * The holders of an organization's membership lock wait in its queue in memory, without a pool
 * connection (RealmQueue in src/db/transactions.ts): a burst of subscribes and registers of
 * one organization, behind a membership change of another instance, must not take every pool
 * connection, or another organization's requests would get 503s.
 */

const POOL_MAX = 3;
let ctx: TestContext;
let lockHolder: pg.Client;
beforeEach(async () => {
  // A small pool with a short wait: holding every connection would show as 503s.
  ctx = await createTestContext({ env: { DB_POOL_MAX: String(POOL_MAX), DB_CONNECT_TIMEOUT_MS: '1000' } });
  lockHolder = new pg.Client({ connectionString: ctx.database.url });
  await lockHolder.connect();
});
afterEach(async () => {
  await lockHolder.end();
  await ctx.close();
});

/** Backends of this database waiting for an organization's membership lock. */
async function realmLockWaiters(realmId: number): Promise<number> {
  const { rows } = await lockHolder.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2 " +
      'AND database = (SELECT oid FROM pg_database WHERE datname = current_database())',
    [REALM_MEMBERSHIP_LOCK_NAMESPACE, realmId],
  );
  return rows[0]!.n;
}

/** A request in flight, and whether it has answered yet. */
function tracked<T>(promise: Promise<T>) {
  const entry = { promise, settled: false };
  void promise.finally(() => (entry.settled = true));
  return entry;
}

const SUBSCRIBERS: FixtureUser[] = ['O', 'M', 'U', 'B'];
const REGISTERING: FixtureUser[] = ['V', 'G', 'O'];
const SUBSCRIPTION_EVENTS = { fetch_event_types: '["subscription"]', event_types: '["subscription"]', include_subscribers: 'true' };

describe("an organization's membership changes wait in its queue without holding pool connections", () => {
  it('subscribes and registers behind another instance’s change use one connection; another organization is served', async () => {
    // Another instance (here: another session) holds R's membership lock: a change in progress.
    await lockHolder.query('SELECT pg_advisory_lock($1, $2)', [REALM_MEMBERSHIP_LOCK_NAMESPACE, ids.R]);
    // More subscribers than pool connections, each another user (no user's queue orders them), and registers.
    const subscribes = SUBSCRIBERS.map((user) => tracked(subscribe(ctx, { subscriptions: [{ name: 'Q' }] }, user)));
    await eventually(async () => (await realmLockWaiters(ids.R)) === 1);
    const registers = REGISTERING.map((user) => tracked(register(ctx.app, SUBSCRIPTION_EVENTS, user)));
    // A user-management write (exclusive, like a subscribe), by a user who does not subscribe.
    const renamed = tracked(api(ctx.app, { method: 'PATCH', url: `/api/v1/users/${ids.G}`, as: 'A', form: { full_name: 'G Renamed' } }));

    // Another organization's membership change gets a connection and succeeds.
    const other = await api(ctx.app, {
      method: 'POST',
      url: MEMBERSHIP_URL,
      as: 'X',
      host: 'other.chat.example.com',
      form: { subscriptions: JSON.stringify([{ name: 'C2-new' }]) },
    });
    expect(other.statusCode, other.body).toBe(200);
    expect(other.json().subscribed).toEqual({ [ids.X]: ['C2-new'] });
    // Meanwhile R's requests still wait, one of them on a connection, the others in memory.
    expect(await realmLockWaiters(ids.R)).toBe(1);
    expect(ctx.database.transactions.activeRealms).toBe(1);
    // The other organization's connection returns to the pool just after its answer (a loaded CI saw it a moment later).
    await eventually(() => ctx.database.pool.totalCount - ctx.database.pool.idleCount === 1);
    expect([...subscribes, ...registers, renamed].filter((request) => request.settled)).toEqual([]);

    await lockHolder.query('SELECT pg_advisory_unlock($1, $2)', [REALM_MEMBERSHIP_LOCK_NAMESPACE, ids.R]);
    for (const [index, request] of subscribes.entries()) {
      const res = await request.promise;
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json().subscribed).toEqual({ [ids[SUBSCRIBERS[index]!]]: ['Q'] });
    }
    const subscribed = await ctx.db
      .selectFrom('subscriptions')
      .select('user_id')
      .where('stream_id', '=', ids.Q)
      .where('active', '=', true)
      .orderBy('user_id')
      .execute();
    expect(subscribed.map((row) => row.user_id)).toEqual([ids.O, ids.M, ids.U, ids.V, ids.B]);

    const rename = await renamed.promise;
    expect(rename.statusCode, rename.body).toBe(200);
    expect((await ctx.db.selectFrom('users').select('full_name').where('id', '=', ids.G).executeTakeFirstOrThrow()).full_name).toBe(
      'G Renamed',
    );

    // V (subscribed to Q) registered while they waited: each new subscriber of Q is in its state
    // or among its queue's peer_adds, exactly once.
    const responses = await Promise.all(registers.map((request) => request.promise));
    for (const res of responses) expect(res.statusCode, res.body).toBe(200);
    const state = responses[0]!.json<{ queue_id: string; subscriptions: { stream_id: number; subscribers: number[] }[] }>();
    const inState = state.subscriptions.find((sub) => sub.stream_id === ids.Q)!.subscribers;
    const inQueue = (await queueEvents(ctx.db, state.queue_id))
      .filter((event) => event.op === 'peer_add' && (event.stream_ids as number[]).includes(ids.Q))
      .flatMap((event) => event.user_ids as number[]);
    expect([...inState, ...inQueue].sort((a, b) => a - b)).toEqual(subscribed.map((row) => row.user_id));
    expect(ctx.database.transactions.activeRealms).toBe(0);
  });
});
