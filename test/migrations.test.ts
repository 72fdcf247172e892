import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDatabase, type DatabaseHandle } from '../src/db/database.js';
import { migrateToLatest } from '../src/db/migrator.js';

// Migrating a truly empty database (not the template copy the other tests use).
const name = `migrate_${randomBytes(4).toString('hex')}`;
let handle: DatabaseHandle;

async function admin(text: string) {
  const client = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await client.connect();
  await client.query(text);
  await client.end();
}

beforeAll(async () => {
  await admin(`CREATE DATABASE ${name}`);
  const url = new URL(inject('adminDatabaseUrl'));
  url.pathname = `/${name}`;
  handle = createDatabase(url.toString());
});
afterAll(async () => {
  await handle.close();
  await admin(`DROP DATABASE ${name} WITH (FORCE)`);
});

describe('migrations', () => {
  it('apply to an empty database in name order, once, also when several run at once', async () => {
    const runs = await Promise.all([migrateToLatest(handle.db), migrateToLatest(handle.db), migrateToLatest(handle.db)]);
    const applied = runs.flatMap((run) => (run.results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName));
    expect(applied).toEqual(['0001_initial', ...applied.slice(1)]);
    expect(new Set(applied).size).toBe(applied.length);
    const { rows } = await handle.pool.query<{ table_name: string }>(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_name NOT LIKE 'kysely%' ORDER BY 1",
    );
    expect(rows.map((row) => row.table_name)).toEqual(
      expect.arrayContaining([
        'custom_profile_field_values',
        'custom_profile_fields',
        'event_queues',
        'events',
        'navigation_views',
        'realms',
        'streams',
        'subscription_audit_log',
        'subscriptions',
        'users',
      ]),
    );
    const again = await migrateToLatest(handle.db);
    expect(again.results).toEqual([]);
  });

  it('gives every tenant table a realm_id', async () => {
    const { rows } = await handle.pool.query<{ table_name: string }>(
      `SELECT t.table_name FROM information_schema.tables t
       WHERE t.table_schema = 'public' AND t.table_name NOT LIKE 'kysely%' AND t.table_name <> 'realms'
         AND NOT EXISTS (SELECT 1 FROM information_schema.columns c
                         WHERE c.table_name = t.table_name AND c.column_name = 'realm_id')`,
    );
    expect(rows).toEqual([]);
  });
});
