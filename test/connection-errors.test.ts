import { sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ConnectionErrorReporter } from '../src/db/connection-errors.js';
import { DatabaseUnavailable } from '../src/db/errors.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';

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
    await vi.waitFor(() => expect(stderr).toHaveBeenCalledWith('database connection failed: database connection lost'));

    const logger = { warn: vi.fn() };
    reporter.logTo(logger);
    const beforeLogger = stderr.mock.calls.length;
    await loseIdlePoolConnection(database);
    await vi.waitFor(() =>
      expect(logger.warn).toHaveBeenCalledWith({ err: expect.any(DatabaseUnavailable) }, 'database connection failed'),
    );
    expect(stderr).toHaveBeenCalledTimes(beforeLogger);
    // The pool goes on with a new connection.
    expect((await sql<{ one: number }>`SELECT 1 AS one`.execute(database.db)).rows).toEqual([{ one: 1 }]);
  });
});
