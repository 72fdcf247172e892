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

/** A statement with its values, as data: an element of a user's transaction (Transactions.run), whose rows are `Row`s. */
export interface BoundStatement<Row> extends Statement {
  readonly values: readonly unknown[];
  readonly [rowsOf]?: Row;
}

/** A statement of hand-written SQL (preparedStatement's, say) with its values; `Row` is what its SQL returns. */
export function bindStatement<Row>(statement: Statement, values: readonly unknown[]): BoundStatement<Row> {
  return { ...statement, values };
}

/** Where a statement can run: the short-statement connections (pipelined-connections.ts) or a transaction's connection. */
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

/** A prepared statement's name: a hash of its text, whatever the order of first use; one text, one preparation. */
export const statementName = (text: string): string => `s_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`;

/**
 * Every named statement this process has made so far, text by name, added once when compiled: the
 * tests check that none is missing from the reviewed sql/ files (scripts/lib/sql-registry.ts).
 */
export const compiledStatements = new Map<string, string>();

/** A named statement of hand-written SQL (its text fixed at module load), named by a hash of its text. */
export function preparedStatement(text: string): Required<Statement> {
  const name = statementName(text);
  compiledStatements.set(name, text);
  return { name, text };
}

/** Runs with each call's arguments; `statement()`: its text and name; `with(args)`: it as a transaction's statement. */
export interface ReusableStatement<Args, Row> {
  (runner: StatementRunner, args: Args): Promise<Row[]>;
  readonly statement: () => Required<Statement>;
  readonly with: (args: Args) => BoundStatement<Row>;
}

/**
 * A Kysely query built and compiled once, then run with other values as a named prepared statement:
 * building it on each call (30–40 µs and garbage) was the largest part of the server's overhead over
 * a bare `pg` floor. Its plan may become one generic plan for all values, so only statements whose
 * best plan cannot depend on the values belong here (lookups and writes by unique key).
 *
 * `build` runs once, with a placeholder for each argument in `names`; each argument becomes one
 * parameter, shared by all its occurrences (the planner sees the same value everywhere). The first
 * compile checks that every declared argument is used as given (not transformed, inlined or in a
 * list) and nothing else is bound from `args`; other parameters are constants, sent as compiled.
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
    for (const name of names)
      if (!query.parameters.some((value) => value instanceof Placeholder && value.name === name))
        throw new Error(`reusableStatement: argument ${name} is not bound (transformed before binding, or unused)`);
    const { text, constants, bound } = shareParameters(query.sql, query.parameters);
    return { statement: preparedStatement(text), constants, bound };
  };
  const bind = (args: Args): BoundStatement<Row> => {
    const { statement, constants, bound } = (compiled ??= compile());
    return bindStatement(
      statement,
      bound.map((name, i) => (name === undefined ? constants[i] : args[name])),
    );
  };
  // Not async: the runner's promise is returned as it is, without another promise around it.
  const run = (runner: StatementRunner, args: Args): Promise<Row[]> => {
    let bound: BoundStatement<Row>;
    try {
      bound = bind(args);
    } catch (error) {
      return Promise.reject(error);
    }
    return runner.run<Row>(bound, bound.values);
  };
  return Object.assign(run, { statement: () => (compiled ??= compile()).statement, with: bind });
}

/**
 * Renumbers Kysely's `$1…$n` so that every occurrence of one placeholder refers to its first one's
 * parameter. Kysely writes each parameter once, in order: anything else (a `$` in a raw fragment) is refused.
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

/** A Kysely query whose shape varies (built by a Kysely that only compiles) as a transaction's statement, unnamed. */
export function queryStatement<Row>(build: (db: Kysely<DB>) => Compilable<Row>): BoundStatement<Row> {
  const { sql, parameters } = build(compiler).compile();
  return { text: sql, values: parameters };
}

/** Hand-written SQL (Kysely's `sql` template, where the builder cannot say it) as a transaction's statement, unnamed. */
export function sqlStatement<Row>(query: RawBuilder<Row>): BoundStatement<Row> {
  const { sql, parameters } = query.compile(compiler);
  return { text: sql, values: parameters };
}
