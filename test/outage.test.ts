import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { createDatabase, type DatabaseHandle } from '../src/db/database.js';
import { type EmbeddedDatabase, startEmbeddedPostgres } from '../src/db/embedded.js';
import { migrateToLatest } from '../src/db/migrator.js';
import { api, FIXTURE_ENV } from './helpers/app.js';
import { UNAVAILABLE } from './helpers/envelope.js';
import { seedFixture } from './helpers/fixture.js';
import { within } from './helpers/wait.js';

// Case 18 on a PostgreSQL of its own, really stopped and started again under a running app.
let work: string;
let postgres: EmbeddedDatabase;
let port: number;
let handle: DatabaseHandle;
let app: FastifyInstance;
// Far longer than a refused connection takes on any machine: a 503 within half of it came without
// waiting for a connection attempt to time out.
const CONNECT_TIMEOUT_MS = 60_000;

const start = (fixedPort?: number) =>
  startEmbeddedPostgres({ directory: join(work, 'pg'), secretsDir: work, database: 'outage', ...(fixedPort && { port: fixedPort }) });

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'outage-'));
  postgres = await start();
  port = Number(new URL(postgres.url).port);
  handle = createDatabase(postgres.url, { connectTimeoutMs: CONNECT_TIMEOUT_MS, onConnectionError: () => undefined });
  await migrateToLatest(handle.db);
  await seedFixture(handle.db);
  app = await buildApp({ config: loadConfig({ ...FIXTURE_ENV, DATABASE_URL: postgres.url, METRICS_PORT: '0' }), ...handle });
  await app.ready();
});

afterAll(async () => {
  await app?.close();
  await handle?.close();
  await postgres?.stop();
  rmSync(work, { recursive: true, force: true });
});

describe('database outage (case 18)', () => {
  it('answers 503 with Retry-After while PostgreSQL is down, and recovers without a restart', async () => {
    expect((await api(app, { url: '/api/v1/users/14', as: 'U' })).statusCode).toBe(200);

    await postgres.stop();
    for (const request of [{ url: '/api/v1/users/14', as: 'U' as const }, { url: '/api/v1/server_settings' }]) {
      const res = await within(api(app, request), CONNECT_TIMEOUT_MS / 2);
      if (res === 'timed out') throw new Error(`${request.url}: no answer within half the connect timeout`);
      expect(res.statusCode, request.url).toBe(503);
      expect(res.body).toBe(UNAVAILABLE);
      expect(res.headers['retry-after']).toBe('5');
    }
    // What the "database unavailable" alert watches (deploy/alerts.yml).
    expect(await app.metrics!.registry.metrics()).toMatch(/^zulip_db_unavailable_total 2$/m);
    const ready = await api(app, { url: '/ready' });
    expect(ready.statusCode).toBe(503);
    expect(ready.body).toBe(UNAVAILABLE);
    expect((await api(app, { url: '/api/v1/nope' })).statusCode).toBe(404);
    expect((await api(app, { url: '/health' })).statusCode).toBe(200);

    postgres = await start(port);
    const back = await api(app, { url: '/api/v1/users/14', as: 'U' });
    expect(back.statusCode).toBe(200);
    expect(back.json().user.user_id).toBe(14);
    expect((await api(app, { url: '/ready' })).statusCode).toBe(200);
  });
});
