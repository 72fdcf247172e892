import pg from 'pg';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { USER_EVENT_LOCK_NAMESPACE } from '../src/db/transactions.js';
import type { Departure } from '../src/lib/departure.js';
import { createTestContext, type TestContext } from './helpers/app.js';
import { userLockWaiters } from './helpers/database.js';
import { OK } from './helpers/envelope.js';
import { pendingEvents, pinEvent } from './helpers/events.js';
import { createQueue, ids } from './helpers/fixture.js';
import { auditRows, bulk, pinP, subscriptionOf } from './helpers/subscriptions.js';
import { testStatement } from './helpers/statements.js';
import { waitFor } from './helpers/wait.js';

// A small write whose user's lock another instance holds (here: another session) holds up
// no other user's write. It is refused the lock on the shared write connection and sent again on a
// pooled connection of its own, where it waits (src/db/transactions.ts, commit-groups.ts).

let ctx: TestContext;
let other: pg.Client;
beforeAll(async () => {
  // No statement timeout: a write that waited on a shared connection for the lock would wait until
  // the lock is released, so that "answered while the lock is held" tells the two designs apart.
  ctx = await createTestContext({ env: { DB_STATEMENT_TIMEOUT_MS: '0' } });
});
afterAll(() => ctx.close());
beforeEach(async () => {
  other = new pg.Client({ connectionString: ctx.database.url });
  await other.connect();
  await other.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
});
afterEach(async () => {
  await other.end(); // releases U's lock if a test left it held
  for (const [userId, name] of [
    [ids.M, 'M Mod'],
    [ids.U, 'U Member'],
    [ids.V, 'V Member'],
  ] as const) {
    await ctx.db.updateTable('users').set({ full_name: name }).where('id', '=', userId).execute();
  }
});

