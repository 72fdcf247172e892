// Process entry: config → database → buildApp → listen → graceful close.
import type { Server } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import closeWithGrace from 'close-with-grace';
import pino from 'pino';
import { buildApp } from './app.js';
import { embeddedDirectory } from './cli/connect.js';
import { createDemoOrganization, demoReminder, describeDemo } from './cli/demo.js';
import { ConfigError, loadConfig } from './config.js';
import { ConnectionErrorReporter, namingDatabaseUrl } from './db/connection-errors.js';
import { createDatabase, databaseOptionsOf } from './db/database.js';
import { type EmbeddedDatabase, recordRunningServer, startEmbeddedPostgres } from './db/embedded.js';
import { migrateToLatest } from './db/migrator.js';
import { Drain } from './http/drain.js';
import { startMetricsListener } from './metrics/listener.js';

/** How long closing may take (long polls answered, in-flight requests finished) before exit 1. */
const CLOSE_GRACE_MS = 10_000;

const LOG_FLUSH_INTERVAL_MS = 1000;

async function main(): Promise<void> {
  const config = loadConfig();
  // Read by V8 at every full collection, so it applies from the next one on.
  if (config.heapGrowingPercent > 0) setFlagsFromString(`--heap-growing-percent=${config.heapGrowingPercent}`);
  let embedded: EmbeddedDatabase | undefined;
  let forgetServer: (() => Promise<void>) | undefined;
  if (!config.databaseUrl) {
    embedded = await startEmbeddedPostgres({ directory: embeddedDirectory(config), secretsDir: config.dataDir });
    const started = embedded;
    undoOnFailedStart.push(() => started.stop());
  }
  const url = config.databaseUrl ?? embedded!.url;
  // Connections can fail before the app (and its logger) exists, during the migrations.
  const connectionErrors = new ConnectionErrorReporter();
  const handle = createDatabase(url, { ...databaseOptionsOf(config), onConnectionError: connectionErrors.report });
  undoOnFailedStart.push(() => handle.close());
  // Migrations run on a connection of their own, without the statement timeout: a long migration,
  // or waiting for another replica's, must not fail the start.
  const migration = createDatabase(url, { poolMax: 1, connectTimeoutMs: config.dbConnectTimeoutMs });
  try {
    await migrateToLatest(migration.db);
  } catch (error) {
    throw namingDatabaseUrl(error, config);
  } finally {
    await migration.close();
  }
  // Log lines are buffered and written 4 KiB at a time (at most a second late, and flushed when
  // the process exits): one write system call per request line cost as much as a tenth of a
  // request's CPU on the hot paths.
  const logs = pino.destination({ dest: 1, sync: false, minLength: 4096 });
  setInterval(() => logs.flush(), LOG_FLUSH_INTERVAL_MS).unref();
  // Every way out (a second SIGTERM, close-with-grace's deadline) writes what is still buffered;
  // a log reader that went away must not turn the exit into a failure.
  const flushLogs = () => {
    try {
      logs.flushSync();
    } catch {
      // Nothing left to write the lines to.
    }
  };
  process.on('exit', flushLogs);
  // The events listener opens its own LISTEN connection: it needs the URL, embedded or not.
  const drain = new Drain();
  const app = await buildApp({ config: { ...config, databaseUrl: url }, ...handle, drain }, { stream: logs });
  connectionErrors.logTo(app.log);
  undoOnFailedStart.push(() => app.close());

  if (embedded) {
    const demo = await createDemoOrganization(handle, config);
    const text = demo ? describeDemo(demo, config) : await demoReminder(handle.db, config);
    if (text) console.log(text);
    forgetServer = await recordRunningServer(config.dataDir, embedded.url);
  }

  // SIGTERM is handled below (drain first); every other signal and fatal errors close at once.
  let closing = false;
  let metricsServer: Server | undefined;
  const shutdown = closeWithGrace({ delay: CLOSE_GRACE_MS, skip: ['SIGTERM'] }, async ({ signal, err }) => {
    closing = true;
    drain.finish();
    if (err) app.log.error({ err }, 'closing after an error');
    else if (signal) app.log.info({ signal }, 'shutting down');
    logs.flush();
    // Scraped until the API closes: the last scrape sees the drain.
    await app.close();
    metricsServer?.closeAllConnections();
    metricsServer?.close();
    flushLogs();
    await handle.close();
    await forgetServer?.();
    await embedded?.stop();
  });
  drainOnSigterm(app.log, drain, config.shutdownDrainSeconds, {
    closing: () => closing,
    close: shutdown.close,
  });

  await app.listen({ port: config.port, host: config.host }).catch((error: unknown) => {
    throw namingListenSettings(error, `PORT (${config.port}) on HOST (${config.host})`);
  });
  // Its own port, never the API's: the load balancer forwards only the API port.
  if (app.metrics && config.metricsPort !== undefined) {
    const listening = await startMetricsListener(app.metrics.registry, config.metricsHost, config.metricsPort).catch((error: unknown) => {
      throw namingListenSettings(error, `METRICS_PORT (${config.metricsPort}) on METRICS_HOST (${config.metricsHost})`);
    });
    undoOnFailedStart.push(async () => listening.server.close());
    metricsServer = listening.server;
    app.log.info({ host: config.metricsHost, port: listening.port }, 'metrics listening');
  }
  logs.flush(); // "Server listening at …" now, not with the next 4 KiB
  // Started: closing is close-with-grace's from now on.
  undoOnFailedStart.length = 0;
}

