import type pg from 'pg';
import { KeyedTurns } from '../lib/keyed-turns.js';
import { connectOrUnavailable, statementFailure } from './errors.js';
import type { Departure } from '../http/client-gone.js';
import type { Statement, StatementRunner } from './reusable-statement.js';
import type { PipelinedConnections } from './pipelined-connections.js';
import { inOneWrite } from './socket-writes.js';

/**
 * The transactions of a user's writes (settings, navigation views, register): one writer per user
 * at a time, across instances and within one (spec §2.10 "Register consistency").
 *
 * - Within this process a user's transactions first wait their turn in memory, WITHOUT a pool
 *   connection: otherwise a burst of one user's writes would fill the pool with connections
 *   waiting for that user's lock, and every other request of the instance would time out (503).
 * - Then, on one connection (see TransactionSize), BEGIN, the user's advisory lock, the work's
 *   statements and COMMIT are written back to back: one round trip, however many statements. The
 *   lock is a statement of its own before the work: each statement of a READ COMMITTED
 *   transaction sees what was committed before it started, so the work sees everything the
 *   user's previous transaction (on any instance) committed.
 * - A statement that fails aborts the transaction: the statements after it fail too, and COMMIT
 *   becomes a rollback. Nothing of the work is then stored.
 * - When the client goes away (`departure`) before the turn comes, nothing is sent; while a large
 *   transaction's statements run, they are cancelled (pg_cancel_backend), so it rolls back and its
 *   connection is closed rather than reused.
 */

/** Names the advisory lock of a user's event-producing writes: pg_advisory_xact_lock(namespace, user id). */
export const USER_EVENT_LOCK_NAMESPACE = 7001;

const BEGIN: pg.QueryConfig = { name: 'user_transaction_begin', text: 'BEGIN' };
const LOCK_TEXT = 'SELECT pg_advisory_xact_lock($1, $2)';
const COMMIT: pg.QueryConfig = { name: 'user_transaction_commit', text: 'COMMIT' };
const ROLLBACK: pg.QueryConfig = { name: 'user_transaction_rollback', text: 'ROLLBACK' };

/** The request's client went away before its turn: nothing was sent. */
export class ClientGone extends Error {
  constructor() {
    super('the client went away');
    this.name = 'ClientGone';
  }
}

export interface UserTransactionOptions {
  pool: pg.Pool;
  /** The shared connections of small transactions. */
  writes: PipelinedConnections;
  /** Connections whose server went away (database.ts marks them): their failures are 503s. */
  failedClients: WeakSet<pg.PoolClient>;
  /** Where a cancel request goes (never the transaction's own connection). */
  cancelVia: StatementRunner;
  /** Called with the text of every statement once it has run (tests count round trips). */
  onStatement?: (text: string) => void;
}

/**
 * Where a transaction runs. `small`: on one of the shared write connections (DB_WRITE_CONNECTIONS),
 * where the small transactions of one turn of the event loop leave in one socket write, a system
 * call that cost as much as the rest of a small write's work; it holds up the transactions behind
 * it on that connection while it runs, so only short work goes there, and once sent it runs to its
 * end (a cancel could hit another transaction of the connection). `large`: on a pooled connection
 * of its own, cancelled if its client goes away.
 */
export type TransactionSize = 'small' | 'large';

type Issue<T> = (send: <R>(config: pg.QueryConfig) => Promise<R[]>) => { settled: Promise<unknown>[]; result: Promise<T> };

export class UserTransactions {
  private readonly turns = new KeyedTurns<number>();

  constructor(private readonly options: UserTransactionOptions) {}

  /** How many users have a transaction running or waiting in this process. */
  get activeUsers(): number {
    return this.turns.activeKeys;
  }

  /**
   * Runs `work` in the user's transaction. `work` must issue every statement through the runner
   * it is given before it awaits anything (they are sent with COMMIT right behind them); a
   * statement issued later is refused. Resolves to what `work` resolves to, once committed.
   */
  run<T>(userId: number, work: (tx: StatementRunner) => Promise<T>, departure?: Departure, size: TransactionSize = 'small'): Promise<T> {
    return this.turns.run(userId, () => {
      if (departure?.gone) return Promise.reject(new ClientGone());
      const issue = transactionOf(userId, work);
      return size === 'small' ? this.onSharedConnection(issue) : this.onOwnConnection(issue, departure);
    });
  }

  private async onSharedConnection<T>(issue: Issue<T>): Promise<T> {
    const { settled, result } = await this.options.writes.sequence(issue);
    return finish(settled, result);
  }

  private async onOwnConnection<T>(issue: Issue<T>, departure: Departure | undefined): Promise<T> {
    const { failedClients, onStatement } = this.options;
    const client = await connectOrUnavailable(this.options.pool);
    const send = <R>(config: pg.QueryConfig): Promise<R[]> =>
      client.query<R & pg.QueryResultRow>(config).then(
        (result) => {
          onStatement?.(config.text);
          return result.rows;
        },
        (error: unknown) => {
          onStatement?.(config.text);
          throw statementFailure(error, failedClients.has(client));
        },
      );
    let cancelled = false;
    const cancel = () => {
      cancelled = true;
      const pid = (client as { processID?: number }).processID;
      if (pid) this.options.cancelVia.run({ text: 'SELECT pg_cancel_backend($1)' }, [pid]).catch(() => undefined);
    };
    const stopListening = departure?.onGone(cancel);
    // The whole transaction leaves in one socket write.
    const { settled, result } = inOneWrite(client, () => issue(send));
    try {
      return await finish(settled, result);
    } finally {
      stopListening?.();
      // A cancelled or broken connection is closed (a cancel request may still be on its way to
      // it); after any other failure the transaction has rolled back and the connection serves again.
      client.release(cancelled || failedClients.has(client) ? true : undefined);
    }
  }
}

/**
 * Issues BEGIN, the user's lock, the work's statements and COMMIT (ROLLBACK when the work threw
 * while issuing), synchronously, through `send`.
 */
function transactionOf<T>(userId: number, work: (tx: StatementRunner) => Promise<T>): Issue<T> {
  return (send) => {
    let sealed = false;
    const settled: Promise<unknown>[] = [send(BEGIN), send({ name: 'user_transaction_lock', text: LOCK_TEXT, values: [USER_EVENT_LOCK_NAMESPACE, userId] })];
    const tx: StatementRunner = {
      run: <R>(statement: Statement, values: readonly unknown[]) => {
        if (sealed) return Promise.reject(new Error('a statement was issued after its transaction was sent (issue every statement before awaiting)'));
        // Awaited by finish whatever the work does with it: a work that gives up at its first
        // failure leaves the later statements' failures unobserved, which would end the process.
        const rows = send<R>({ ...statement, values: values as unknown[] });
        settled.push(rows);
        return rows;
      },
    };
    let result: Promise<T>;
    let threw = false;
    try {
      result = work(tx);
    } catch (error) {
      threw = true;
      result = Promise.reject(error as Error);
    }
    sealed = true;
    // A work that threw may have issued part of its statements: none of them is kept.
    settled.push(send(threw ? ROLLBACK : COMMIT));
    return { settled, result };
  };
}

/** Every statement settles before the connection goes on; the first failure is the answer. */
async function finish<T>(settled: Promise<unknown>[], result: Promise<T>): Promise<T> {
  const outcomes = await Promise.allSettled([...settled, result]);
  const failure = outcomes.find((outcome) => outcome.status === 'rejected');
  if (failure) throw (failure as PromiseRejectedResult).reason;
  return (outcomes.at(-1) as PromiseFulfilledResult<T>).value;
}
