import { Kysely, type PostgresPool, type PostgresPoolClient, type PostgresQueryResult, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Config } from '../config.js';
import { closesConnection, connectOrUnavailable, DatabaseUnavailable, statementFailure } from './errors.js';
import type { DatabaseObserver } from './observer.js';
import { PipelinedConnections } from './pipelined-connections.js';
import type { StatementRunner } from './reusable-statement.js';
import { decodeLargeAnswersInSlices } from './socket-reads.js';
import { Transactions } from './transactions.js';
import type { DB } from './types.js';

/** What statements run on: Kysely over the pool, or one of its transactions (Transaction<DB> extends Kysely<DB>). */
export type Database = Kysely<DB>;

/** The driver's connection pool (the metrics read its counts). */
export type Pool = pg.Pool;

export interface DatabaseHandle {
  /** Kysely over the pool: every read and single statement that is not a short one. */
  db: Database;
  /** The pipelined connections of short single statements: authentication with its rate-limit upsert, one user by id, cancels (pipelined-connections.ts). */
  shortStatements: PipelinedConnections;
  /** The write API: every transaction, on the pipelined write connections or the pool's (transactions.ts). */
  transactions: Transactions;
  pool: Pool;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  poolMax?: number;
  /** Pipelined connections for short single statements (src/db/pipelined-connections.ts). */
  shortStatementConnections?: number;
  /** Pipelined connections for small write transactions (src/db/transactions.ts). */
  writeConnections?: number;
  connectTimeoutMs?: number;
  /** Server-side statement_timeout of the pooled connections, in ms (0: none). */
  statementTimeoutMs?: number;
  /** statement_timeout of the short-statement connections, in ms (0: none). */
  shortStatementTimeoutMs?: number;
  /** Called for errors of connections no statement was waiting on (e.g. the server went away). */
  onConnectionError?: (error: Error) => void;
  /** Called with the text of every statement run (tests count round trips with it). */
  onQuery?: (sql: string) => void;
}

/** The options a server's configuration sets. */
export const databaseOptionsOf = (
  config: Pick<
    Config,
    'dbPoolMax' | 'dbReadConnections' | 'dbWriteConnections' | 'dbConnectTimeoutMs' | 'dbStatementTimeoutMs' | 'dbReadStatementTimeoutMs'
  >,
): DatabaseOptions => ({
  poolMax: config.dbPoolMax,
  shortStatementConnections: config.dbReadConnections,
  writeConnections: config.dbWriteConnections,
  connectTimeoutMs: config.dbConnectTimeoutMs,
  statementTimeoutMs: config.dbStatementTimeoutMs,
  shortStatementTimeoutMs: config.dbReadStatementTimeoutMs,
});

/**
 * TCP keep-alive probes start after this much silence (then every second, ten times, on Linux): a
 * connection dropped without a FIN (a failover, a NAT forgetting it) is noticed in about 20 s, not two hours.
 */
const KEEP_ALIVE_INITIAL_DELAY_MS = 10_000;

// bigint columns (event ids, audit ids) stay far below 2^53; numbers are what the API serves.
const INT8_OID = 20;
const typeParsers: pg.CustomTypesConfig = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8_OID) return (value: string) => Number.parseInt(value, 10);
    return pg.types.getTypeParser(oid, format) as (value: string) => unknown;
  },
};

/** node-postgres's own parser of timestamptz text: for a timestamp read out of JSON text as the driver would read its column. */
export const parseTimestamptz = pg.types.getTypeParser(pg.types.builtins.TIMESTAMPTZ) as (text: string) => Date;

/** The pool as Kysely sees it, with typed failures: no connection, or a statement lost with its connection, is DatabaseUnavailable. */
function typedPool(pool: pg.Pool, failedClients: WeakSet<pg.PoolClient>, observer: DatabaseObserver): PostgresPool {
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  const wrap = (client: pg.PoolClient): PostgresPoolClient => {
    // Kysely's cursor overload (stream()) is called only when the dialect has a `cursor` class: none here.
    function query<R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>>;
    function query(cursor: never): never;
    // pg types a result's `command` as any string, Kysely as the commands its statements answer.
    function query(text: string, values: ReadonlyArray<unknown> = []): Promise<unknown> {
      return client.query(text, values as unknown[]).catch((error: unknown) => {
        // Its session ended, or its server turned read-only (a demoted primary): closed on release.
        if (closesConnection(error)) failedClients.add(client);
        throw statementFailure(error, failedClients.has(client), observer);
      });
    }
    // pg-pool gives the client a new release function with every checkout: look it up each time.
    // A failed connection is closed rather than handed out again.
    return { query, release: () => client.release(failedClients.has(client) ? true : undefined) };
  };
  return {
    connect: async () => {
      const client = await connectOrUnavailable(pool);
      let wrapper = wrappers.get(client);
      if (!wrapper) wrappers.set(client, (wrapper = wrap(client)));
      return wrapper;
    },
    end: () => pool.end(),
  };
}

