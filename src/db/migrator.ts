import { inspect } from 'node:util';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { type Kysely, type Migration, type MigrationProvider, type MigrationResultSet, Migrator, sql } from 'kysely';

const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));

/** Plain `.sql` files, applied in name order; each runs in the migrator's transaction. */
const sqlFiles: MigrationProvider = {
  async getMigrations() {
    const files = (await readdir(MIGRATIONS_DIR)).filter((name) => name.endsWith('.sql')).sort();
    const migrations: Record<string, Migration> = {};
    for (const file of files) {
      const text = await readFile(`${MIGRATIONS_DIR}/${file}`, 'utf8');
      migrations[file.replace(/\.sql$/, '')] = {
        up: async (db: Kysely<unknown>) => {
          await sql.raw(text).execute(db);
        },
      };
    }
    return migrations;
  },
};

/**
 * Applies every pending migration. Kysely's Migrator holds an advisory lock while it runs, so
 * several replicas starting at once apply each migration exactly once.
 */
// The migrator runs before the schema exists, so it is not typed by it.
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- Kysely's Migrator takes Kysely<any>
export async function migrateToLatest(db: Kysely<any>): Promise<MigrationResultSet> {
  const migrator = new Migrator({ db, provider: sqlFiles });
  const resultSet = await migrator.migrateToLatest();
  if (resultSet.error) {
    const failed = resultSet.results?.find((result) => result.status === 'Error');
    const detail = resultSet.error instanceof Error ? resultSet.error.message : inspect(resultSet.error);
    throw new Error(`Migration ${failed?.migrationName ?? '(unknown)'} failed: ${detail}`, { cause: resultSet.error });
  }
  return resultSet;
}
