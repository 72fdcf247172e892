import { createHash } from 'node:crypto';
import {
  type Compilable,
  DummyDriver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type RawBuilder,
} from 'kysely';
import type { DB } from './types.js';

/** A statement's text and, when it is prepared, its name (one per text, for the whole process). */
export interface Statement {
  name?: string;
  text: string;
}

/** Only in types: what a bound statement's rows are (never a property at run time). */
declare const rowsOf: unique symbol;

/**
 * A statement with its values, as data: an element of a user's transaction
 * (UserTransactions.run), which resolves to its rows, typed `Row`. Made by a reusable statement's
 * `with`, by `bindStatement` (hand-written SQL) or by `queryStatement` (a Kysely query).
 */
export interface BoundStatement<Row> extends Statement {
  readonly values: readonly unknown[];
  readonly [rowsOf]?: Row;
}

/** A statement of hand-written SQL (preparedStatement's, say) with its values; `Row` is what its SQL returns. */
export function bindStatement<Row>(statement: Statement, values: readonly unknown[]): BoundStatement<Row> {
  return { ...statement, values };
}

/**
 * Where a statement can run: the short-statement connections (pipelined-connections.ts) or the connection
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

/** Stands for argument `name` while the query is built: no real value can be identical to it. */
class Placeholder {
  constructor(readonly name: string) {}
}

/**
 * A prepared statement's name: a hash of its text, so the name says what it runs whatever the order
 * the statements were first used in, and two statements of one text share one preparation.
 */
export const statementName = (text: string): string => `s_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`;

/**
 * Every named statement this process has made so far (compiled reusable statements and
 * preparedStatement's), text by name: the tests compare them with scripts/lib/sql-registry.ts, so that a
 * statement the code builds at run time cannot be missing from the reviewed sql/ files. One entry
 * per statement, added once, when it is compiled: never on a request's path after that.
 */
export const compiledStatements = new Map<string, string>();

/** A named statement of hand-written SQL (its text fixed at module load), named by a hash of its text. */
export function preparedStatement(text: string): Required<Statement> {
  const name = statementName(text);
  compiledStatements.set(name, text);
  return { name, text };
}

/**
 * A reusable statement: runs with each call's arguments; `statement()` is its text and name,
 * compiled once; `with(args)` is it with those arguments, as a transaction's statement.
 */
export interface ReusableStatement<Args, Row> {
  (runner: StatementRunner, args: Args): Promise<Row[]>;
  readonly statement: () => Required<Statement>;
  readonly with: (args: Args) => BoundStatement<Row>;
}

/**
 * A Kysely query built and compiled once, then run with other values as a named prepared
 * statement. Kysely builds an immutable node tree and parses every column reference on each call
 * (30–40 µs and garbage per query here); on the per-request paths that was the largest part of the
 * server's own overhead over a bare `pg` floor. PostgreSQL parses and plans a named statement once
 * per connection; its plan may become one generic plan for all values, so only statements whose
 * best plan cannot depend on the values belong here (lookups by unique keys, writes by key).
 *
 * `build` runs once, with a placeholder object standing for each argument named in `names`. Each
 * argument is then bound exactly once, as one parameter that the statement may reference in
 * several places ($n: Kysely numbers every occurrence apart, and the compiled text is renumbered
 * so that all of them share the argument's one parameter, which also lets the planner see the same
 * value everywhere). Checked at that first compile: every declared argument is used as it was
 * given (not transformed, not inlined, not in a list), and nothing else is bound from `args`; so a
 * query that would silently bind a wrong value fails at once. Other parameters of the query are
 * constants, sent as they were compiled. A call passes every argument by name; names the
 * statement does not use are ignored.
 */
export function reusableStatement<Args extends Record<string, unknown>, Row>(
  names: readonly (keyof Args & string)[],
  build: (db: Kysely<DB>, args: Args) => Compilable<Row>,
): ReusableStatement<Args, Row> {
  let compiled: { statement: Required<Statement>; constants: readonly unknown[]; bound: (string | undefined)[] } | undefined;
  const compile = () => {
    const placeholders = Object.fromEntries(names.map((name) => [name, new Placeholder(name)]));
    const query = build(compiler, placeholders as unknown as Args).compile();
    // An argument the statement does not declare reads as undefined while it is built.
    if (query.parameters.some((value) => value === undefined))
      throw new Error('reusableStatement: a parameter is undefined (an argument missing from names?)');
    for (const name of names) {
      if (!query.parameters.some((value) => value instanceof Placeholder && value.name === name)) {
        throw new Error(`reusableStatement: argument ${name} is not bound (transformed before binding, or unused)`);
      }
    }
    const { text, constants, bound } = shareParameters(query.sql, query.parameters);
    return { statement: preparedStatement(text), constants, bound };
  };
  const bind = (args: Args) => {
    const { statement, constants, bound } = (compiled ??= compile());
    return { statement, values: bound.map((name, i) => (name === undefined ? constants[i] : args[name])) };
  };
  // Not async: the runner's promise is returned as it is, without another promise around it.
  const run = (runner: StatementRunner, args: Args): Promise<Row[]> => {
    let bound: ReturnType<typeof bind>;
    try {
      bound = bind(args);
    } catch (error) {
      return Promise.reject(error);
    }
    return runner.run<Row>(bound.statement, bound.values);
  };
  return Object.assign(run, {
    statement: () => (compiled ??= compile()).statement,
    with: (args: Args) => {
      const { statement, values } = bind(args);
      return bindStatement<Row>(statement, values);
    },
  });
}

/**
 * Renumbers Kysely's `$1…$n` so that every occurrence of one placeholder refers to the first one's
 * parameter; constants keep one parameter each. Kysely writes each parameter exactly once, in
 * order: anything else in the text (a `$` inside a raw fragment, say) is refused.
 */
function shareParameters(
  sql: string,
  parameters: readonly unknown[],
): { text: string; constants: unknown[]; bound: (string | undefined)[] } {
  const kept: { value: unknown; name: string | undefined }[] = [];
  const numberOf = new Map<string, number>();
  const renumbered = parameters.map((value) => {
    if (value instanceof Placeholder) {
      const existing = numberOf.get(value.name);
      if (existing !== undefined) return existing;
      numberOf.set(value.name, kept.length + 1);
    }
    kept.push({ value, name: value instanceof Placeholder ? value.name : undefined });
    return kept.length;
  });
  let seen = 0;
  const text = sql.replace(/\$(\d+)/g, (_match, digits: string) => {
    if (Number(digits) !== ++seen) throw new Error('reusableStatement: the compiled text refers to its parameters out of order');
    return `$${renumbered[seen - 1]!}`;
  });
  if (seen !== parameters.length) throw new Error('reusableStatement: the compiled text does not refer to every parameter once');
  return { text, constants: kept.map((parameter) => parameter.value), bound: kept.map((parameter) => parameter.name) };
}

/**
 * A Kysely query as a transaction's statement, unnamed: for queries whose shape varies with their
 * options. `build` gets a Kysely that only compiles, never the pool's: a statement is data, built
 * without a connection.
 */
export function queryStatement<Row>(build: (db: Kysely<DB>) => Compilable<Row>): BoundStatement<Row> {
  const { sql, parameters } = build(compiler).compile();
  return { text: sql, values: parameters };
}

/** Hand-written SQL (Kysely's `sql` template, where the builder cannot say it) as a transaction's statement, unnamed. */
export function sqlStatement<Row>(query: RawBuilder<Row>): BoundStatement<Row> {
  const { sql, parameters } = query.compile(compiler);
  return { text: sql, values: parameters };
}
