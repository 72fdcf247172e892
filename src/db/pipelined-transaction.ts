import pg from 'pg';
import { CommitOutcomeUnknown, endsSession, isDatabaseUnavailable } from './errors.js';
import type { BoundStatement, Statement, StatementRunner } from './reusable-statement.js';
import { batchWritesOfThisTurn } from './socket-writes.js';

/** A statement of a transaction with its values: prepared once per connection when it has a name. */
export type TransactionStatement = BoundStatement<unknown>;

/** How far a failed transaction got (sendTransaction). */
export interface TransactionProgress {
  /** How many statements completed: after a failure, the index of the one that failed (the count of all of them: the COMMIT). */
  completed: number;
  /** It rolled back on a connection that serves on (a server error that left the session open, or a statement pg could not send). */
  rolledBack: boolean;
  /** pg could not send a statement (a value it cannot convert): the connection must be closed (see below). */
  unsendable: boolean;
}

export const transactionProgress = (): TransactionProgress => ({ completed: 0, rolledBack: false, unsendable: false });

/**
 * Sends `BEGIN`, `statements` and `COMMIT` back to back on a client in pipeline mode (pg's
 * `pipeline: true`: each query with its own Sync and answer), in one socket write: one round trip,
 * one commit. Resolves to each statement's rows, in order.
 *
 * After a failing statement the others fail with 25P02 and the COMMIT answers ROLLBACK; the first
 * failure is the transaction's (`progress.completed` names it). A value pg cannot convert fails its
 * query as it is issued: the rest is not issued and ROLLBACK replaces the COMMIT. pg then closed
 * the statement it had prepared (Close after a failed Bind), so its record of prepared statements
 * is wrong (`unsendable`: the caller closes the connection).
 */
export async function sendTransaction(
  client: pg.ClientBase,
  statements: readonly TransactionStatement[],
  progress: TransactionProgress = transactionProgress(),
  onStatement?: (text: string) => void,
): Promise<unknown[][]> {
  let issuing = false;
  let unsendable: Error | undefined;
  const issue = (config: pg.QueryConfig) =>
    new Promise<unknown[]>((resolve, reject) => {
      issuing = true;
      try {
        // pg answers a query it could not send at once, inside this call; the server's answers come later.
        client.query(config, (error: Error | undefined, result: pg.QueryResult) => {
          if (error && issuing) unsendable = error;
          if (error) reject(error);
          else resolve(result.rows as unknown[]);
        });
      } finally {
        issuing = false;
      }
    });
  batchWritesOfThisTurn(client);
  const texts = ['BEGIN'];
  const answers = [issue({ text: 'BEGIN' })];
  for (const { name, text, values } of statements) {
    texts.push(text);
    answers.push(issue({ ...(name && { name }), text, values: values as unknown[] }));
    if (unsendable) break;
  }
  const end = unsendable ? 'ROLLBACK' : 'COMMIT';
  texts.push(end);
  answers.push(issue({ text: end }));
  const settled = await Promise.allSettled(answers);
  for (const text of texts) onStatement?.(text);
  const failed = settled.findIndex((answer) => answer.status === 'rejected');
  if (failed === -1) return settled.slice(1, -1).map((answer) => (answer as PromiseFulfilledResult<unknown[]>).value);
  const error = (settled[failed] as PromiseRejectedResult).reason as unknown;
  progress.completed = Math.max(failed - 1, 0);
  progress.unsendable = unsendable !== undefined;
  progress.rolledBack = progress.unsendable || (error instanceof pg.DatabaseError && !endsSession(error));
  throw error;
}

/**
 * A transaction whose statements may depend on earlier ones' rows (`work` awaits them), through the
 * caller's `query`. `BEGIN` and `opening` (the locks) are issued unawaited, so they leave with
 * `work`'s first statement; `COMMIT` follows `work`. A failed opening fails the transaction with
 * its own error, whatever `work` made of it. On failure the caller rolls back; a connection lost
 * during the COMMIT is CommitOutcomeUnknown.
 */
export async function interactiveTransaction<T>(
  query: StatementRunner['run'],
  opening: readonly TransactionStatement[],
  work: (tx: StatementRunner) => Promise<T>,
): Promise<T> {
  const opened = Promise.allSettled([query({ text: 'BEGIN' }, []), ...opening.map((statement) => query(statement, statement.values))]);
  const openingFailure = async (): Promise<unknown> => (await opened).find((answer) => answer.status === 'rejected')?.reason;
  const firstFailure = async (error: unknown): Promise<never> => {
    throw (await openingFailure()) ?? error;
  };
  const result = await work({
    run: <R>(statement: Statement, values: readonly unknown[]) => query<R>(statement, values).catch(firstFailure),
  }).catch(firstFailure);
  const failure = await openingFailure();
  if (failure !== undefined) throw failure as Error; // a statement's error, as pg gave it
  await query({ text: 'COMMIT' }, []).catch((error: unknown) => {
    throw isDatabaseUnavailable(error) ? new CommitOutcomeUnknown(error) : error;
  });
  return result;
}
