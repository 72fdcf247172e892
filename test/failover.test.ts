import pg from 'pg';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommitOutcomeUnknown, DatabaseUnavailable, isDatabaseUnavailable } from '../src/db/errors.js';
import { toApiError } from '../src/http/errors.js';
import { createTestContext, type TestContext } from './helpers/app.js';
import { ids } from './helpers/fixture.js';
import { testStatement } from './helpers/statements.js';

// What a PostgreSQL failover does to the write path (`npm run test:failover` does it for real):
// a demoted primary answers writes with 25006 until its connections are closed, and a primary that
// goes away during a commit leaves its outcome unknown.

let ctx: TestContext;
let admin: pg.Client;
beforeAll(async () => {
  ctx = await createTestContext();
  admin = new pg.Client({ connectionString: ctx.database.url });
  await admin.connect();
});
afterAll(async () => {
  await admin.end();
  await ctx.close();
});

const renameU = testStatement<{ userId: number; name: string }, { id: number }>(['userId', 'name'], (db, args) =>
  db.updateTable('users').set({ full_name: args.name }).where('id', '=', args.userId).returning('id'),
);
const nameOfU = async () =>
  (await ctx.db.selectFrom('users').select('full_name').where('id', '=', ids.U).executeTakeFirstOrThrow()).full_name;
/** A small or large write (BEGIN … COMMIT in one burst), or an interactive one (BEGIN … COMMIT, awaiting each statement, on a pooled connection). */
const rename = (name: string, size: 'small' | 'large' | 'interactive') =>
  size === 'interactive'
    ? ctx.database.transactions.runInteractive(ids.U, (tx) => renameU(tx, { userId: ids.U, name }))
    : ctx.database.transactions.run(ids.U, [renameU.with({ userId: ids.U, name })], undefined, size).then(([rows]) => rows);

/** The app's backends: every session of this database but the admin's. */
const terminateAppSessions = () =>
  admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');

describe('a server that turned read-only (a demoted primary)', () => {
  it('fails the write as unavailable (503), closes the connection and writes on a new one: no retry for ever on a standby', async () => {
    const database = (await admin.query<{ name: string }>('SELECT current_database() AS name')).rows[0]!.name;
    for (const size of ['small', 'large', 'interactive'] as const) {
      // Every new session is read-only from now, as on a standby; the open ones are dropped.
      await admin.query(`ALTER DATABASE "${database}" SET default_transaction_read_only = on`);
      await terminateAppSessions();
      let refused: unknown;
      try {
        for (let attempt = 0; attempt < 3 && !refused; attempt++) {
          // The first attempts may meet a terminated connection (a 503 too) before a read-only one.
          refused = await rename('Read-only', size).then(
            () => undefined,
            (error: unknown) => ((error as { code?: string }).code === '25006' ? error : undefined),
          );
        }
      } finally {
        await admin.query(`ALTER DATABASE "${database}" RESET default_transaction_read_only`);
      }
      expect(refused).toMatchObject({ code: '25006' });
      expect(isDatabaseUnavailable(refused)).toBe(true);
      expect(refused).not.toBeInstanceOf(CommitOutcomeUnknown);
      expect(toApiError(refused as Error, 5)?.statusCode).toBe(503);
      // The read-only session was closed: the next write gets a new, writable one (the new primary).
      expect(await rename('Written', size)).toEqual([{ id: ids.U }]);
      expect(await nameOfU()).toBe('Written');
      await renameU(ctx.database.shortStatements, { userId: ids.U, name: 'U Member' });
    }
  });

  it('through the pool too: the connection that answered 25006 is not handed out again', async () => {
    const database = (await admin.query<{ name: string }>('SELECT current_database() AS name')).rows[0]!.name;
    await admin.query(`ALTER DATABASE "${database}" SET default_transaction_read_only = on`);
    await terminateAppSessions();
    const update = () => ctx.db.updateTable('users').set({ full_name: 'Pool' }).where('id', '=', ids.U).execute();
    let refused: unknown;
    try {
      for (let attempt = 0; attempt < 3 && !refused; attempt++) {
        refused = await update().then(
          () => undefined,
          (error: unknown) => ((error as { code?: string }).code === '25006' ? error : undefined),
        );
      }
    } finally {
      await admin.query(`ALTER DATABASE "${database}" RESET default_transaction_read_only`);
    }
    expect(refused).toMatchObject({ code: '25006' });
    expect(isDatabaseUnavailable(refused)).toBe(true);
    // Kept in the pool, the read-only session would be the next one handed out (pg-pool reuses the
    // last released) and refuse again.
    expect(await update()).toBeDefined();
    expect(await nameOfU()).toBe('Pool');
    await renameU(ctx.database.shortStatements, { userId: ids.U, name: 'U Member' });
  });
});

