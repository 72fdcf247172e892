// Process entry: config → database → buildApp → listen → graceful close.
import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { buildApp } from './app.js';
import { embeddedDirectory } from './cli/connect.js';
import { createDemoOrganization, describeDemo } from './cli/demo.js';
import { ConfigError, loadConfig } from './config.js';
import { createDatabase, databaseOptionsOf } from './db/database.js';
import { type EmbeddedDatabase, recordRunningServer, startEmbeddedPostgres } from './db/embedded.js';
import { migrateToLatest } from './db/migrator.js';

const LOG_FLUSH_INTERVAL_MS = 1000;

async function main(): Promise<void> {
  const config = loadConfig();
  let embedded: EmbeddedDatabase | undefined;
  let forgetServer: (() => Promise<void>) | undefined;
  if (!config.databaseUrl) {
    embedded = await startEmbeddedPostgres({ directory: embeddedDirectory(config), secretsDir: config.dataDir });
  }
  const url = config.databaseUrl ?? embedded!.url;
  // Connections can fail before the app (and its logger) exists, during the migrations.
  let app: FastifyInstance | undefined;
  const handle = createDatabase(url, {
    ...databaseOptionsOf(config),
    onConnectionError: (error) => reportConnectionError(app, error),
  });
  // Migrations run on a connection of their own, without the statement timeout: a long migration,
  // or waiting for another replica's, must not fail the start.
  const migration = createDatabase(url, { poolMax: 1, connectTimeoutMs: config.dbConnectTimeoutMs });
  try {
    await migrateToLatest(migration.db);
  } finally {
    await migration.close();
  }
  // Log lines are buffered and written 4 KiB at a time (at most a second late, and flushed when
  // the process exits): one write system call per request line cost as much as a tenth of a
  // request's CPU on the hot paths.
  const logs = pino.destination({ dest: 1, sync: false, minLength: 4096 });
  setInterval(() => logs.flush(), LOG_FLUSH_INTERVAL_MS).unref();
  // The events listener opens its own LISTEN connection: it needs the URL, embedded or not.
  app = await buildApp({ config: { ...config, databaseUrl: url }, ...handle }, { stream: logs });

  if (embedded) {
    const demo = await createDemoOrganization(handle.db, config);
    if (demo) console.log(describeDemo(demo, config));
    forgetServer = await recordRunningServer(config.dataDir, embedded.url);
  }

  const started = app;
  closeWithGrace({ delay: 10_000 }, async ({ signal, err }) => {
    if (err) started.log.error({ err }, 'closing after an error');
    else started.log.info({ signal }, 'shutting down');
    logs.flush();
    await started.close();
    logs.flushSync();
    await handle.close();
    await forgetServer?.();
    await embedded?.stop();
  });

  await started.listen({ port: config.port, host: config.host });
  logs.flush(); // "Server listening at …" now, not with the next 4 KiB
}

/** A connection no statement was waiting on failed: worth a warning, never a crash. */
function reportConnectionError(app: FastifyInstance | undefined, error: Error): void {
  if (app) app.log.warn({ err: error }, 'database connection failed');
  else console.warn(`database connection failed: ${error.message}`);
}

main().catch((error: unknown) => {
  console.error(error instanceof ConfigError ? error.message : `failed to start: ${(error as Error).stack ?? String(error)}`);
  process.exit(1);
});
