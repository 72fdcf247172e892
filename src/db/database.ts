import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { enableDirectQueries, withPreparedStatements } from '../lib/prepared-statements.js';
import { PipelinedReads } from './pipelined-reads.js';
import type { DB } from './types.js';

export type Database = Kysely<DB>;

export interface DatabaseHandle {
  db: Database;
  pool: pg.Pool;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  poolMax?: number;
  /** Pipelined connections for the per-request reads (src/db/pipelined-reads.ts). */
  readConnections?: number;
  connectTimeoutMs?: number;
  /** Called for errors of idle pooled connections (e.g. the server went away). */
  onPoolError?: (error: Error) => void;
  /** Called with the text of every statement Kysely runs (tests count round trips with it). */
  onQuery?: (sql: string) => void;
}

// bigint columns (event ids, audit ids) stay far below 2^53; numbers are what the API serves.
const INT8_OID = 20;
const typeParsers = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8_OID) return (value: string) => Number.parseInt(value, 10);
    return pg.types.getTypeParser(oid, format);
  },
} as pg.CustomTypesConfig;

export function createDatabase(connectionString: string, options: DatabaseOptions = {}): DatabaseHandle {
  const pool = new pg.Pool({
    connectionString,
    max: options.poolMax ?? 20,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 2000,
    types: typeParsers,
  });
  // Without a listener an idle connection dropped by the server would crash the process.
  pool.on('error', (error) => options.onPoolError?.(error));
  const onQuery = options.onQuery;
  const db = new Kysely<DB>({
    dialect: new PostgresDialect({ pool: withPreparedStatements(pool) }),
    ...(onQuery && { log: (event) => onQuery(event.query.sql) }),
  });
  const reads = new PipelinedReads({
    connectionString,
    connections: options.readConnections ?? 2,
    connectTimeoutMs: options.connectTimeoutMs ?? 2000,
    types: typeParsers,
    ...(options.onPoolError && { onIdleError: options.onPoolError }),
  });
  enableDirectQueries(db, (name, sql, values) => reads.query(name, sql, values), onQuery);
  return {
    db,
    pool,
    close: async () => {
      await reads.end();
      await db.destroy();
    },
  };
}
