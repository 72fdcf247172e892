import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { sql } from 'kysely';
import { inject } from 'vitest';
import { createDatabase, type Database, type DatabaseHandle, type DatabaseOptions } from '../../src/db/database.js';
import { USER_EVENT_LOCK_NAMESPACE } from '../../src/db/transactions.js';
import { eventually } from './wait.js';

export interface TestDatabase extends DatabaseHandle {
  url: string;
  /** Every statement run through `db`, in order (for round-trip counting). */
  statements: string[];
  drop(): Promise<void>;
}

async function adminQuery(text: string): Promise<void> {
  const client = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

/** A fresh, migrated database with no rows: a copy of the template made by the global setup. */
export function createTestDatabase(options: DatabaseOptions = {}): Promise<TestDatabase> {
  return copyOfTemplate(inject('templateDatabase'), options);
}

/** A fresh, migrated database holding the docs/api.md §5.0 fixture: a copy of the fixture template made by the global setup. */
export function createFixtureDatabase(options: DatabaseOptions = {}): Promise<TestDatabase> {
  return copyOfTemplate(inject('fixtureTemplateDatabase'), options);
}

/** One CREATE DATABASE … TEMPLATE (the templates have no open connection, which it requires). */
async function copyOfTemplate(template: string, options: DatabaseOptions): Promise<TestDatabase> {
  const name = `test_${randomBytes(6).toString('hex')}`;
  await adminQuery(`CREATE DATABASE ${name} TEMPLATE ${template}`);
  const url = new URL(inject('adminDatabaseUrl'));
  url.pathname = `/${name}`;
  const statements: string[] = [];
  const handle = createDatabase(url.toString(), { ...options, onQuery: (sql) => statements.push(sql) });
  return {
    ...handle,
    url: url.toString(),
    statements,
    drop: async () => {
      await handle.close();
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

/** Backends waiting for a user's lock (the advisory lock of src/db/transactions.ts) in `client`'s database. */
export async function userLockWaiters(client: pg.Client, userId: number): Promise<number> {
  // pg_locks shows every database's locks, and test files run side by side, each in its own database.
  const { rows } = await client.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2 " +
      'AND database = (SELECT oid FROM pg_database WHERE datname = current_database())',
    [USER_EVENT_LOCK_NAMESPACE, userId],
  );
  return rows[0]!.n;
}

/** Resolves once some session of this database is waiting for a row or transaction lock. */
export async function waitForLockWaiter(db: Database): Promise<void> {
  await eventually(async () => {
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
    `.execute(db);
    return rows[0]!.n > 0;
  });
}

/** The database's clock now, in milliseconds: what its now() of a later statement is at least. */
export async function databaseNow(db: Database): Promise<number> {
  return (await sql<{ at: Date }>`SELECT clock_timestamp() AS at`.execute(db)).rows[0]!.at.getTime();
}
