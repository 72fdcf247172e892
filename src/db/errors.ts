import pg from 'pg';
import type { DatabaseObserver } from './observer.js';

/**
 * The database cannot serve this statement now: no connection could be made, or the one the
 * statement used was lost. Raised where connections are handled (the pool wrapper in
 * database.ts, the pipelined reads), from the error pg gave, which is kept as `cause`; answered
 * with 503 (spec §1.9).
 */
export class DatabaseUnavailable extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'DatabaseUnavailable';
  }
}

/**
 * SQLSTATEs that mean "not now" rather than "wrong statement": admin and crash shutdown, cannot
 * connect now, too many connections, and a statement cancelled by statement_timeout or by a
 * request whose client went away (57014). Class 08 (connection exceptions) is added below.
 */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', '57014']);

/** Whether an error means "the database cannot be reached right now" (answered with 503). */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (error instanceof DatabaseUnavailable) return true;
  if (!(error instanceof pg.DatabaseError)) return false;
  const code = error.code ?? '';
  return UNAVAILABLE_SQLSTATES.has(code) || code.startsWith('08');
}

/** SQLSTATE of refuse_write (migration 0006): a write's own check failed; the transaction rolled back. */
const WRITE_REFUSED = 'ZU001';

/** The reason and detail a write statement refused with, if `error` is such a refusal. */
export function writeRefusal(error: unknown): { reason: string; detail: string } | undefined {
  if (!(error instanceof pg.DatabaseError) || error.code !== WRITE_REFUSED) return undefined;
  return { reason: error.message, detail: error.detail ?? '' };
}

/** SQLSTATE of user_lock_now (migration 0007): the user's lock is held by another transaction; this one rolled back. */
const USER_LOCK_REFUSED = 'ZU002';

/** Whether `error` is user_lock_now's refusal (src/db/user-transactions.ts sends the write again, where it may wait). */
export function isUserLockRefusal(error: unknown): boolean {
  return error instanceof pg.DatabaseError && error.code === USER_LOCK_REFUSED;
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
 * A statement failed on `client`: a server error (pg.DatabaseError) is the statement's own; any
 * other failure on a connection that has since failed (pg emitted 'error' on it, see `broken`)
 * is the connection's, and becomes DatabaseUnavailable. Anything else (a programming error in the
 * values, say) is passed on as it is. Server errors are reported to `observer` (the metrics).
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
