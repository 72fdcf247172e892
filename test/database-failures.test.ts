import { sql } from 'kysely';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createDatabase } from '../src/db/database.js';
import { DatabaseUnavailable, isDatabaseUnavailable } from '../src/db/errors.js';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { UNAVAILABLE } from './helpers/envelope.js';
import { eventually } from './helpers/wait.js';

// Connections that fail under the app: each costs the statements that used it a 503, never the
// process (docs/api.md §1.9). The full chaos run is `SOAK_CHAOS=1 npm run soak` (scripts/soak/).

const ctx = useTestContext(createTestContext, 'all');

/** Another session holding `lock` until released. */
async function holding(url: string, lock: string): Promise<{ release(): Promise<void> }> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined); // the database is dropped at the end of the test
  await client.connect();
  await client.query('BEGIN');
  await client.query(lock);
  return {
    release: async () => {
      await client.query('ROLLBACK');
      await client.end();
    },
  };
}

describe('a pooled connection lent out with no statement in flight', () => {
  it('losing its server is reported, fails the next statement as unavailable, and the pool goes on', async () => {
    const reported: Error[] = [];
    const handle = createDatabase(ctx.database.url, { poolMax: 1, onConnectionError: (error) => reported.push(error) });
    try {
      const outcome = handle.db.transaction().execute(async (trx) => {
        const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(trx);
        const pid = rows[0]!.pid;
        await sql`SELECT pg_terminate_backend(${pid})`.execute(ctx.db);
        // The connection is lent out and idle when its server goes: pg-pool listens for errors
        // only on idle connections, so without our listener its error would kill the process.
        await eventually(async () => (await sql`SELECT 1 FROM pg_stat_activity WHERE pid = ${pid}`.execute(ctx.db)).rows.length === 0);
        await sql`SELECT 1`.execute(trx);
      });
      const failure = await outcome.catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(DatabaseUnavailable);
      expect(isDatabaseUnavailable(failure)).toBe(true);
      expect(reported[0]).toBeInstanceOf(DatabaseUnavailable);
      // The broken connection left the pool (its only slot): the next statement gets a new one.
      expect((await sql<{ one: number }>`SELECT 1 AS one`.execute(handle.db)).rows).toEqual([{ one: 1 }]);
    } finally {
      await handle.close();
    }
  });

  it("a statement the session has not prepared (26000: pg's record of a pipelined connection out of step) is unavailable: a 503, not a 500", async () => {
    const failure = await sql`EXECUTE never_prepared`.execute(ctx.db).catch((error: unknown) => error);
    expect((failure as { code?: string }).code).toBe('26000');
    expect(isDatabaseUnavailable(failure)).toBe(true);
  });

  it('a server that refuses connections fails statements as unavailable', async () => {
    const handle = createDatabase('postgres://nobody@127.0.0.1:1/none', { connectTimeoutMs: 500 });
    try {
      const failure = await sql`SELECT 1`.execute(handle.db).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(DatabaseUnavailable);
    } finally {
      await handle.close();
    }
  });
});

describe('statement timeouts (DB_STATEMENT_TIMEOUT_MS, DB_READ_STATEMENT_TIMEOUT_MS)', () => {
  it('default to 5 s on the pool and 1 s on the short-statement connections', () => {
    expect(ctx.config.dbStatementTimeoutMs).toBe(5000);
    expect(ctx.config.dbReadStatementTimeoutMs).toBe(1000);
  });

  it('a statement through the pool cut off by its timeout is a 503, and the pool connection serves again', async () => {
    const handle = createDatabase(ctx.database.url, { poolMax: 1, statementTimeoutMs: 300 });
    try {
      const timedOut = await sql`SELECT pg_sleep(3)`.execute(handle.db).catch((error: unknown) => error);
      expect(timedOut).toMatchObject({ code: '57014' }); // query_canceled
      expect(isDatabaseUnavailable(timedOut)).toBe(true);
      expect((await sql<{ one: number }>`SELECT 1 AS one`.execute(handle.db)).rows).toEqual([{ one: 1 }]);
    } finally {
      await handle.close();
    }
  });

  it('through the app: a request whose statement waits past the timeout answers 503; others are served', async () => {
    const timed = await createTestContext({ env: { DB_STATEMENT_TIMEOUT_MS: '300', DB_READ_STATEMENT_TIMEOUT_MS: '300' } });
    try {
      // The app's connections carry the configured timeouts: the locks below are held until
      // released, so only a timeout answers the blocked requests, and only these ones in 300 ms.
      const configured = [{ statement_timeout: '300ms' }];
      expect((await sql`SHOW statement_timeout`.execute(timed.db)).rows).toEqual(configured);
      expect(await timed.database.shortStatements.run({ text: 'SHOW statement_timeout' }, [])).toEqual(configured);
      // Profile values are read through the pool; the authentication statement through the reads.
      const profiles = await holding(timed.database.url, 'LOCK TABLE custom_profile_field_values IN ACCESS EXCLUSIVE MODE');
      const blocked = await api(timed.app, { url: '/api/v1/users?include_custom_profile_fields=true', as: 'U' });
      expect(blocked.statusCode).toBe(503);
      expect(blocked.body).toBe(UNAVAILABLE);
      expect(blocked.headers['retry-after']).toBe('5');
      expect((await api(timed.app, { url: '/api/v1/users', as: 'U' })).statusCode).toBe(200);
      await profiles.release();

      const users = await holding(timed.database.url, 'LOCK TABLE users IN ACCESS EXCLUSIVE MODE');
      const unauthenticated = await api(timed.app, { url: '/api/v1/users/14', as: 'U' });
      expect(unauthenticated.statusCode).toBe(503); // never a 401 while the database cannot answer
      expect(unauthenticated.body).toBe(UNAVAILABLE);
      await users.release();
      expect((await api(timed.app, { url: '/api/v1/users/14', as: 'U' })).statusCode).toBe(200);
    } finally {
      await timed.close();
    }
  });
});
