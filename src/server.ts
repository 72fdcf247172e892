// Process entry: config → database → buildApp → listen → graceful close.
import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { embeddedDirectory } from './cli/connect.js';
import { createDemoOrganization, describeDemo } from './cli/demo.js';
import { ConfigError, loadConfig } from './config.js';
import { createDatabase } from './db/database.js';
import { type EmbeddedDatabase, recordRunningServer, startEmbeddedPostgres } from './db/embedded.js';
import { migrateToLatest } from './db/migrator.js';
import { Drain } from './http/drain.js';

/** How long closing may take (long polls answered, in-flight requests finished) before exit 1. */
const CLOSE_GRACE_MS = 10_000;

async function main(): Promise<void> {
  const config = loadConfig();
  let embedded: EmbeddedDatabase | undefined;
  let forgetServer: (() => Promise<void>) | undefined;
  if (!config.databaseUrl) {
    embedded = await startEmbeddedPostgres({ directory: embeddedDirectory(config), secretsDir: config.dataDir });
  }
  const url = config.databaseUrl ?? embedded!.url;
  const handle = createDatabase(url, {
    poolMax: config.dbPoolMax,
    readConnections: config.dbReadConnections,
    connectTimeoutMs: config.dbConnectTimeoutMs,
    onPoolError: (error) => app.log.warn({ err: error }, 'idle database connection failed'),
  });
  await migrateToLatest(handle.db);
  // The events listener opens its own LISTEN connection: it needs the URL, embedded or not.
  const drain = new Drain();
  const app = await buildApp({ config: { ...config, databaseUrl: url }, db: handle.db, drain }, true);

  if (embedded) {
    const demo = await createDemoOrganization(handle.db, config);
    if (demo) console.log(describeDemo(demo, config));
    forgetServer = await recordRunningServer(config.dataDir, embedded.url);
  }

  // SIGTERM is handled below (drain first); every other signal and fatal errors close at once.
  let closing = false;
  const shutdown = closeWithGrace({ delay: CLOSE_GRACE_MS, skip: ['SIGTERM'] }, async ({ signal, err }) => {
    closing = true;
    drain.finish();
    if (err) app.log.error({ err }, 'closing after an error');
    else if (signal) app.log.info({ signal }, 'shutting down');
    await app.close();
    await handle.close();
    await forgetServer?.();
    await embedded?.stop();
  });
  drainOnSigterm(app, drain, config.shutdownDrainSeconds, {
    closing: () => closing,
    close: shutdown.close,
  });

  await app.listen({ port: config.port, host: config.host });
}

/**
 * SIGTERM (container runtimes, orchestrators) drains before closing: /ready answers 503 for
 * `seconds` while everything else is served, so that the load balancer's health checks take this
 * instance out before it stops accepting. The close that follows has its own CLOSE_GRACE_MS, so
 * the process exits at most drain + close time after the signal. A second SIGTERM during the
 * drain ends it early; during the close it exits 1, as close-with-grace does for other signals.
 * SIGINT (Ctrl-C in a terminal) closes at once, also during the drain.
 */
function drainOnSigterm(app: FastifyInstance, drain: Drain, seconds: number, shutdown: { closing(): boolean; close(): void }): void {
  process.on('SIGTERM', () => {
    if (shutdown.closing()) {
      app.log.error({ signal: 'SIGTERM' }, 'second signal while closing, exiting');
      process.exit(1);
    }
    if (drain.draining) {
      app.log.info({ signal: 'SIGTERM' }, 'second signal, ending the drain');
      drain.finish();
      return;
    }
    app.log.info({ signal: 'SIGTERM', drainSeconds: seconds }, 'draining');
    void drain.start(seconds).then(() => {
      if (shutdown.closing()) return;
      app.log.info({ signal: 'SIGTERM' }, 'shutting down');
      shutdown.close();
    });
  });
}

main().catch((error: unknown) => {
  console.error(error instanceof ConfigError ? error.message : `failed to start: ${(error as Error).stack ?? String(error)}`);
  process.exit(1);
});
