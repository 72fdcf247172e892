import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { createDatabase, type DatabaseHandle, type DatabaseOptions } from '../../src/db/database.js';

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

/** A fresh, migrated database copied from the template made by the global setup. */
export async function createTestDatabase(options: DatabaseOptions = {}): Promise<TestDatabase> {
  const name = `test_${randomBytes(6).toString('hex')}`;
  await adminQuery(`CREATE DATABASE ${name} TEMPLATE ${inject('templateDatabase')}`);
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
