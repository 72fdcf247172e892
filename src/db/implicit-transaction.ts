import { createRequire } from 'node:module';
import pg from 'pg';
import { isUserLockRefusal } from './errors.js';

// node-postgres's own conversion of parameter values (arrays, dates, objects as JSON), as its queries use it.
const { prepareValue } = createRequire(import.meta.url)('pg/lib/utils.js') as { prepareValue: (value: unknown) => unknown };

/** One statement of a group: prepared once per connection under `name`, unnamed (parsed every time) without one. */
export interface GroupStatement {
  name?: string;
  text: string;
  values: readonly unknown[];
}

/**
 * The protocol messages and prepared-statement bookkeeping of node-postgres's Connection, as its own
 * Query uses them: private, so every one is asserted by test/pg-contract.test.ts (README, "Libraries, and why").
 */
interface ProtocolConnection {
  parse(message: { name: string; text: string }): void;
  bind(message: { statement: string; values: readonly unknown[]; valueMapper: (value: unknown) => unknown }): void;
  describe(message: { type: 'P'; name: string }): void;
  execute(message: { portal: string }): void;
  sync(): void;
  parsedStatements: Record<string, string>;
  submittedNamedStatements: Record<string, string>;
  stream: { cork?(): void; uncork?(): void };
}

/**
 * Statements sent with ONE Sync: PostgreSQL runs them as one implicit transaction (protocol
 * "Extended Query": the statements between two Syncs commit together at the Sync, and an error
 * rolls all of them back and skips the rest). Each statement still takes its own snapshot when it
 * is bound, after the statements before it ran (READ COMMITTED), exactly as in BEGIN … COMMIT,
 * without those two statements and their Syncs, each of which cost the server about as much as a
 * small statement.
 *
 * A node-postgres Query (a pipelined client accepts no other kind) whose messages are its own:
 * node-postgres's Query answers several results when several statements complete before the
 * ReadyForQuery, one per statement, in order. The Parse of a statement new to the connection is
 * sent before every Bind, so once a row has arrived, every Parse of the group has succeeded; a
 * failure before that leaves unknown which ones did, and `connectionSuspect` asks the caller to
 * close the connection rather than trust bookkeeping that may be wrong. (The user transactions'
 * first statement, the lock, answers a row when granted; refused, its error comes from running it,
 * which says as much as a row: see below.)
 */
export class ImplicitTransaction extends pg.Query {
  /** Set when the group failed before its first row: the connection's prepared statements are uncertain. */
  connectionSuspect = false;
  /** How many statements completed: after a failure, the index of the statement that failed. */
  completed = 0;

  constructor(statements: readonly GroupStatement[], done: (error: Error | undefined, rows: unknown[][]) => void) {
    /** The Parses this group sent, until the first row shows they all succeeded. */
    let fresh: { name: string; text: string }[] = [];
    let connection: ProtocolConnection | undefined;
    super({ text: statements.map((statement) => statement.text).join(';\n') }, (error: Error | undefined, results: unknown) => {
      if (error) {
        // A lock refused (user_lock_now) was refused by a statement that ran: every Parse, all sent
        // before the first Bind, had succeeded. Refusals are routine on a shared connection, and a
        // suspect one would be closed each time a group's first member is refused.
        if (isUserLockRefusal(error)) parsed();
        if (fresh.length > 0) this.connectionSuspect = true;
        for (const { name } of fresh) delete connection?.submittedNamedStatements[name];
        return done(error, []);
      }
      parsed();
      // node-postgres answers one result for one statement, an array of them for several.
      const list = (Array.isArray(results) ? results : [results]) as { rows: unknown[] }[];
      done(
        undefined,
        list.map((result) => result.rows),
      );
    });
    const parsed = () => {
      for (const { name, text } of fresh) {
        connection!.parsedStatements[name] = text;
        delete connection!.submittedNamedStatements[name];
      }
      fresh = [];
    };
    // Every Parse came before the first Bind: once a row arrives, all of them have succeeded.
    this.once('row', parsed);
    const counted = this as unknown as { handleCommandComplete(message: unknown, connection: unknown): void };
    const complete = counted.handleCommandComplete.bind(this);
    counted.handleCommandComplete = (message, connection) => {
      this.completed++;
      complete(message, connection);
    };
    this.submit = (raw) => {
      connection = raw as unknown as ProtocolConnection;
      const target = connection;
      target.stream.cork?.();
      try {
        for (const { name, text } of statements) {
          if (!name) continue;
          if (target.parsedStatements[name] !== undefined || target.submittedNamedStatements[name] !== undefined) continue;
          target.parse({ name, text });
          target.submittedNamedStatements[name] = text;
          fresh.push({ name, text });
        }
        for (const { name, text, values } of statements) {
          if (!name) target.parse({ name: '', text });
          target.bind({ statement: name ?? '', values, valueMapper: asPrepared });
          target.describe({ type: 'P', name: '' });
          target.execute({ portal: '' });
        }
        target.sync();
      } finally {
        target.stream.uncork?.();
      }
    };
  }
}

/** The values were converted before the group was written (see sendImplicitTransaction). */
const asPrepared = (value: unknown) => value;

/**
 * Sends `statements` as one implicit transaction on `client`; resolves to each statement's rows, in
 * order. The values are converted first: a value node-postgres cannot convert (a circular object)
 * throws here, before anything is written, not halfway through the group's messages, which would
 * leave statements without their Sync on a connection others share.
 */
export function sendImplicitTransaction(
  client: pg.ClientBase,
  statements: readonly GroupStatement[],
): { rows: Promise<unknown[][]>; query: ImplicitTransaction } {
  const prepared = statements.map((statement) => ({ ...statement, values: statement.values.map((value) => prepareValue(value)) }));
  let query!: ImplicitTransaction;
  const rows = new Promise<unknown[][]>((resolve, reject) => {
    query = new ImplicitTransaction(prepared, (error, rows) => (error ? reject(error) : resolve(rows)));
  });
  client.query(query);
  return { rows, query };
}
