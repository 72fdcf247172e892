import {
  type Compilable,
  DummyDriver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
} from 'kysely';
import type { DB } from './types.js';

/** A statement's text and, when it is prepared, its name (one per text, for the whole process). */
export interface Statement {
  name?: string;
  text: string;
}

/**
 * Where a statement can run: the pipelined read connections (pipelined-reads.ts) or the connection
 * of a transaction. Resolves to the rows.
 */
export interface StatementRunner {
  run<R>(statement: Statement, values: readonly unknown[]): Promise<R[]>;
}

// Compiles only: the SQL depends on the dialect, never on a connection.
const compiler = new Kysely<DB>({
  dialect: {
    createAdapter: () => new PostgresAdapter(),
    createDriver: () => new DummyDriver(),
    createIntrospector: (db) => new PostgresIntrospector(db),
    createQueryCompiler: () => new PostgresQueryCompiler(),
  },
});

/** Stands for argument `position` while the query is built: no real value can be identical to it. */
class Placeholder {
  constructor(readonly position: number) {}
}

let statementCount = 0;

/**
 * A Kysely query built and compiled once, then run with other values as a named prepared
 * statement. Kysely builds an immutable node tree and parses every column reference on each call
 * (30–40 µs and garbage per query here); on the per-request paths that was the largest part of the
 * server's own overhead over a bare `pg` floor. PostgreSQL parses and plans a named statement once
 * per connection; its plan may become one generic plan for all values, so only statements whose
 * best plan cannot depend on the values belong here (lookups by unique keys, writes by key).
 *
 * `build` runs once, with a placeholder object standing for each argument. Every placeholder must
 * be bound exactly once, as one parameter (not transformed, not inlined, not in a list): that is
 * checked at that first compile, so a query that would silently bind a wrong value fails at once.
 * Other parameters of the query are constants, sent as they were compiled.
 */
export function reusableStatement<Args extends unknown[], Row>(
  arity: Args['length'],
  build: (db: Kysely<DB>, ...args: Args) => Compilable<Row>,
): (runner: StatementRunner, ...args: Args) => Promise<Row[]> {
  let compiled: { statement: Statement; constants: readonly unknown[]; positions: number[] } | undefined;
  const compile = () => {
    const placeholders = Array.from({ length: arity }, (_, position) => new Placeholder(position));
    const query = build(compiler, ...(placeholders as unknown as Args)).compile();
    const positions = query.parameters.map((value) => (value instanceof Placeholder ? value.position : -1));
    for (const { position } of placeholders) {
      const bound = positions.filter((p) => p === position).length;
      if (bound !== 1) throw new Error(`reusableStatement: argument ${position} is bound ${bound} times (must be exactly once)`);
    }
    return { statement: { name: `statement_${++statementCount}`, text: query.sql }, constants: query.parameters, positions };
  };
  // Not async: the runner's promise is returned as it is, without another promise around it.
  return (runner, ...args) => {
    try {
      compiled ??= compile();
    } catch (error) {
      return Promise.reject(error as Error);
    }
    const { statement, constants, positions } = compiled;
    const values = positions.map((position, i) => (position < 0 ? constants[i] : args[position]));
    return runner.run<Row>(statement, values);
  };
}

