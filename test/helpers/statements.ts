import { afterAll } from 'vitest';
import { compiledStatements, reusableStatement, type ReusableStatement } from '../../src/db/reusable-statement.js';
import type { DB } from '../../src/db/types.js';
import type { Compilable, Kysely } from 'kysely';

/** The statements tests build for themselves (testStatement): not the server's, so not registered. */
const testStatementNames = new Set<string>();

/**
 * A reusable statement of a test's own (reusableStatement's arguments), compiled at once so that
 * the check below knows it is not the server's.
 */
export function testStatement<Args extends Record<string, unknown>, Row>(
  names: readonly (keyof Args & string)[],
  build: (db: Kysely<DB>, args: Args) => Compilable<Row>,
): ReusableStatement<Args, Row> {
  const statement = reusableStatement(names, build);
  testStatementNames.add(statement.statement().name);
  return statement;
}

/** Forgets a statement a test compiled on purpose outside the registry (test/sql-registry.test.ts). */
export function forgetStatement(name: string): void {
  compiledStatements.delete(name);
}

/**
 * A setup file of every test file (vitest.config.ts): after the file's tests, every statement the
 * server compiled while they ran must be one of scripts/lib/sql-registry.ts, whose sql/ files reviewers
 * see and CI checks (`npm run sql:check`). A statement built at run time that the registry lacks
 * (a new variant of a lookup, say) fails the file that ran it.
 */
// A worker may run several files with the same modules (vitest.config.ts): what earlier files
// compiled was checked after them.
const compiledBefore = new Set(compiledStatements.keys());
afterAll(async () => {
  const ignored = new Set([...compiledBefore, ...testStatementNames]);
  if ([...compiledStatements.keys()].every((name) => ignored.has(name))) return;
  // Loaded only when needed: it imports the modules of every statement.
  const { unregisteredStatements } = await import('../../scripts/lib/sql-registry.js');
  const missing = unregisteredStatements(ignored);
  if (missing.length > 0) {
    const listed = missing.map(([name, text]) => `${name}: ${text.length > 300 ? `${text.slice(0, 300)}…` : text}`).join('\n\n');
    throw new Error(
      `statements compiled at run time that scripts/lib/sql-registry.ts does not list (add them, then npm run sql):\n${listed}`,
    );
  }
});
