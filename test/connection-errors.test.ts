import { sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, inject, it, vi } from 'vitest';
import { ConfigError } from '../src/config.js';
import { ConnectionErrorReporter, namingDatabaseUrl } from '../src/db/connection-errors.js';
import { createDatabase } from '../src/db/database.js';
import { DatabaseUnavailable } from '../src/db/errors.js';
import { migrateToLatest } from '../src/db/migrator.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { waitFor } from './helpers/wait.js';

// src/server.ts creates the database before the app and its logger exist (the migrations run in
// between): a connection lost then must be reported on stderr, never throw out of the pool's event
// handler, which would end the process.

let database: TestDatabase | undefined;
afterEach(async () => {
  vi.restoreAllMocks();
  await database?.drop();
  database = undefined;
});

/** Ends the server side of the pool's (only, idle) connection, as a failover or an administrator would. */
async function loseIdlePoolConnection(handle: TestDatabase): Promise<void> {
  const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(handle.db);
  const other = new pg.Client({ connectionString: handle.url });
  await other.connect();
  try {
    await other.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
  } finally {
    await other.end();
  }
}

describe('errors of connections no statement waits on', () => {
  it('before the app exists go to stderr; once it does, to its logger', async () => {
    const stderr = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const reporter = new ConnectionErrorReporter();
    database = await createTestDatabase({ poolMax: 1, onConnectionError: reporter.report });

    await loseIdlePoolConnection(database);
    await waitFor(() => expect(stderr).toHaveBeenCalledWith('database connection failed: database connection lost'));

    const logger = { warn: vi.fn() };
    reporter.logTo(logger);
    const beforeLogger = stderr.mock.calls.length;
    await loseIdlePoolConnection(database);
    await waitFor(() => expect(logger.warn).toHaveBeenCalledWith({ err: expect.any(DatabaseUnavailable) }, 'database connection failed'));
    expect(stderr).toHaveBeenCalledTimes(beforeLogger);
    // The pool goes on with a new connection.
    expect((await sql<{ one: number }>`SELECT 1 AS one`.execute(database.db)).rows).toEqual([{ one: 1 }]);
  });
});

describe('a start that cannot reach DATABASE_URL', () => {
  /** The start-up line of migrating `url` (as src/server.ts does first), or the error as it came. */
  async function startFailure(url: string): Promise<unknown> {
    const handle = createDatabase(url, { poolMax: 1, connectTimeoutMs: 5000 });
    try {
      await migrateToLatest(handle.db);
      return 'migrated';
    } catch (error) {
      return namingDatabaseUrl(error, { databaseUrl: url, dbConnectTimeoutMs: 5000 });
    } finally {
      await handle.close();
    }
  }
  const server = () => new URL(inject('adminDatabaseUrl'));

  it("names it, its password hidden, and the server's reason: a wrong password, a missing database", async () => {
    const wrongPassword = server();
    wrongPassword.password = 'not-the-password';
    const failure = await startFailure(wrongPassword.toString());
    expect(failure).toBeInstanceOf(ConfigError);
    expect((failure as ConfigError).message).toBe(
      `DATABASE_URL (postgres://${wrongPassword.username}:***@${wrongPassword.host}${wrongPassword.pathname}): ` +
        `password authentication failed for user "${wrongPassword.username}"`,
    );

    const missing = server();
    missing.pathname = '/no_such_database';
    expect(((await startFailure(missing.toString())) as ConfigError).message).toMatch(
      /^DATABASE_URL \(postgres:\/\/[^:]+:\*\*\*@[^/]+\/no_such_database\): database "no_such_database" does not exist$/,
    );
  });

  it("and the network's: an unknown host", async () => {
    const failure = await startFailure('postgres://postgres:secret@no-such-host.invalid:5432/zulip');
    expect((failure as ConfigError).message).toBe('DATABASE_URL (postgres://postgres:***@no-such-host.invalid:5432/zulip): host not found');
  });

  it('passes any other error on as it is, and names nothing for the embedded database', async () => {
    const other = new Error('Migration 0001 failed: syntax error', { cause: new pg.DatabaseError('syntax error', 0, 'error') });
    expect(namingDatabaseUrl(other, { databaseUrl: 'postgres://x/y', dbConnectTimeoutMs: 1 })).toBe(other);
    const refused = new Error('Migration (unknown) failed', { cause: new DatabaseUnavailable('x', { cause: new Error('refused') }) });
    expect(namingDatabaseUrl(refused, { databaseUrl: undefined, dbConnectTimeoutMs: 1 })).toBe(refused);
  });
});
