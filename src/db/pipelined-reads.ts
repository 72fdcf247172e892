import pg from 'pg';

/**
 * A few long-lived connections in pipeline mode for the per-request single-statement reads
 * (authentication, one user by id: the statements reusableQuery sends outside transactions).
 *
 * Through the pool, every such read checks a connection out, waits a full round trip with it and
 * hands it back; on a busy server the check-out, the idle timers and one socket write and wake-up
 * per statement on both sides cost more CPU than the statement itself. Here statements from many
 * requests share a connection without waiting for each other's answers: node-postgres writes them
 * back to back (each with its own Sync, so one failing statement fails alone) and PostgreSQL
 * answers them in order. Measured on the benchmark's lookup at 50 concurrent callers: about half
 * the CPU per statement on each side and twice the throughput of the pool (bench/RESULTS.md).
 *
 * What may go here: short reads by unique key, never a transaction, a lock, a session setting or a
 * long statement (it would hold up every statement queued behind it on its connection).
 *
 * Connections open on first use and are replaced after an error or a disconnect: the statements
 * in flight on a lost connection fail with its error (a 503, as the pool's would), the next ones
 * open a new connection.
 */

export interface PipelinedReadsOptions {
  connectionString: string;
  connections: number;
  connectTimeoutMs: number;
  types: pg.CustomTypesConfig;
  /** Errors of connections that had no statement in flight (e.g. the server went away). */
  onIdleError?: (error: Error) => void;
}

interface Lane {
  client: pg.Client;
  /** Resolved once connected; statements wait for it only while it is pending. */
  ready: Promise<void>;
  connected: boolean;
  inFlight: number;
  /** Takes the connection out of use and closes it; the next statement opens another. */
  retire(): void;
}

/** What the pool says once ended (src/http/db-errors.ts answers both with 503). */
const READS_CLOSED_MESSAGE = 'Cannot use a pool after calling end';

/**
 * Errors after which a connection's prepared statements cannot serve again: a schema change under a
 * prepared plan ("cached plan must not change result type") and node-postgres's bookkeeping of
 * named statements out of step with the session (after a failed Parse). A new connection prepares
 * afresh.
 */
const STALE_PREPARED_STATEMENT_CODES = new Set(['0A000', '26000', '42P05']);

export class PipelinedReads {
  private readonly lanes: (Lane | undefined)[];
  private closed = false;

  constructor(private readonly options: PipelinedReadsOptions) {
    this.lanes = new Array<Lane | undefined>(options.connections).fill(undefined);
  }

  /** Runs one statement (by name when `name` is given: a prepared statement) and resolves to its rows. */
  query<R>(name: string | undefined, text: string, values: unknown[]): Promise<R[]> {
    if (this.closed) return Promise.reject(new Error(READS_CLOSED_MESSAGE));
    const lane = this.leastBusyLane();
    const config: pg.QueryConfig = name === undefined ? { text, values } : { name, text, values };
    lane.inFlight++;
    const send = () => lane.client.query<R & pg.QueryResultRow>(config);
    const sent = lane.connected ? send() : lane.ready.then(send);
    return sent.then(
      (result) => {
        lane.inFlight--;
        return result.rows;
      },
      (error: unknown) => {
        lane.inFlight--;
        if (STALE_PREPARED_STATEMENT_CODES.has((error as { code?: string }).code ?? '')) lane.retire();
        throw error;
      },
    );
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
    const { connectionString, connectTimeoutMs, types } = this.options;
    const client = new pg.Client({ connectionString, connectionTimeoutMillis: connectTimeoutMs, keepAlive: true, types, pipeline: true });
    const forget = () => {
      if (this.lanes[slot] === lane) this.lanes[slot] = undefined;
    };
    const lane: Lane = {
      client,
      ready: Promise.resolve(),
      connected: false,
      inFlight: 0,
      retire: () => {
        forget();
        // Closes the socket (pg leaves it open after some errors); statements still in flight on
        // a healthy connection are answered first.
        client.end().catch(() => undefined);
      },
    };
    lane.ready = client.connect().then(
      () => {
        lane.connected = true;
      },
      (error: Error) => {
        lane.retire();
        // pg's own connect timeout says only "timeout expired"; the pool says this (a 503).
        throw error.message === 'timeout expired' ? new Error('Connection terminated due to connection timeout', { cause: error }) : error;
      },
    );
    lane.ready.catch(() => undefined); // observed by the statements waiting on it
    // Without an error listener a dropped idle connection would crash the process.
    // A lost connection may emit several errors (the server's reason, then the disconnect): the
    // first retires it and is reported when no statement was in flight to carry it.
    client.on('error', (error) => {
      if (this.lanes[slot] !== lane) return;
      lane.retire();
      if (lane.inFlight === 0) this.options.onIdleError?.(error);
    });
    client.on('end', forget);
    this.lanes[slot] = lane;
    return lane;
  }
}
