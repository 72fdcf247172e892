import pg from 'pg';
import type { DatabaseObserver } from './observer.js';

/**
 * The database cannot serve this statement now: no connection could be made, or the one the
 * statement used was lost (pg's error is the `cause`). Answered with 503 (docs/api.md §1.9).
 */
export class DatabaseUnavailable extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'DatabaseUnavailable';
  }
}

/**
 * The connection was lost during a transaction's commit: whether it happened is unknown (a failover
 * under way, say). Answered with 504, which the balancer never replays (deploy/haproxy.cfg), unlike
 * a 503, answered only when nothing was committed.
 */
export class CommitOutcomeUnknown extends DatabaseUnavailable {
  constructor(cause: unknown) {
    super('the database connection was lost during the commit: it may or may not have happened', { cause });
    this.name = 'CommitOutcomeUnknown';
  }
}

/** SQLSTATE read_only_sql_transaction: the server became (or is) a standby, a demoted primary say. */
const READ_ONLY = '25006';

/**
 * SQLSTATE invalid_sql_statement_name: on a pipelined connection pg skips the Parse of a statement
 * another query in flight has already sent; when that query fails first, the second finds no
 * statement. Nothing of its transaction was kept; it is sent once more on another connection
 * (pipelined-connections.ts), and answers 503, not 500, only when that fails too.
 */
export const STATEMENT_NOT_PREPARED = '26000';

/**
 * SQLSTATEs that mean "not now" rather than "wrong statement": shutdowns, cannot connect now, too
 * many connections, a statement cancelled (57014: statement_timeout, or its client went away), a
 * server turned read-only (25006), a statement pg believed prepared (26000); and class 08 below.
 */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', '57014', READ_ONLY, STATEMENT_NOT_PREPARED]);

/** Whether an error means "the database cannot be reached right now" (answered with 503). */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (error instanceof DatabaseUnavailable) return true;
  if (!(error instanceof pg.DatabaseError)) return false;
  const code = error.code ?? '';
  return UNAVAILABLE_SQLSTATES.has(code) || code.startsWith('08');
}

/** SQLSTATEs after which the session is over (shutdown, database dropped, idle timeout); class 08 is added below. */
const SESSION_ENDED = new Set(['57P01', '57P02', '57P03', '57P04', '57P05']);

/** Whether the server reported that it ended the session (the socket may close a moment later). */
export function endsSession(error: unknown): boolean {
  const code = error instanceof pg.DatabaseError ? (error.code ?? '') : undefined;
  return code !== undefined && (SESSION_ENDED.has(code) || code.startsWith('08'));
}

/**
 * Whether the connection that failed with `error` must be closed at once: the server ended its
 * session (a statement sent while the socket stays open a moment would be lost with no word), or
 * takes no writes (25006: a demoted primary), where every later write would fail alike; the next
 * connection reaches the current primary through the address that follows it (Patroni's HAProxy).
 */
export function closesConnection(error: unknown): boolean {
  return endsSession(error) || (error instanceof pg.DatabaseError && error.code === READ_ONLY);
}

/**
 * Whether a transaction sent whole (pipelined-transaction.ts) that failed with `error` may have
 * committed: the connection was lost with no word from the server, or the server ended the session
 * after all `statements` had completed (during the commit). Any other failure rolled it back.
 */
export function commitMayHaveHappened(error: unknown, completed: number, statements: number): boolean {
  if (error instanceof pg.DatabaseError) return completed >= statements && isDatabaseUnavailable(error);
  return isDatabaseUnavailable(error);
}

/** The reason and detail of refuse_write's refusal (ZU001, migration 0006: a write's own check failed; it rolled back). */
export function writeRefusal(error: unknown): { reason: string; detail: string } | undefined {
  if (!(error instanceof pg.DatabaseError) || error.code !== 'ZU001') return undefined;
  return { reason: error.message, detail: error.detail ?? '' };
}

/**
 * Whether a value sent with a statement may be what failed it: SQLSTATE classes 22 and 23 (data,
 * constraints), or no SQLSTATE at all (the driver refused a value); never an unreachable database.
 */
export function valueMayCause(error: unknown): boolean {
  if (isDatabaseUnavailable(error)) return false;
  if (!(error instanceof pg.DatabaseError)) return true;
  const code = error.code ?? '';
  return code.startsWith('22') || code.startsWith('23');
}

/** Whether `error` is user_lock_now's refusal (ZU002, migration 0007: the user's lock is held elsewhere; it rolled back). */
export function isUserLockRefusal(error: unknown): boolean {
  return error instanceof pg.DatabaseError && error.code === 'ZU002';
}

/** A connection from the pool, or DatabaseUnavailable when none can be had (refused, timed out, pool ended). */
export async function connectOrUnavailable(pool: pg.Pool): Promise<pg.PoolClient> {
  try {
    return await pool.connect();
  } catch (error) {
    throw new DatabaseUnavailable('could not get a database connection', { cause: error });
  }
}

/**
 * A statement's failure: a server error is the statement's own (reported to `observer`); any other
 * on a connection that has failed is the connection's (DatabaseUnavailable); anything else (a
 * programming error in the values, say) is passed on as it is.
 */
export function statementFailure(error: unknown, connectionFailed: boolean, observer?: DatabaseObserver): unknown {
  if (error instanceof pg.DatabaseError) {
    observer?.statementFailed?.(error);
    return error;
  }
  if (error instanceof DatabaseUnavailable) return error;
  if (!connectionFailed) return error;
  return new DatabaseUnavailable('database connection lost', { cause: error });
}
