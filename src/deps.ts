import type { Config } from './config.js';
import type { Database, Pool } from './db/database.js';
import type { DatabaseObserver } from './db/observer.js';
import type { PipelinedConnections } from './db/pipelined-connections.js';
import type { StatementRunner } from './db/reusable-statement.js';
import type { UserTransactions } from './db/user-transactions.js';
import type { Drain } from './http/drain.js';

/** What buildApp is given and hands each route plugin as its options: a test builds what production runs. */
export interface AppDeps {
  config: Config;
  /** Kysely over the pool: transactions and the statements that do not go to the short-statement connections. */
  db: Database;
  /** The pipelined connections of short single statements: authentication with its rate-limit upsert, one user by id (src/db/pipelined-connections.ts). */
  shortStatements: StatementRunner;
  /** The transactions of users' writes (src/db/user-transactions.ts). */
  transactions: UserTransactions;
  /** The pool and the write connections, read by the metrics when scraped (absent: not reported). */
  pool?: Pool;
  writes?: PipelinedConnections;
  /** The database layer's reports, which the metrics fill in (absent: not reported). */
  observer?: DatabaseObserver;
  /** Set by the process entry: /ready answers 503 while it drains. Absent: never draining. */
  drain?: Drain;
}
