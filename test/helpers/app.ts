import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { buildApp } from '../../src/app.js';
import { type Config, loadConfig } from '../../src/config.js';
import { type Database, databaseOptionsOf } from '../../src/db/database.js';
import { createFixtureDatabase, createTestDatabase, type TestDatabase } from './database.js';
import { checkDocumentedResponse } from './documented-responses.js';
import { auth, type FixtureUser } from './fixture.js';

export const FIXTURE_ENV = {
  EXTERNAL_HOST: 'chat.example.com',
  AVATAR_SALT: 'test-salt',
  RATE_LIMITING: 'false',
  // TEST_LOG_LEVEL=error (or lower) shows the test apps' logs, to see what is behind a 500.
  LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
};

export interface TestContext {
  app: FastifyInstance;
  db: Database;
  database: TestDatabase;
  config: Config;
  close(): Promise<void>;
}

export interface TestAppOptions {
  env?: Record<string, string>;
  /** Start from the docs/api.md §5.0 fixture (default true); false: a migrated database with no rows. */
  fixture?: boolean;
  /** Runs before app.ready(), e.g. to add a route for a test. */
  beforeReady?: (app: FastifyInstance) => void | Promise<void>;
}

/** The real app on a fresh copy of a template database (migrated, with the fixture unless told otherwise). */
export async function createTestContext(options: TestAppOptions = {}): Promise<TestContext> {
  // The database connections get the configuration's pool size and timeouts, as in production.
  const settings = loadConfig({ ...FIXTURE_ENV, ...options.env, DATABASE_URL: 'postgres://set-below' });
  const database = await (options.fixture === false ? createTestDatabase : createFixtureDatabase)(databaseOptionsOf(settings));
  const config: Config = { ...settings, databaseUrl: database.url };
  const app = await buildApp({ config, ...database }, process.env.TEST_LOG_LEVEL !== undefined);
  await options.beforeReady?.(app);
  await app.ready();
  return {
    app,
    db: database.db,
    database,
    config,
    close: async () => {
      await app.close();
      await database.drop();
    },
  };
}

/**
 * A context made before each test (`'each'`, the default) or once for the file or `describe` block
 * (`'all'`), and closed after it: the object returned stands for the current one, so a file
 * declares it once instead of a `let` and two hooks.
 */
export function useTestContext<C extends { close(): Promise<void> }>(create: () => Promise<C>, scope: 'each' | 'all' = 'each'): C {
  let current: C | undefined;
  const [before, after] = scope === 'each' ? [beforeEach, afterEach] : [beforeAll, afterAll];
  before(async () => {
    current = await create();
  });
  after(async () => {
    await current?.close();
    current = undefined;
  });
  return new Proxy({} as C, {
    get(_target, name) {
      if (!current) throw new Error('the test context is used outside a test (or its creation failed)');
      return current[name as keyof C];
    },
  });
}

/** A statement that writes rows (Kysely's and the repositories' raw SQL alike). */
const WRITING = /\b(insert\s+into|update\s+"?\w+"?\s+set|delete\s+from|truncate)\b/i;
/** The app's periodic sweep, whenever its timer fires: it deletes only what expired, never the fixture. */
const SWEEP = /^delete from "\w+" where "id" in \(select "id" from "\w+" where .*now\(\).* limit \$\d+/;

export type SharedTestContext<C extends TestContext = TestContext> = C & {
  /** This test writes: a context of its own (made as the shared one is) stands for it until the test ends. */
  ownDatabase(): Promise<void>;
};

/**
 * One context for the file or `describe` block (as `useTestContext(create, 'all')`), shared by
 * the tests that only read: after each, no statement may have written to it (a write would make
 * the others depend on the order they run in). A test that writes calls `ownDatabase()` first.
 */
export function useSharedTestContext<C extends TestContext = TestContext>(
  create: () => Promise<C> = () => createTestContext() as Promise<C>,
): SharedTestContext<C> {
  let shared: C | undefined;
  let own: C | undefined;
  // Seen as they are recorded: a test may empty `statements` to count its own.
  const writes: string[] = [];
  beforeAll(async () => {
    shared = await create();
    const { statements } = shared.database;
    statements.push = (...texts: string[]) => {
      writes.push(...texts.filter((text) => WRITING.test(text) && !SWEEP.test(text)));
      statements.splice(statements.length, 0, ...texts);
      return statements.length;
    };
  });
  afterAll(async () => {
    await shared?.close();
    shared = undefined;
  });
  beforeEach(() => {
    writes.length = 0;
  });
  afterEach(async () => {
    await own?.close();
    own = undefined;
    if (writes.length > 0) throw new Error(`a test sharing its context wrote (it needs ownDatabase()):\n${writes.join('\n')}`);
  });
  const ownDatabase = async () => {
    own = await create();
  };
  return new Proxy({} as SharedTestContext<C>, {
    get(_target, name) {
      if (name === 'ownDatabase') return ownDatabase;
      const current = own ?? shared;
      if (!current) throw new Error('the test context is used outside a test (or its creation failed)');
      return Reflect.get(current, name);
    },
  });
}

export interface ApiRequest {
  method?: InjectOptions['method'];
  url: string;
  /** Fixture user whose credentials are sent. */
  as?: FixtureUser;
  /** Sent urlencoded; values are sent as given. */
  form?: Record<string, string> | [string, string][];
  headers?: Record<string, string>;
  host?: string;
  payload?: InjectOptions['payload'];
}

/** The real request through app.inject; a 200 JSON body must match its route's documented response (documented-responses.ts). */
export async function api(app: FastifyInstance, request: ApiRequest): Promise<LightMyRequestResponse> {
  const headers: Record<string, string> = { host: request.host ?? 'chat.example.com', ...request.headers };
  if (request.as) headers.authorization = auth(request.as);
  let payload = request.payload;
  if (request.form) {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    payload = new URLSearchParams(request.form).toString();
  }
  const method = request.method ?? 'GET';
  const response = await app.inject({ method, url: request.url, headers, ...(payload !== undefined && { payload }) });
  checkDocumentedResponse(app, method, request.url, response);
  return response;
}

/** Multipart body with the given text fields (and optionally a file part). */
export function multipart(fields: Record<string, string>, file?: { name: string; filename: string; content: string }) {
  const boundary = 'testboundary7MA4YWxkTrZu0gW';
  let body = '';
  for (const [name, value] of Object.entries(fields)) {
    body += `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  }
  if (file) {
    body +=
      `--${boundary}\r\nContent-Disposition: form-data; name="${file.name}"; filename="${file.filename}"\r\n` +
      `Content-Type: application/octet-stream\r\n\r\n${file.content}\r\n`;
  }
  body += `--${boundary}--\r\n`;
  return { payload: body, headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } };
}
