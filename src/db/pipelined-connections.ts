import { performance } from 'node:perf_hooks';
import pg from 'pg';
import {
  closesConnection,
  CommitOutcomeUnknown,
  commitMayHaveHappened,
  DatabaseUnavailable,
  STATEMENT_NOT_PREPARED,
  statementFailure,
} from './errors.js';
import type { Statement, StatementRunner } from './reusable-statement.js';
import type { DatabaseObserver } from './observer.js';
import { batchWritesOfThisTurn } from './socket-writes.js';
import { sendTransaction, type TransactionProgress, transactionProgress, type TransactionStatement } from './pipelined-transaction.js';

/**
 * A few long-lived connections in pipeline mode, shared by many requests: short single statements
 * (authentication with its rate-limit upserts, one user by id, the cancels of pooled transactions)
 * and small write transactions (transactions.ts). Through the pool each statement would check
 * a connection out for a round trip, costing more CPU than the statement; here node-postgres writes
 * statements back to back (each with its own Sync: one failing fails alone) and PostgreSQL answers
 * in order (bench/RESULTS.md, "Pipelined connections"). Never a session setting or long work: it
 * would hold up everything behind it on its connection (statement_timeout bounds that). A lost
 * connection fails its statements in flight with DatabaseUnavailable (a 503); the next statement opens another.
 */

export interface PipelinedConnectionsOptions {
  /** Which connections these are, for the metrics (default short_statements). */
  kind?: 'short_statements' | 'writes';
  /** Where statements, failures and connections are reported (the metrics; default: nowhere). */
  observer?: DatabaseObserver;
  connectionString: string;
  connections: number;
  connectTimeoutMs: number;
  /** Server-side statement_timeout of these connections (0: none). */
  statementTimeoutMs: number;
  keepAliveInitialDelayMs: number;
  types: pg.CustomTypesConfig;
  /** Errors of connections that had no statement in flight (e.g. the server went away). */
  onIdleError?: (error: Error) => void;
  /** Called with the text of every statement once it has run (tests count round trips). */
  onStatement?: (text: string) => void;
}

interface Lane {
  client: pg.Client;
  /** Resolved once connected; statements wait for it only while it is pending. */
  ready: Promise<void>;
  connected: boolean;
  /** Set once the connection failed or was retired: what still fails on it is the connection's fault. */
  failed: boolean;
  inFlight: number;
  /** Takes the connection out of use and closes it; the next statement opens another. */
  retire(): void;
}

/**
 * Errors after which a connection's prepared statements cannot serve again: a schema change under a
 * prepared plan ("cached plan must not change result type") and node-postgres's record of named
 * statements out of step with the session (26000, errors.ts). A new connection prepares afresh.
 */
const STALE_PREPARED_STATEMENT_CODES = new Set(['0A000', STATEMENT_NOT_PREPARED, '42P05']);

/**
 * Whether the connection must not serve again after `error`: its prepared statements are stale,
 * its session ended, or its server takes no writes any more (errors.ts, closesConnection).
 */
const retiresConnection = (error: unknown): boolean =>
  STALE_PREPARED_STATEMENT_CODES.has((error as { code?: string }).code ?? '') || closesConnection(error);

const closedError = () => new DatabaseUnavailable('the database connections are closed');

export class PipelinedConnections implements StatementRunner {
  private readonly lanes: (Lane | undefined)[];
  private closed = false;
  /** Where statements, failures and connections are reported (commit groups report theirs there too). */
  readonly observer: DatabaseObserver;
  private readonly kind: 'short_statements' | 'writes';
  readonly connections: number;

  constructor(private readonly options: PipelinedConnectionsOptions) {
    this.lanes = new Array<Lane | undefined>(options.connections).fill(undefined);
    this.connections = options.connections;
    this.observer = options.observer ?? {};
    this.kind = options.kind ?? 'short_statements';
  }

  /** Runs one statement (by name when it has one: a prepared statement) and resolves to its rows. */
  run<R>(statement: Statement, values: readonly unknown[]): Promise<R[]> {
    if (this.closed) return Promise.reject(closedError());
    const lane = this.leastBusyLane();
    const config: pg.QueryConfig = { ...statement, values: values as unknown[] };
    if (lane.connected) return this.send<R>(lane, config);
    lane.inFlight++; // counts while it waits for the connection too
    return lane.ready.then(
      () => {
        lane.inFlight--;
        return this.send<R>(lane, config);
      },
      (error: unknown) => {
        lane.inFlight--;
        throw error;
      },
    );
  }

  /**
   * Runs `statements` as one transaction in one burst on one connection (pipelined-transaction.ts);
   * resolves to each statement's rows once committed. After a failure, `progress` tells how far it got.
   */
  async transaction(statements: readonly TransactionStatement[], progress = transactionProgress()): Promise<unknown[][]> {
    try {
      return await this.transactionOnce(statements, progress);
    } catch (error) {
      // 26000 (errors.ts): nothing was kept and that connection is retired; once more, on another,
      // so that its client never sees a failure that was not its own.
      if ((error as { code?: string }).code !== STATEMENT_NOT_PREPARED) throw error;
      Object.assign(progress, transactionProgress());
      return this.transactionOnce(statements, progress);
    }
  }

