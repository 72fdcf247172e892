import { join } from 'node:path';
import type { Config } from '../config.js';
import { createDatabase, type DatabaseHandle } from '../db/database.js';
import { findRunningServer, startEmbeddedPostgres } from '../db/embedded.js';
import { migrateToLatest } from '../db/migrator.js';

export const embeddedDirectory = (config: Config): string => join(config.dataDir, 'postgres');

/**
 * The database a command-line tool works on: DATABASE_URL; else the embedded database of a
 * server running on this DATA_DIR; else the embedded database started just for this command.
 */
export async function connectForCli(config: Config): Promise<DatabaseHandle> {
  const url = config.databaseUrl ?? (await findRunningServer(config.dataDir));
  if (url) return createDatabase(url, { poolMax: 2 });
  const embedded = await startEmbeddedPostgres({ directory: embeddedDirectory(config), secretsDir: config.dataDir });
  const handle = createDatabase(embedded.url, { poolMax: 2 });
  await migrateToLatest(handle.db);
  return {
    ...handle,
    close: async () => {
      await handle.close();
      await embedded.stop();
    },
  };
}
