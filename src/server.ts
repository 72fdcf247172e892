// Process entry: config → database → buildApp → listen → graceful close.
import closeWithGrace from 'close-with-grace';
import { buildApp } from './app.js';
import { embeddedDirectory } from './cli/connect.js';
import { createDemoOrganization, describeDemo } from './cli/demo.js';
import { ConfigError, loadConfig } from './config.js';
import { createDatabase } from './db/database.js';
import { type EmbeddedDatabase, recordRunningServer, startEmbeddedPostgres } from './db/embedded.js';
import { migrateToLatest } from './db/migrator.js';

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
  const app = await buildApp({ config: { ...config, databaseUrl: url }, db: handle.db }, true);

  if (embedded) {
    const demo = await createDemoOrganization(handle.db, config);
    if (demo) console.log(describeDemo(demo, config));
    forgetServer = await recordRunningServer(config.dataDir, embedded.url);
  }

  closeWithGrace({ delay: 10_000 }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'closing after an error');
    else app.log.info({ signal }, 'shutting down');
    await app.close();
    await handle.close();
    await forgetServer?.();
    await embedded?.stop();
  });

  await app.listen({ port: config.port, host: config.host });
}

main().catch((error: unknown) => {
  console.error(error instanceof ConfigError ? error.message : `failed to start: ${(error as Error).stack ?? String(error)}`);
  process.exit(1);
});
