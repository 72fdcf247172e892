import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { createDatabase } from '../src/db/database.js';
import { migrateToLatest } from '../src/db/migrator.js';
import { startScratchPostgres } from '../scripts/lib/scratch-database.js';
import { seedFixture } from './helpers/fixture.js';

/** Migrated, no rows. */
export const TEMPLATE_DATABASE = 'zulip_test_template';
/** Migrated, with the docs/api.md §5.0 fixture. */
export const FIXTURE_TEMPLATE_DATABASE = 'zulip_test_fixture_template';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Connection URL of a maintenance database on the test server (for CREATE DATABASE). */
    adminDatabaseUrl: string;
    templateDatabase: string;
    fixtureTemplateDatabase: string;
  }
}

interface TestServer {
  url: string;
  stop(): Promise<void>;
}

/** A container when an engine answers; testcontainers is only loaded when it may be used. */
async function startContainer(): Promise<TestServer | undefined> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await Promise.race([
      getContainerRuntimeClient(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('no container engine')), 5000)),
    ]);
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:17-alpine').start();
    return { url: container.getConnectionUri(), stop: async () => void (await container.stop()) };
  } catch {
    return undefined;
  }
}

async function startEmbedded(): Promise<TestServer> {
  const scratch = await startScratchPostgres({ prefix: 'zulip-test-pg-', database: 'postgres' });
  return { url: scratch.postgres().url, stop: () => scratch.stop() };
}

function databaseUrl(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server: TestServer = process.env.TEST_DATABASE_URL
    ? { url: process.env.TEST_DATABASE_URL, stop: async () => undefined }
    : ((await startContainer()) ?? (await startEmbedded()));

  // Each test database is one CREATE DATABASE … TEMPLATE of these two, so nothing stays connected to them.
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  if (!process.env.TEST_DATABASE_URL) {
    // A server of the run alone, gone at its end: no commit or copied database waits for the disk.
    await admin.query('ALTER SYSTEM SET fsync = off');
    await admin.query('ALTER SYSTEM SET full_page_writes = off');
    await admin.query('SELECT pg_reload_conf()');
  }
  for (const name of [TEMPLATE_DATABASE, FIXTURE_TEMPLATE_DATABASE]) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${TEMPLATE_DATABASE}`);
  const template = createDatabase(databaseUrl(server.url, TEMPLATE_DATABASE));
  await migrateToLatest(template.db);
  await template.close();
  await admin.query(`CREATE DATABASE ${FIXTURE_TEMPLATE_DATABASE} TEMPLATE ${TEMPLATE_DATABASE}`);
  const fixture = createDatabase(databaseUrl(server.url, FIXTURE_TEMPLATE_DATABASE));
  await seedFixture(fixture.db);
  await fixture.close();
  await admin.end();

  project.provide('adminDatabaseUrl', server.url);
  project.provide('templateDatabase', TEMPLATE_DATABASE);
  project.provide('fixtureTemplateDatabase', FIXTURE_TEMPLATE_DATABASE);
  return () => server.stop();
}