describe('a connection lost during the commit', () => {
  it('fails the write as "outcome unknown" (504, never replayed by the balancer), on every kind of connection', async () => {
    // A deferred trigger runs at the commit, after every statement completed: it ends its own
    // session there, as a primary going away during the commit would.
    await sql`CREATE FUNCTION test_end_session_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.full_name = 'End at commit' THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
        RETURN NULL;
      END $$`.execute(ctx.db);
    await sql`CREATE CONSTRAINT TRIGGER test_end_session_at_commit AFTER UPDATE ON users DEFERRABLE INITIALLY DEFERRED
      FOR EACH ROW EXECUTE FUNCTION test_end_session_at_commit()`.execute(ctx.db);
    try {
      for (const size of ['small', 'large', 'interactive'] as const) {
        const failure = await rename('End at commit', size).then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(failure).toBeInstanceOf(CommitOutcomeUnknown);
        expect(isDatabaseUnavailable(failure)).toBe(true);
        const answer = toApiError(failure as Error, 5);
        expect(answer?.statusCode).toBe(504);
        expect(answer?.toBody()).toEqual({
          result: 'error',
          msg: 'The database did not confirm the request: it may or may not have been applied',
          code: 'SERVER_NOT_READY',
        });
        // (Here the trigger ran before the commit record: nothing was kept. After a real failover it may have been.)
        expect(await nameOfU()).toBe('U Member');
        expect(await rename('Next', size)).toEqual([{ id: ids.U }]);
        await renameU(ctx.database.shortStatements, { userId: ids.U, name: 'U Member' });
      }
    } finally {
      await sql`DROP TRIGGER test_end_session_at_commit ON users`.execute(ctx.db);
      await sql`DROP FUNCTION test_end_session_at_commit()`.execute(ctx.db);
    }
  });

  it('a session ended while a statement ran rolled the transaction back: a plain 503', async () => {
    const slow = testStatement<{ seconds: number }, { slept: unknown }>(['seconds'], (db, args) =>
      db.selectNoFrom(sql<unknown>`pg_sleep(${args.seconds}::float8)`.as('slept')),
    );
    for (const size of ['small', 'large'] as const) {
      const outcome = ctx.database.transactions
        .run(ids.U, [renameU.with({ userId: ids.U, name: 'Never' }), slow.with({ seconds: 30 })], undefined, size)
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      let sleeper: number | undefined;
      for (let wait = 0; wait < 100 && sleeper === undefined; wait++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        sleeper = (
          await admin.query<{ pid: number }>(
            "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
          )
        ).rows[0]?.pid;
      }
      await admin.query('SELECT pg_terminate_backend($1)', [sleeper]);
      const failure = await outcome;
      expect(failure).toBeInstanceOf(Error);
      expect(isDatabaseUnavailable(failure)).toBe(true);
      expect(failure).not.toBeInstanceOf(CommitOutcomeUnknown);
      expect(toApiError(failure as Error, 5)?.statusCode).toBe(503);
      expect(await nameOfU()).toBe('U Member');
    }
    expect(new DatabaseUnavailable('x')).not.toBeInstanceOf(CommitOutcomeUnknown);
  });
});
