import net from 'node:net';
import pg from 'pg';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, expectTypeOf, it } from 'vitest';
import { isDatabaseUnavailable } from '../src/db/errors.js';
import { ClientGone, type TransactionStatements, USER_EVENT_LOCK_NAMESPACE, type Transactions } from '../src/db/transactions.js';
import type { Departure } from '../src/lib/departure.js';
import { createTestContext, type TestContext } from './helpers/app.js';
import { userLockWaiters } from './helpers/database.js';
import { auth, ids } from './helpers/fixture.js';
import { PROPERTIES_URL } from './helpers/subscriptions.js';
import { testStatement } from './helpers/statements.js';
import { waitFor } from './helpers/wait.js';

// src/db/transactions.ts: a user's statements in one pipelined transaction (BEGIN … COMMIT in
// one burst) under the user's lock, cancelled when the client goes away.

let ctx: TestContext;
let other: pg.Client;
beforeAll(async () => {
  ctx = await createTestContext();
});
afterAll(() => ctx.close());
beforeEach(async () => {
  other = new pg.Client({ connectionString: ctx.database.url });
  await other.connect();
});
afterEach(async () => {
  await other.end();
});

const renameU = testStatement<{ userId: number; name: string }, { id: number }>(['userId', 'name'], (db, args) =>
  db.updateTable('users').set({ full_name: args.name }).where('id', '=', args.userId).returning('id'),
);
const nameOfU = async () =>
  (await ctx.db.selectFrom('users').select('full_name').where('id', '=', ids.U).executeTakeFirstOrThrow()).full_name;

/** Backends waiting for U's user lock. */
const lockWaiters = () => userLockWaiters(other, ids.U);

