// npm run migrate: applies pending migrations to DATABASE_URL (or the embedded database).
import { loadConfig } from '../config.js';
import { migrateToLatest } from '../db/migrator.js';
import { connectForCli } from './connect.js';

try {
  const handle = await connectForCli(loadConfig());
  try {
    const { results } = await migrateToLatest(handle.db);
    const applied = (results ?? []).filter((result) => result.status === 'Success').map((result) => result.migrationName);
    console.log(JSON.stringify({ applied }));
  } finally {
    await handle.close();
  }
} catch (error) {
  console.error(error instanceof Error ? error.message : String(error));
  process.exitCode = 1;
}