/** Kysely's builder over an open transaction (`tx` of Transactions.interactive: the admin command line's operations). */
export function kyselyIn(tx: StatementRunner): Database {
  // No cursor can come (no `cursor` class given), as in typedPool; `tx` tells rows, not counts.
  function query<R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>>;
  function query(cursor: never): never;
  async function query(text: string, values: ReadonlyArray<unknown> = []): Promise<unknown> {
    const rows = await tx.run({ text }, values);
    return { rows, command: 'SELECT', rowCount: rows.length };
  }
  const client: PostgresPoolClient = { query, release: () => undefined };
  return new Kysely<DB>({ dialect: new PostgresDialect({ pool: { connect: async () => client, end: async () => undefined } }) });
}

export function createDatabase(connectionString: string, options: DatabaseOptions = {}): DatabaseHandle {
  const connectTimeoutMs = options.connectTimeoutMs ?? 2000;
  const statementTimeoutMs = options.statementTimeoutMs ?? 0;
  const pool = new pg.Pool({
    connectionString,
    max: options.poolMax ?? 20,
    connectionTimeoutMillis: connectTimeoutMs,
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEP_ALIVE_INITIAL_DELAY_MS,
    ...(statementTimeoutMs > 0 && { statement_timeout: statementTimeoutMs }),
    types: typeParsers,
    // For transactions sent in one burst (pipelined-transaction.ts); Kysely's one statement at a time is unaffected.
    pipeline: true,
  });
  const report = (error: Error) => options.onConnectionError?.(error);
  const failedClients = new WeakSet<pg.PoolClient>();
  const observer: DatabaseObserver = {};
  // pg-pool listens for errors only while a connection is idle: a connection lent out with no
  // statement in flight that loses its server would emit 'error' with no listener, killing the
  // process. Every connection gets one for its whole life.
  pool.on('connect', (client) => {
    // The pool serves the large reads (a whole organization's users).
    decodeLargeAnswersInSlices(client);
    observer.connectionOpened?.('pool');
    let lost = false;
    client.on('error', (error) => {
      if (!lost) observer.connectionLost?.('pool');
      lost = true;
      failedClients.add(client);
      report(new DatabaseUnavailable('database connection lost', { cause: error }));
    });
  });
  // The pool re-emits idle connections' errors, already reported by the listener above.
  pool.on('error', () => undefined);
  const onQuery = options.onQuery;
  const db = new Kysely<DB>({
    dialect: new PostgresDialect({ pool: typedPool(pool, failedClients, observer) }),
    ...(onQuery && { log: (event) => onQuery(event.query.sql) }),
  });
  const pipelined = (kind: 'short_statements' | 'writes', connections: number, timeoutMs: number) =>
    new PipelinedConnections({
      kind,
      observer,
      connectionString,
      connections,
      connectTimeoutMs,
      statementTimeoutMs: timeoutMs,
      keepAliveInitialDelayMs: KEEP_ALIVE_INITIAL_DELAY_MS,
      types: typeParsers,
      onIdleError: report,
      ...(onQuery && { onStatement: onQuery }),
    });
  const shortStatements = pipelined('short_statements', options.shortStatementConnections ?? 2, options.shortStatementTimeoutMs ?? 0);
  const writes = pipelined('writes', options.writeConnections ?? 2, statementTimeoutMs);
  const transactions = new Transactions({
    pool,
    writes,
    failedClients,
    cancelVia: shortStatements,
    ...(onQuery && { onStatement: onQuery }),
  });
  return {
    db,
    shortStatements,
    transactions,
    pool,
    close: async () => {
      await shortStatements.end();
      await writes.end();
      await db.destroy();
    },
  };
}
