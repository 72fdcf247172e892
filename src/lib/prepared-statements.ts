import type { PostgresCursor, PostgresPool, PostgresPoolClient, PostgresQueryResult } from 'kysely';
import type pg from 'pg';

/**
 * Named prepared statements for the per-request queries. node-postgres sends every query as an
 * unnamed statement, which PostgreSQL parses, analyses and plans on each execution: planning the
 * authentication lookup took five times as long as executing it, and preparing the two queries of
 * GET /users/{id} cut PostgreSQL's CPU time per request by more than half (bench/RESULTS.md). A
 * named statement is parsed and planned once per connection, then only bound and executed.
 *
 * Only statements whose best plan cannot depend on the values belong here (lookups by unique
 * keys): PostgreSQL may switch a prepared statement to one generic plan for all values.
 */

const namesBySql = new Map<string, string>();

/** From now on, every connection prepares this statement text the first time it runs it. */
export function prepareStatement(sql: string): void {
  if (!namesBySql.has(sql)) namesBySql.set(sql, `prepared_${namesBySql.size + 1}`);
}

/** A pooled client for Kysely that sends the statements marked by prepareStatement by name. */
function namingClient(client: pg.PoolClient): PostgresPoolClient {
  function query<R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>>;
  function query<R>(cursor: PostgresCursor<R>): PostgresCursor<R>;
  function query(text: string | PostgresCursor<unknown>, values?: ReadonlyArray<unknown>): unknown {
    if (typeof text !== 'string') return client.query(text as unknown as pg.Submittable); // Kysely's streaming cursors
    const name = namesBySql.get(text);
    const parameters = values as unknown[];
    return name === undefined ? client.query(text, parameters) : client.query({ name, text, values: parameters });
  }
  // pg-pool gives the client a new release function with every checkout: look it up each time.
  return { query, release: () => client.release() };
}

/** Runs one compiled statement outside any transaction; resolves to its rows. */
export type DirectQuery = <R>(sql: string, parameters: readonly unknown[]) => Promise<R[]>;

/** Sends one statement, by name when it has one (a prepared statement). */
export type StatementSender = <R>(name: string | undefined, sql: string, values: unknown[]) => Promise<R[]>;

const directQueries = new WeakMap<object, DirectQuery>();

/**
 * Lets reusableQuery run statements of `db` (the root instance, never a transaction) through
 * `send` (src/db/pipelined-reads.ts) instead of Kysely's executor and a pooled connection: the
 * executor adds a dozen promise hops per statement (connection provider, driver, result plugins),
 * and the pool a check-out and a round trip of its own. `onQuery` sees every statement, as Kysely's
 * log would.
 */
export function enableDirectQueries(db: object, send: StatementSender, onQuery?: (sql: string) => void): void {
  directQueries.set(db, <R>(sql: string, parameters: readonly unknown[]) => {
    const result = send<R>(namesBySql.get(sql), sql, parameters as unknown[]);
    return onQuery ? result.finally(() => onQuery(sql)) : result;
  });
}

/** The direct path for `db`, when it is a root instance that has one (not inside a transaction). */
export const directQueryOf = (db: object): DirectQuery | undefined => directQueries.get(db);

/** The pool as Kysely sees it: statements marked by prepareStatement go out with their name. */
export function withPreparedStatements(pool: pg.Pool): PostgresPool {
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  return {
    connect: async () => {
      const client = await pool.connect();
      let wrapper = wrappers.get(client);
      if (!wrapper) wrappers.set(client, (wrapper = namingClient(client)));
      return wrapper;
    },
    end: () => pool.end(),
  };
}