describe('Transactions', () => {
  it('commits the statements of a work together behind the lock: BEGIN, the lock, the statements, COMMIT, sent in one burst', async () => {
    for (const size of ['small', 'large'] as const) {
      ctx.database.statements.length = 0;
      const rows = await ctx.database.transactions.run(ids.U, [renameU.with({ userId: ids.U, name: 'Renamed' })], undefined, size);
      expect(rows).toEqual([[{ id: ids.U }]]);
      // A small one's lock is refused rather than waited for, on a shared connection (user-lock-elsewhere.test.ts).
      const lock = size === 'small' ? 'SELECT user_lock_now($1, $2)' : 'SELECT pg_advisory_xact_lock($1, $2)';
      expect(ctx.database.statements).toEqual(['BEGIN', lock, expect.stringContaining('update "users"'), 'COMMIT']);
      expect(await nameOfU()).toBe('Renamed');
      await renameU(ctx.database.shortStatements, { userId: ids.U, name: 'U Member' });
    }
  });

  it("resolves to each statement's rows, in order, typed by the statements; a statement left out is not sent", async () => {
    const doubled = testStatement<{ x: number }, { y: number }>(['x'], (db, args) =>
      db.selectNoFrom(sql<number>`${args.x}::integer * 2`.as('y')),
    );
    const wanted = false as boolean;
    ctx.database.statements.length = 0;
    const result = await ctx.database.transactions.run(ids.U, [
      doubled.with({ x: 2 }),
      wanted ? doubled.with({ x: 3 }) : undefined,
      renameU.with({ userId: ids.U, name: 'U Member' }),
    ]);
    expectTypeOf(result).toEqualTypeOf<[{ y: number }[], { y: number }[] | undefined, { id: number }[]]>();
    expect(result).toEqual([[{ y: 4 }], undefined, [{ id: ids.U }]]);
    expect(ctx.database.statements).toEqual([
      'BEGIN',
      'SELECT user_lock_now($1, $2)',
      expect.stringContaining('* 2'),
      expect.stringContaining('update "users"'),
      'COMMIT',
    ]);
    // A transaction of no statement sends nothing, not even the lock.
    ctx.database.statements.length = 0;
    expect(await ctx.database.transactions.run(ids.U, [wanted ? doubled.with({ x: 1 }) : undefined])).toEqual([undefined]);
    expect(ctx.database.statements).toEqual([]);
  });

  it("a statement depending on an earlier one's rows cannot be written: the statements are data, not a callback", () => {
    // The callback form (issue statements, await, issue more) no longer type-checks.
    type Statements = Parameters<Transactions['run']>[1];
    expectTypeOf<Statements>().not.toBeFunction();
    expectTypeOf<Statements>().toEqualTypeOf<TransactionStatements>();
  });

  it('statements after a failing one are not run, and nothing of the transaction is kept', async () => {
    const failing = testStatement<{ divisor: number }, { q: number }>(['divisor'], (db, args) =>
      db.selectNoFrom(sql<number>`1 / ${args.divisor}::integer`.as('q')),
    );
    // nextval is not transactional: a run statement would leave its mark after the rollback.
    await sql`CREATE SEQUENCE test_after_failure`.execute(ctx.db);
    const advance = testStatement<{ by: number }, { n: string }>(['by'], (db, args) =>
      db.selectNoFrom(sql<string>`nextval('test_after_failure') + ${args.by}::integer`.as('n')),
    );
    for (const size of ['small', 'large'] as const) {
      const outcome = ctx.database.transactions.run(
        ids.U,
        [failing.with({ divisor: 0 }), advance.with({ by: 0 }), renameU.with({ userId: ids.U, name: 'Never' })],
        undefined,
        size,
      );
      await expect(outcome).rejects.toMatchObject({ code: '22012' }); // division_by_zero
    }
    const sequence = await sql<{ is_called: boolean }>`SELECT is_called FROM test_after_failure`.execute(ctx.db);
    expect(sequence.rows).toEqual([{ is_called: false }]);
    expect(await nameOfU()).toBe('U Member');
    // The same statement, run, leaves the mark the check above looks for.
    await ctx.database.transactions.run(ids.U, [advance.with({ by: 0 })]);
    expect((await sql<{ is_called: boolean }>`SELECT is_called FROM test_after_failure`.execute(ctx.db)).rows).toEqual([
      { is_called: true },
    ]);
    await sql`DROP SEQUENCE test_after_failure`.execute(ctx.db);
  });

  it('a failing statement rolls back the statements before it (one transaction), on both kinds of connection', async () => {
    const failing = testStatement<{ divisor: number }, { q: number }>(['divisor'], (db, args) =>
      db.selectNoFrom(sql<number>`1 / ${args.divisor}::integer`.as('q')),
    );
    for (const size of ['small', 'large'] as const) {
      const outcome = ctx.database.transactions.run(
        ids.U,
        [renameU.with({ userId: ids.U, name: 'Rolled back' }), failing.with({ divisor: 0 })],
        undefined,
        size,
      );
      await expect(outcome).rejects.toMatchObject({ code: '22012' });
      expect(await nameOfU()).toBe('U Member');
      // The connection serves the next transaction.
      expect(await ctx.database.transactions.run(ids.U, [failing.with({ divisor: 1 })], undefined, size)).toEqual([[{ q: 1 }]]);
    }
  });

  it("keeps each connection's prepared statements right when a transaction that prepares one fails", async () => {
    for (const size of ['small', 'large'] as const) {
      // Fails at its Parse: the connection is replaced, so the statement is prepared afresh
      // (a stale record would answer 26000, "prepared statement does not exist").
      const unparsable = testStatement<{ x: number }, { y: number }>(['x'], (db, args) =>
        db.selectNoFrom(sql<number>`no_such_function(${args.x}::integer)`.as('y')),
      );
      for (let attempt = 0; attempt < 2; attempt++) {
        await expect(ctx.database.transactions.run(ids.U, [unparsable.with({ x: 1 })], undefined, size)).rejects.toMatchObject({
          code: '42883',
        });
      }
      // Prepared, then the transaction fails after it: the statement stays prepared (preparing it
      // again would answer 42P05, "prepared statement already exists").
      const doubled = testStatement<{ x: number }, { y: number }>(['x'], (db, args) =>
        db.selectNoFrom(sql<number>`${args.x}::integer * 2`.as('y')),
      );
      const divided = testStatement<{ x: number }, { y: number }>(['x'], (db, args) =>
        db.selectNoFrom(sql<number>`1 / ${args.x}::integer`.as('y')),
      );
      await expect(
        ctx.database.transactions.run(ids.U, [doubled.with({ x: 2 }), divided.with({ x: 0 })], undefined, size),
      ).rejects.toMatchObject({ code: '22012' });
      for (let attempt = 0; attempt < 4; attempt++) {
        expect(await ctx.database.transactions.run(ids.U, [doubled.with({ x: attempt })], undefined, size)).toEqual([[{ y: attempt * 2 }]]);
      }
    }
  });

  it('small transactions share the write connections: at most DB_WRITE_CONNECTIONS (2) backends for any number of users', async () => {
    const backend = testStatement<{ userId: number }, { pid: number }>(['userId'], (db, args) =>
      db
        .selectFrom('users')
        .select(sql<number>`pg_backend_pid()`.as('pid'))
        .where('id', '=', args.userId),
    );
    const users = [ids.O, ids.A, ids.M, ids.U, ids.V, ids.G];
    const pids = await Promise.all(users.map((userId) => ctx.database.transactions.run(userId, [backend.with({ userId })])));
    expect(new Set(pids.map(([rows]) => rows[0]!.pid)).size).toBeLessThanOrEqual(2);
    const [large] = await ctx.database.transactions.run(ids.U, [backend.with({ userId: ids.U })], undefined, 'large');
    expect(pids.map(([rows]) => rows[0]!.pid)).not.toContain(large[0]!.pid); // a pooled connection
  });

  it('a client gone before its turn sends nothing; a large transaction whose client leaves while it waits for the lock is cancelled and rolled back', async () => {
    const gone: Departure = { gone: true, onGone: () => () => undefined };
    ctx.database.statements.length = 0;
    await expect(ctx.database.transactions.run(ids.U, [renameU.with({ userId: ids.U, name: 'Never' })], gone)).rejects.toBeInstanceOf(
      ClientGone,
    );
    expect(ctx.database.statements).toEqual([]);

    await other.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
    let leave = () => undefined as void;
    const leaving: Departure = { gone: false, onGone: (listener) => ((leave = listener), () => undefined) };
    const waiting = ctx.database.transactions.run(ids.U, [renameU.with({ userId: ids.U, name: 'Cancelled' })], leaving, 'large');
    await waitFor(async () => expect(await lockWaiters()).toBe(1));
    leave();
    await expect(waiting).rejects.toMatchObject({ code: '57014' }); // canceling statement due to user request
    expect(await lockWaiters()).toBe(0);
    await other.query('SELECT pg_advisory_unlock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
    expect(await nameOfU()).toBe('U Member');
    // The cancelled connection was closed, not handed back: the next transaction works.
    expect(await ctx.database.transactions.run(ids.U, [renameU.with({ userId: ids.U, name: 'U Member' })], undefined, 'large')).toEqual([
      [{ id: ids.U }],
    ]);
  });

  it("an interactive transaction: BEGIN and the lock leave with the work's first statement; a failed lock fails it, whatever the work made of its statement's failure", async () => {
    await other.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
    let leave = () => undefined as void;
    const leaving: Departure = { gone: false, onGone: (listener) => ((leave = listener), () => undefined) };
    let issued = false;
    let swallowed: unknown;
    const outcome = ctx.database.transactions.runInteractive(
      ids.U,
      async (tx) => {
        issued = true;
        await renameU(tx, { userId: ids.U, name: 'Never' }).catch((error: unknown) => (swallowed = error));
        return 'done';
      },
      leaving,
    );
    await waitFor(async () => expect(await lockWaiters()).toBe(1));
    expect(issued).toBe(true); // its first statement was sent behind the lock, not after it
    leave();
    await expect(outcome).rejects.toMatchObject({ code: '57014' }); // the lock's wait, cancelled
    expect(swallowed).toMatchObject({ code: '57014' }); // not 25P02: the transaction's first failure
    await other.query('SELECT pg_advisory_unlock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
    expect(await nameOfU()).toBe('U Member');
    ctx.database.statements.length = 0;
    expect(await ctx.database.transactions.runInteractive(ids.U, (tx) => renameU(tx, { userId: ids.U, name: 'U Member' }))).toEqual([
      { id: ids.U },
    ]);
    expect(ctx.database.statements).toEqual([
      'BEGIN',
      'SELECT pg_advisory_xact_lock($1, $2)',
      expect.stringContaining('update "users"'),
      'COMMIT',
    ]);
  });
});

describe('commit groups: the small transactions of different users in one turn', () => {
  const LOCK = 'SELECT user_lock_now($1, $2)';
  /** Renames a user; answers the transaction id and the time of the statement within it. */
  const rename = testStatement<{ userId: number; name: string }, { id: number; xid: string; at: number }>(['userId', 'name'], (db, args) =>
    db
      .updateTable('users')
      .set({ full_name: args.name })
      .where('id', '=', args.userId)
      .returning(['id', sql<string>`xmin::text`.as('xid'), sql<number>`extract(epoch FROM clock_timestamp())::float8`.as('at')]),
  );
  const divide = testStatement<{ divisor: number }, { q: number }>(['divisor'], (db, args) =>
    db.selectNoFrom(sql<number>`1 / ${args.divisor}::integer`.as('q')),
  );
  const nameOf = async (userId: number) =>
    (await ctx.db.selectFrom('users').select('full_name').where('id', '=', userId).executeTakeFirstOrThrow()).full_name;
  afterEach(async () => {
    await ctx.db.updateTable('users').set({ full_name: 'M Mod' }).where('id', '=', ids.M).execute();
    await ctx.db.updateTable('users').set({ full_name: 'U Member' }).where('id', '=', ids.U).execute();
    await ctx.db.updateTable('users').set({ full_name: 'V Member' }).where('id', '=', ids.V).execute();
  });

  it('commit as one transaction, each behind its own lock, in user id order, each answered its own rows', async () => {
    ctx.database.statements.length = 0;
    // V first: the group still takes U's lock (13) before V's (14).
    const [v, u] = (
      await Promise.all(
        [ids.V, ids.U].map((userId) => ctx.database.transactions.run(userId, [rename.with({ userId, name: `Grouped ${userId}` })])),
      )
    ).map(([rows]) => rows);
    expect(u).toEqual([{ id: ids.U, xid: expect.any(String), at: expect.any(Number) }]);
    expect(v).toEqual([{ id: ids.V, xid: u![0]!.xid, at: expect.any(Number) }]); // the same transaction
    expect(u![0]!.at).toBeLessThan(v![0]!.at);
    expect(ctx.database.statements).toEqual([
      'BEGIN',
      LOCK,
      expect.stringContaining('update "users"'),
      LOCK,
      expect.stringContaining('update "users"'),
      'COMMIT',
    ]);
    expect([await nameOf(ids.U), await nameOf(ids.V)]).toEqual([`Grouped ${ids.U}`, `Grouped ${ids.V}`]);
  });

  it('a member that fails is answered alone; the group rolls back and the others commit again together', async () => {
    ctx.database.statements.length = 0;
    const [m, u, v] = await Promise.allSettled([
      ctx.database.transactions.run(ids.M, [rename.with({ userId: ids.M, name: 'Committed again' })]),
      ctx.database.transactions.run(ids.U, [rename.with({ userId: ids.U, name: 'Never' }), divide.with({ divisor: 0 })]),
      ctx.database.transactions.run(ids.V, [rename.with({ userId: ids.V, name: 'Committed again' })]),
    ]);
    expect(u).toMatchObject({ status: 'rejected', reason: { code: '22012' } });
    expect(m).toMatchObject({ status: 'fulfilled', value: [[{ id: ids.M }]] });
    expect(v).toMatchObject({ status: 'fulfilled', value: [[{ id: ids.V }]] });
    const xid = (outcome: PromiseSettledResult<[{ xid: string }[]]>) =>
      (outcome as PromiseFulfilledResult<[{ xid: string }[]]>).value[0][0]!.xid;
    expect(xid(v)).toBe(xid(m));
    // The group (BEGIN, M's two statements, U's three, V's two, COMMIT), U again alone, then M and V again together.
    expect(ctx.database.statements).toHaveLength(9 + 5 + 6);
    expect([await nameOf(ids.M), await nameOf(ids.U), await nameOf(ids.V)]).toEqual(['Committed again', 'U Member', 'Committed again']);
  });

  it('a value that cannot be sent fails its member only: ROLLBACK in place of COMMIT, nothing of it kept, the others committed', async () => {
    const echo = testStatement<{ value: unknown }, { value: unknown }>(['value'], (db, args) =>
      db.selectNoFrom(sql<unknown>`${args.value}::jsonb`.as('value')),
    );
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    ctx.database.statements.length = 0;
    const [u, v] = await Promise.allSettled([
      ctx.database.transactions.run(ids.U, [rename.with({ userId: ids.U, name: 'Never' }), echo.with({ value: circular })]),
      ctx.database.transactions.run(ids.V, [rename.with({ userId: ids.V, name: 'Sent alone' })]),
    ]);
    expect(u).toMatchObject({ status: 'rejected', reason: expect.any(TypeError) });
    expect(v).toMatchObject({ status: 'fulfilled', value: [[{ id: ids.V }]] });
    // The group up to U's value (V's statements never issued), then U alone and V alone.
    const sent = ctx.database.statements.slice();
    expect(sent.slice(0, 5)).toEqual([
      'BEGIN',
      LOCK,
      expect.stringContaining('update "users"'),
      expect.stringContaining('::jsonb'),
      'ROLLBACK',
    ]);
    expect(sent).toHaveLength(5 + 5 + 4);
    expect(sent.filter((text) => text === 'ROLLBACK')).toHaveLength(2);
    expect(sent.filter((text) => text === 'COMMIT')).toHaveLength(1);
    expect([await nameOf(ids.U), await nameOf(ids.V)]).toEqual(['U Member', 'Sent alone']);
    // The connection it was refused on was closed (pg had closed its prepared statement): a group still commits.
    const again = await Promise.all(
      [ids.U, ids.V].map((userId) => ctx.database.transactions.run(userId, [rename.with({ userId, name: 'Again' })])),
    );
    expect(again[1]![0][0]!.xid).toBe(again[0]![0][0]!.xid);
  });

  it('a connection lost under a group fails every member as unavailable and sends nothing again', async () => {
    // U's row is locked elsewhere (a group never waits for a user's lock, but it may for a row).
    await other.query('BEGIN');
    await other.query('SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [ids.U]);
    /** The backends `other` holds up. */
    const blocked = async () =>
      (await other.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))')).rows;
    try {
      ctx.database.statements.length = 0;
      const outcomes = Promise.allSettled(
        [ids.U, ids.V].map((userId) => ctx.database.transactions.run(userId, [rename.with({ userId, name: 'Lost' })])),
      );
      // The group waits for U's row (on a connection it may first have to open).
      await waitFor(async () => expect(await blocked()).toHaveLength(1));
      await other.query('SELECT pg_terminate_backend($1)', [(await blocked())[0]!.pid]);
      for (const outcome of await outcomes) {
        expect(outcome.status).toBe('rejected');
        expect(isDatabaseUnavailable((outcome as PromiseRejectedResult).reason)).toBe(true);
      }
      expect(ctx.database.statements).toHaveLength(6); // BEGIN, two locks and renames, COMMIT
    } finally {
      await other.query('ROLLBACK');
    }
    expect([await nameOf(ids.U), await nameOf(ids.V)]).toEqual(['U Member', 'V Member']);
    // The next group gets a new connection.
    expect(await ctx.database.transactions.run(ids.V, [rename.with({ userId: ids.V, name: 'Again' })])).toEqual([
      [{ id: ids.V, xid: expect.any(String), at: expect.any(Number) }],
    ]);
  });
});

describe('a request whose client goes away', () => {
  let port: number;
  beforeAll(async () => {
    await ctx.app.listen({ port: 0, host: '127.0.0.1' });
    port = (ctx.app.server.address() as net.AddressInfo).port;
  });

  /** A bulk update sent over a socket the test can close. */
  function bulkOverSocket(entries: object[]): net.Socket {
    const body = new URLSearchParams({ subscription_data: JSON.stringify(entries) }).toString();
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write(
        `POST ${PROPERTIES_URL} HTTP/1.1\r\nHost: chat.example.com\r\nAuthorization: ${auth('U')}\r\n` +
          `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      );
    });
    socket.on('error', () => undefined);
    return socket;
  }
  const pinToTop = (value: boolean) => ({ stream_id: ids.P, property: 'pin_to_top', value });
  const pinOfP = async () =>
    (
      await ctx.db
        .selectFrom('subscriptions')
        .select('pin_to_top')
        .where('user_id', '=', ids.U)
        .where('stream_id', '=', ids.P)
        .executeTakeFirstOrThrow()
    ).pin_to_top;

  it('a large write: the statement waiting for the user lock is cancelled and nothing is written', async () => {
    await other.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
    const socket = bulkOverSocket(Array.from({ length: 101 }, () => pinToTop(true)));
    await waitFor(async () => expect(await lockWaiters()).toBe(1));
    socket.destroy(); // the client hangs up while its write waits
    await waitFor(async () => expect(await lockWaiters()).toBe(0));
    await other.query('SELECT pg_advisory_unlock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await pinOfP()).toBe(false);
    expect(await ctx.db.selectFrom('subscription_audit_log').select('id').execute()).toEqual([]);
  });

  it("a small write waiting for its turn behind the same user's write is never sent", async () => {
    await other.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
    const first = bulkOverSocket([pinToTop(true)]);
    await waitFor(async () => expect(await lockWaiters()).toBe(1));
    const second = bulkOverSocket([pinToTop(false)]);
    await waitFor(() => expect(ctx.database.transactions.activeUsers).toBe(1));
    await new Promise((resolve) => setTimeout(resolve, 100)); // the second request waits its turn
    second.destroy();
    // The server has seen it go (the request's close listener runs on the same close).
    const connections = () => new Promise<number>((resolve) => ctx.app.server.getConnections((_, count) => resolve(count)));
    await waitFor(async () => expect(await connections()).toBe(1));
    await other.query('SELECT pg_advisory_unlock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
    await waitFor(async () => expect(await pinOfP()).toBe(true)); // the first one, sent, completes
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await pinOfP()).toBe(true); // the second one never ran
    const audit = await ctx.db.selectFrom('subscription_audit_log').select('new_value').where('acting_user_id', '=', ids.U).execute();
    expect(audit).toEqual([{ new_value: true }]);
    first.destroy();
  });
});