const releaseU = () => other.query('SELECT pg_advisory_unlock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
const lockWaiters = () => userLockWaiters(other, ids.U);
/** The backend waiting for U's lock. */
async function lockWaiter(): Promise<number> {
  const { rows } = await other.query<{ pid: number }>(
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2 " +
      'AND database = (SELECT oid FROM pg_database WHERE datname = current_database())',
    [USER_EVENT_LOCK_NAMESPACE, ids.U],
  );
  return rows[0]!.pid;
}

const LOCK = 'SELECT pg_advisory_xact_lock($1, $2)';
const LOCK_NOW = 'SELECT user_lock_now($1, $2)';
/** Renames a user; answers the transaction id and the backend. */
const rename = testStatement<{ userId: number; name: string }, { id: number; xid: string; pid: number }>(['userId', 'name'], (db, args) =>
  db
    .updateTable('users')
    .set({ full_name: args.name })
    .where('id', '=', args.userId)
    .returning(['id', sql<string>`xmin::text`.as('xid'), sql<number>`pg_backend_pid()`.as('pid')]),
);
const renameAs = (userId: number, name: string, departure?: Departure) =>
  ctx.database.transactions.run(userId, [rename.with({ userId, name })], departure).then(([rows]) => rows);
const nameOf = async (userId: number) =>
  (await ctx.db.selectFrom('users').select('full_name').where('id', '=', userId).executeTakeFirstOrThrow()).full_name;
const UPDATE = expect.stringContaining('update "users"');

describe('a small write whose user is locked elsewhere', () => {
  it('holds up no one in its group: the others commit together while the lock is held; it waits on a connection of its own and commits once', async () => {
    ctx.database.statements.length = 0;
    let uSettled = false;
    const [m, u, v] = [ids.M, ids.U, ids.V].map((userId) => renameAs(userId, `Renamed ${userId}`));
    void u!.then(
      () => (uSettled = true),
      () => (uSettled = true),
    );
    const [mRows, vRows] = await Promise.all([m!, v!]); // while U's lock is still held
    expect(vRows[0]!.xid).toBe(mRows[0]!.xid); // sent again together, without U
    await waitFor(async () => expect(await lockWaiters()).toBe(1)); // U waits for its lock
    expect(uSettled).toBe(false);
    expect([await nameOf(ids.M), await nameOf(ids.U), await nameOf(ids.V)]).toEqual([`Renamed ${ids.M}`, 'U Member', `Renamed ${ids.V}`]);

    await releaseU();
    const uRows = await u!;
    expect(uRows).toEqual([{ id: ids.U, xid: expect.any(String), pid: expect.any(Number) }]);
    expect(uRows[0]!.pid).not.toBe(mRows[0]!.pid); // not on the shared write connection
    expect(await nameOf(ids.U)).toBe(`Renamed ${ids.U}`);
    // The group (M, U, V), refused at U's lock; M and V again; U once more with the waiting lock.
    expect(ctx.database.statements.filter((text) => !text.startsWith('select'))).toEqual(
      [
        ['BEGIN', LOCK_NOW, UPDATE, LOCK_NOW, UPDATE, LOCK_NOW, UPDATE, 'COMMIT'],
        ['BEGIN', LOCK_NOW, UPDATE, LOCK_NOW, UPDATE, 'COMMIT'],
        ['BEGIN', LOCK, UPDATE, 'COMMIT'],
      ].flat(),
    );
  });

  it('alone in its turn, it does not wait on a shared write connection either; the shared connections serve others meanwhile', async () => {
    // The shared connections' backends: a group of three and one write alone.
    const shared = new Set<number>();
    for (const rows of await Promise.all([ids.M, ids.V, ids.O].map((userId) => renameAs(userId, 'Probe')))) shared.add(rows[0]!.pid);
    shared.add((await renameAs(ids.V, 'Probe'))[0]!.pid);

    const u = renameAs(ids.U, 'Alone');
    await waitFor(async () => expect(await lockWaiters()).toBe(1));
    expect(shared).not.toContain(await lockWaiter());
    const v = await renameAs(ids.V, 'Meanwhile');
    expect(shared).toContain(v[0]!.pid);
    expect(await nameOf(ids.V)).toBe('Meanwhile');
    expect(await lockWaiters()).toBe(1);

    await releaseU();
    expect(await u).toEqual([{ id: ids.U, xid: expect.any(String), pid: expect.any(Number) }]);
    expect(await nameOf(ids.U)).toBe('Alone');
    await ctx.db.updateTable('users').set({ full_name: 'O Owner' }).where('id', '=', ids.O).execute();
  });

  it('refused first in a group whose statements are new to the connection, it leaves the connection serving (not closed as uncertain)', async () => {
    const shared = (await renameAs(ids.V, 'Probe'))[0]!.pid;
    // A statement no connection has prepared yet: the group sends its Parse before U's refused lock.
    const fresh = testStatement<{ userId: number }, { pid: number }>(['userId'], (db, args) =>
      db
        .selectFrom('users')
        .select(sql<number>`pg_backend_pid() + 0`.as('pid'))
        .where('id', '=', args.userId),
    );
    const [u, v] = [ids.U, ids.V].map((userId) => ctx.database.transactions.run(userId, [fresh.with({ userId })]).then(([rows]) => rows));
    expect((await v!)[0]!.pid).toBe(shared); // V again, on the same connection
    await waitFor(async () => expect(await lockWaiters()).toBe(1));
    await releaseU();
    expect((await u!)[0]!.pid).not.toBe(shared);
    expect((await renameAs(ids.V, 'Probe'))[0]!.pid).toBe(shared);
  });

  it('when its client leaves while it waits for its lock, it is cancelled and nothing of it is written', async () => {
    let leave = () => undefined as void;
    const leaving: Departure = { gone: false, onGone: (listener) => ((leave = listener), () => undefined) };
    const u = renameAs(ids.U, 'Cancelled', leaving);
    await waitFor(async () => expect(await lockWaiters()).toBe(1));
    leave();
    await expect(u).rejects.toMatchObject({ code: '57014' }); // canceling statement due to user request
    expect(await lockWaiters()).toBe(0);
    await releaseU();
    expect(await nameOf(ids.U)).toBe('U Member');
  });
});

describe('requests of one turn, one of them by a user locked elsewhere', () => {
  it("the others are answered while the lock is held; the locked user's once it is released, its rows and events written once", async () => {
    const queues = { U: await createQueue(ctx.db, 'U'), V: await createQueue(ctx.db, 'V'), G: await createQueue(ctx.db, 'G') };
    const [u, v, g] = (['U', 'V', 'G'] as const).map((as) => bulk(ctx, pinP, as));
    expect((await v!).body).toBe(OK);
    expect((await g!).body).toBe(OK);
    await waitFor(async () => expect(await lockWaiters()).toBe(1));
    expect((await subscriptionOf(ctx, ids.U, ids.P)).pin_to_top).toBe(false);
    expect(await pendingEvents(ctx.app, queues.U, 'U')).toEqual([]);

    await releaseU();
    expect((await u!).body).toBe(OK);
    for (const [as, userId] of [
      ['U', ids.U],
      ['V', ids.V],
      ['G', ids.G],
    ] as const) {
      expect((await subscriptionOf(ctx, userId, ids.P)).pin_to_top).toBe(true);
      expect(await pendingEvents(ctx.app, queues[as], as)).toEqual([pinEvent(true, 0)]);
    }
    const audit = await auditRows(ctx);
    expect(audit.map((row) => row.acting_user_id).sort()).toEqual([ids.U, ids.V, ids.G].sort());
    expect(audit.every((row) => row.property === 'pin_to_top' && row.new_value === true)).toBe(true);
  });
});
