import type { Compilable, CompiledQuery, Kysely } from 'kysely';
import { directQueryOf, prepareStatement } from './prepared-statements.js';

/**
 * A Kysely query built and compiled once, then executed with other values, as a named prepared
 * statement (prepared-statements.ts: so its plan must not depend on the values). Kysely builds an
 * immutable node tree and parses every column reference on each call (30–40 µs and garbage per
 * query here); on the per-request paths (authentication, one user by id) that was the largest
 * part of the server's own overhead over a bare `pg` floor (bench/RESULTS.md).
 *
 * `build` runs on the first call with `markers` standing for the arguments; every execution then
 * sends the compiled SQL with each parameter equal to marker i replaced by argument i (a marker may
 * be absent: that argument is unused). Markers must be values the query cannot otherwise bind,
 * and each argument must be bound as one parameter (no lists, no inlined literals).
 *
 * On a root Kysely instance the statement goes to the pipelined read connections
 * (enableDirectQueries, src/db/pipelined-reads.ts); inside a transaction it goes through the
 * transaction, as any Kysely query does.
 */
export function reusableQuery<DB, Args extends unknown[], Row>(
  markers: Readonly<Args>,
  build: (db: Kysely<DB>, ...args: Args) => Compilable<Row>,
): (db: Kysely<DB>, ...args: Args) => Promise<Row[]> {
  let compiled: { query: CompiledQuery<Row>; argumentIndexes: number[] } | undefined;
  // Not async: the direct path's promise is returned as it is, without another promise around it.
  return (db, ...args) => {
    if (!compiled) {
      // The SQL depends only on the dialect (PostgreSQL everywhere), not on the instance.
      const query = build(db, ...(markers as Args)).compile();
      prepareStatement(query.sql);
      compiled = { query, argumentIndexes: query.parameters.map((value) => markers.indexOf(value)) };
    }
    const { query, argumentIndexes } = compiled;
    const parameters = query.parameters.map((value, i) => (argumentIndexes[i]! < 0 ? value : args[argumentIndexes[i]!]));
    const direct = directQueryOf(db);
    if (direct) return direct<Row>(query.sql, parameters);
    const execution: CompiledQuery<Row> = { ...query, parameters };
    return db.executeQuery(execution).then((result) => result.rows);
  };
}
