import type { Config } from './config.js';
import type { Database } from './db/database.js';
import type { StatementRunner } from './db/reusable-statement.js';
import type { Transactions } from './db/transactions.js';
import type { Drain } from './http/drain.js';

/** What buildApp is given and hands each route plugin as its options: a test builds what production runs. */
export interface AppDeps {
  config: Config;
  /** Kysely over the pool: reads and single statements (what needs no transaction). */
  db: Database;
  /** Short single statements, authentication's first: pipelined, cheaper per statement than the pool (src/db/pipelined-connections.ts). */
  shortStatements: StatementRunner;
  /** The one write API: every write of several statements is a transaction of it (src/db/transactions.ts); the metrics read its pool and connections. */
  transactions: Transactions;
  /** Set by the process entry: /ready answers 503 while it drains. Absent: never draining. */
  drain?: Drain;
}
