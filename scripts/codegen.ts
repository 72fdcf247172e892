// Regenerates src/db/types.ts from a freshly migrated database (embedded PostgreSQL), or with
// --check fails when the committed file differs from what the migrations produce.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDatabase } from '../src/db/database.js';
import { startEmbeddedPostgres } from '../src/db/embedded.js';
import { migrateToLatest } from '../src/db/migrator.js';

const TYPES_FILE = 'src/db/types.ts';
const check = process.argv.includes('--check');
const work = mkdtempSync(join(tmpdir(), 'codegen-'));
const embedded = await startEmbeddedPostgres({ directory: join(work, 'pg'), secretsDir: work, ephemeral: true });
try {
  const handle = createDatabase(embedded.url);
  await migrateToLatest(handle.db);
  await handle.close();
  const out = check ? join(work, 'types.ts') : TYPES_FILE;
  // int8 is parsed into a number by createDatabase (ids stay far below 2^53).
  const typeMapping = JSON.stringify({ int8: 'ColumnType<number, number | bigint | string, number | bigint | string>' });
  execFileSync(
    'npx',
    [
      'kysely-codegen',
      '--dialect',
      'postgres',
      '--url',
      embedded.url,
      '--out-file',
      out,
      '--exclude-pattern',
      'kysely_*',
      '--type-mapping',
      typeMapping,
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  if (check && readFileSync(out, 'utf8') !== readFileSync(TYPES_FILE, 'utf8')) {
    console.error(`${TYPES_FILE} is out of date with migrations/: run npm run codegen and commit it.`);
    process.exitCode = 1;
  } else {
    console.log(check ? `${TYPES_FILE} matches the migrations.` : `wrote ${TYPES_FILE}`);
  }
} finally {
  await embedded.stop();
  rmSync(work, { recursive: true, force: true });
}