  private async transactionOnce(statements: readonly TransactionStatement[], progress: TransactionProgress): Promise<unknown[][]> {
    if (this.closed) throw closedError();
    const lane = this.leastBusyLane();
    if (!lane.connected) {
      lane.inFlight++;
      try {
        await lane.ready;
      } finally {
        lane.inFlight--;
      }
    }
    if (lane.failed) throw new DatabaseUnavailable('database connection lost');
    lane.inFlight++;
    try {
      return await sendTransaction(lane.client, statements, progress, this.options.onStatement);
    } catch (error) {
      const failure = statementFailure(error, lane.failed, this.observer);
      if (progress.unsendable || retiresConnection(error)) lane.retire();
      if (commitMayHaveHappened(failure, progress.completed, statements.length)) throw new CommitOutcomeUnknown(failure);
      throw failure;
    } finally {
      lane.inFlight--;
    }
  }

  /** Sends on a connected lane; its writes of this turn of the event loop leave together. */
  private send<R>(lane: Lane, config: pg.QueryConfig): Promise<R[]> {
    lane.inFlight++;
    batchWritesOfThisTurn(lane.client);
    const { onStatement } = this.options;
    const { observer } = this;
    const timed = observer.statementDone;
    const sentAt = timed ? performance.now() : 0;
    const done = () => {
      lane.inFlight--;
      onStatement?.(config.text);
      timed?.(config.name, config.text, (performance.now() - sentAt) / 1000);
    };
    return lane.client.query<R & pg.QueryResultRow>(config).then(
      (result) => {
        done();
        return result.rows;
      },
      (error: unknown) => {
        done();
        if (retiresConnection(error)) lane.retire();
        throw statementFailure(error, lane.failed, observer);
      },
    );
  }

  /** Statements in flight on each connection slot, 0 where none is open (read by the metrics). */
  inFlightByLane(): number[] {
    return this.lanes.map((lane) => lane?.inFlight ?? 0);
  }

  /** Closes every connection; statements already sent are answered first. */
  async end(): Promise<void> {
    this.closed = true;
    const lanes = this.lanes.splice(0).filter((lane) => lane !== undefined);
    await Promise.all(lanes.map((lane) => lane.ready.then(() => lane.client.end()).catch(() => undefined)));
  }

  /** The connection with the fewest statements in flight; an empty slot opens a new one. */
  private leastBusyLane(): Lane {
    let best: Lane | undefined;
    for (let slot = 0; slot < this.lanes.length; slot++) {
      const lane = this.lanes[slot] ?? this.open(slot);
      if (lane.inFlight === 0) return lane;
      if (!best || lane.inFlight < best.inFlight) best = lane;
    }
    return best!;
  }

  private open(slot: number): Lane {
    const { connectionString, connectTimeoutMs, statementTimeoutMs, keepAliveInitialDelayMs, types } = this.options;
    const client = new pg.Client({
      connectionString,
      connectionTimeoutMillis: connectTimeoutMs,
      keepAlive: true,
      keepAliveInitialDelayMillis: keepAliveInitialDelayMs,
      ...(statementTimeoutMs > 0 && { statement_timeout: statementTimeoutMs }),
      types,
      pipeline: true,
    });
    const forget = () => {
      if (this.lanes[slot] === lane) this.lanes[slot] = undefined;
    };
    const lane: Lane = {
      client,
      ready: Promise.resolve(),
      connected: false,
      failed: false,
      inFlight: 0,
      retire: () => {
        lane.failed = true;
        forget();
        // Closes the socket (pg leaves it open after some errors); statements still in flight on
        // a healthy connection are answered first.
        client.end().catch(() => undefined);
      },
    };
    lane.ready = client.connect().then(
      () => {
        lane.connected = true;
        this.observer.connectionOpened?.(this.kind);
      },
      (error: unknown) => {
        lane.retire();
        throw new DatabaseUnavailable('could not connect to the database', { cause: error });
      },
    );
    lane.ready.catch(() => undefined); // observed by the statements waiting on it
    // Without an error listener a dropped idle connection would crash the process. A lost
    // connection may emit several errors (the server's reason, then the disconnect): counted once,
    // also when a statement's error already retired the lane; reported when none was in flight.
    let lost = false;
    client.on('error', (error) => {
      if (!lost) this.observer.connectionLost?.(this.kind);
      lost = true;
      lane.failed = true;
      if (this.lanes[slot] !== lane) return;
      lane.retire();
      if (lane.inFlight === 0) this.options.onIdleError?.(new DatabaseUnavailable('idle pipelined connection lost', { cause: error }));
    });
    client.on('end', forget);
    this.lanes[slot] = lane;
    return lane;
  }
}