/**
 * What a start that fails part way has to stop, in reverse order: above all the embedded
 * PostgreSQL, which runs detached and would outlive the process.
 */
const undoOnFailedStart: (() => Promise<unknown>)[] = [];

/** Why a port cannot be listened on, in words. */
const LISTEN_REASONS: Record<string, string> = {
  EADDRINUSE: 'address already in use',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'address not available on this machine',
  ENOTFOUND: 'host not found',
};

/** A failure to listen as the start-up line naming the settings and the cause; any other error as it is. */
function namingListenSettings(error: unknown, settings: string): unknown {
  const reason = LISTEN_REASONS[(error as { code?: string }).code ?? ''];
  return reason === undefined ? error : new ConfigError(`${settings}: ${reason}`);
}

/**
 * SIGTERM (container runtimes, orchestrators) drains before closing: /ready answers 503 for
 * `seconds` while everything else is served, so that the load balancer's health checks take this
 * instance out before it stops accepting. The close that follows has its own CLOSE_GRACE_MS, so
 * the process exits at most drain + close time after the signal. A second SIGTERM during the
 * drain ends it early; during the close it exits 1, as close-with-grace does for other signals.
 * SIGINT (Ctrl-C in a terminal) closes at once, also during the drain.
 */
function drainOnSigterm(
  log: Pick<pino.BaseLogger, 'info' | 'error'>,
  drain: Drain,
  seconds: number,
  shutdown: { closing(): boolean; close(): void },
): void {
  process.on('SIGTERM', () => {
    if (shutdown.closing()) {
      log.error({ signal: 'SIGTERM' }, 'second signal while closing, exiting');
      process.exit(1);
    }
    if (drain.draining) {
      log.info({ signal: 'SIGTERM' }, 'second signal, ending the drain');
      drain.finish();
      return;
    }
    log.info({ signal: 'SIGTERM', drainSeconds: seconds }, 'draining');
    void drain.start(seconds).then(() => {
      if (shutdown.closing()) return;
      log.info({ signal: 'SIGTERM' }, 'shutting down');
      shutdown.close();
    });
  });
}

main().catch(async (error: unknown) => {
  console.error(error instanceof ConfigError ? error.message : `failed to start: ${(error as Error).stack ?? String(error)}`);
  for (const undo of undoOnFailedStart.reverse()) await undo().catch(() => undefined);
  process.exit(1);
});
