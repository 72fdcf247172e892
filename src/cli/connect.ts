import { join } from 'node:path';
import { sql } from 'kysely';
import type { Config } from '../config.js';
import { namingDatabaseUrl } from '../db/connection-errors.js';
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
  if (url) {
    const handle = createDatabase(url, { poolMax: 2 });
    // A database that cannot be reached is said at once, naming DATABASE_URL and the cause.
    try {
      await sql`SELECT 1`.execute(handle.db);
    } catch (error) {
      await handle.close();
      throw namingDatabaseUrl(error, config);
    }
    return handle;
  }
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
