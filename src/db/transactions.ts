import type pg from 'pg';
import { KeyedQueue, type QueueMode } from '../lib/keyed-queue.js';
import {
  closesConnection,
  CommitOutcomeUnknown,
  commitMayHaveHappened,
  connectOrUnavailable,
  isUserLockRefusal,
  statementFailure,
} from './errors.js';
import type { Departure } from '../lib/departure.js';
import type { BoundStatement, Statement, StatementRunner } from './reusable-statement.js';
import type { PipelinedConnections } from './pipelined-connections.js';
import { CommitGroups } from './commit-groups.js';
import { interactiveTransaction, sendTransaction, transactionProgress, type TransactionStatement } from './pipelined-transaction.js';

/**
 * Every transaction of the server (the one write API). A user's writes (settings, navigation views,
 * register) run one writer per user at a time, across instances and within one (docs/api.md §2.10
 * "Register consistency"); `interactive` and `onOwnConnection` run the others (heartbeats, the admin
 * command line).
 *
 * - A user's transactions first wait in the user's queue in memory, WITHOUT a pool connection: a
 *   burst of one user's writes would otherwise fill the pool with connections waiting for that
 *   user's lock, and every other request of the instance would time out (503).
 * - A transaction is data (BoundStatements, all known before it is sent; runInteractive is for
 *   writes that must read first). `BEGIN`, the user's advisory lock, the statements and `COMMIT`
 *   leave in one burst (pipelined-transaction.ts): one round trip, one commit. The lock is a
 *   statement of its own so that each later statement's snapshot (READ COMMITTED) sees what the
 *   user's previous transaction, on any instance, committed. A failing statement rolls all back.
 * - The small transactions gathered together, each another user's, commit together (commit-groups.ts).
 *   There a transaction never waits for its lock (it would hold up its group and its connection
 *   while another instance's large one holds it): user_lock_now (migration 0007) refuses at once
 *   (ZU002), the group goes again without it, and it is sent once more on a pooled connection of
 *   its own with the waiting lock, as a large one (past the statement timeout: 57014, a 503; not
 *   sent if its client has gone). Its client sees only that second answer; both attempts happen
 *   while it holds the user's queue.
 * - A client gone (`departure`) before its turn: nothing is sent; during a large transaction: its
 *   statements are cancelled (pg_cancel_backend), and its connection is closed rather than reused.
 */

/** Names the advisory lock of a user's event-producing writes: pg_advisory_xact_lock(namespace, user id). */
export const USER_EVENT_LOCK_NAMESPACE = 7001;

/**
 * Names the advisory lock of an organization's channel memberships (realm id). A membership change
 * sends events to many users (peer_add to every member, say), and register's initial state must
 * agree with each of their queues: rather than every recipient's user lock (thousands, in an order
 * that could deadlock), a change holds this lock exclusively and register holds it shared, each
 * after its own user lock (the same order everywhere: no deadlock).
 */
export const REALM_MEMBERSHIP_LOCK_NAMESPACE = 7002;
export const REALM_MEMBERSHIP_LOCK = { name: 'realm_membership_lock', text: 'SELECT pg_advisory_xact_lock($1, $2)' };
export const REALM_MEMBERSHIP_LOCK_SHARED = { name: 'realm_membership_lock_shared', text: 'SELECT pg_advisory_xact_lock_shared($1, $2)' };

/**
 * The organization's queue in memory, waited in (like the user's) without a connection: else a
 * burst of one organization's subscribes, or registers behind one, would hold pool connections
 * waiting for the lock, and other organizations would get 503s. The lock is still taken (across
 * instances). Order: user's queue, organization's queue, then on the connection the user's lock,
 * the organization's: no one waits in memory holding a PostgreSQL lock. Its holders wait for the
 * lock, so they are large or interactive transactions, never small ones.
 */
export interface RealmQueue {
  realmId: number;
  /** 'exclusive' with REALM_MEMBERSHIP_LOCK, 'shared' with REALM_MEMBERSHIP_LOCK_SHARED. */
  mode: QueueMode;
}

const LOCK = { name: 'user_transaction_lock', text: 'SELECT pg_advisory_xact_lock($1, $2)' };
/** The lock of a small transaction, on a shared connection: refused at once (ZU002) rather than waited for. */
const LOCK_NOW = { name: 'user_transaction_lock_now', text: 'SELECT user_lock_now($1, $2)' };

/** The request's client went away while it waited in its queue: nothing was sent. */
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
 * Where a transaction runs. `small`: on a shared write connection (DB_WRITE_CONNECTIONS), in its
 * turn's commit group; it holds up those behind it there, so only short work goes there, never
 * waiting for its lock, and once sent it runs to its end (a cancel could hit another transaction).
 * `large`: on a pooled connection of its own, cancelled if its client goes away.
 */
export type TransactionSize = 'small' | 'large';

/** The statements of a transaction (Transactions.run); undefined ones are left out. */
export type TransactionStatements = readonly (BoundStatement<unknown> | undefined)[];

/** A statement's rows, or undefined for a statement left out. */
type RowsOf<S> = S extends BoundStatement<infer Row> ? Row[] : undefined;

/** What a transaction's statements resolve to: each one's rows, in order. */
export type TransactionRows<S extends TransactionStatements> = { -readonly [K in keyof S]: RowsOf<S[K]> };

/** At most this many statements in one commit group (commit-groups.ts): 32 one-statement writes. */
const MAX_GROUP_STATEMENTS = 64;

export class Transactions {
  private readonly users = new KeyedQueue<number>();
  private readonly realms = new KeyedQueue<number>();
  private readonly groups: CommitGroups;

  /** Its pool and write connections (the metrics read their counts, and the observer of the writes). */
  constructor(readonly options: UserTransactionOptions) {
    this.groups = new CommitGroups(options.writes, MAX_GROUP_STATEMENTS);
  }

  /** How many users have a transaction running or waiting in this process. */
  get activeUsers(): number {
    return this.users.activeKeys;
  }

  /** How many organizations have a membership-lock holder running or waiting in this process. */
  get activeRealms(): number {
    return this.realms.activeKeys;
  }

  /** The user's queue, then (when the work takes the organization's membership lock) the organization's. */
  private inQueues<T>(userId: number, realm: RealmQueue | undefined, work: () => Promise<T>): Promise<T> {
    return this.users.run(userId, realm ? () => this.realms.run(realm.realmId, work, realm.mode) : work);
  }

  /**
   * Runs `statements` in the user's transaction, behind the user's lock (prepended), and resolves
   * once committed to their rows: a tuple typed by each statement; one left out (undefined) is not
   * sent and resolves to undefined. `realm`: when the statements take its membership lock.
   */
  run<const S extends TransactionStatements>(
    userId: number,
    statements: S,
    departure?: Departure,
    size: TransactionSize = 'small',
    realm?: RealmQueue,
  ): Promise<TransactionRows<S>> {
    return this.inQueues(userId, realm, async () => {
      if (departure?.gone) throw new ClientGone();
      const sent: TransactionStatement[] = [{ ...(size === 'small' ? LOCK_NOW : LOCK), values: [USER_EVENT_LOCK_NAMESPACE, userId] }];
      for (const statement of statements) if (statement) sent.push(statement);
      const rows =
        sent.length === 1 ? [] : await (size === 'small' ? this.small(userId, sent, departure) : this.onOwnConnection(sent, departure));
      let next = 1;
      return statements.map((statement) => (statement ? (rows[next++] ?? []) : undefined)) as TransactionRows<S>;
    });
  }

  /**
   * Runs `work` in the user's transaction on a pooled connection of its own, where `work` may read
   * before it writes (subscribing other users). Queued as run() is, then interactive() with the
   * user's lock (waited for) as its opening. `realm`: when `work` takes its membership lock.
   */
  runInteractive<T>(userId: number, work: (tx: StatementRunner) => Promise<T>, departure?: Departure, realm?: RealmQueue): Promise<T> {
    return this.inQueues(userId, realm, () =>
      this.interactive(work, [{ ...LOCK, values: [USER_EVENT_LOCK_NAMESPACE, userId] }], departure),
    );
  }

  /**
   * Runs `work` in a transaction on a pooled connection of its own, in no user's queue (the admin
   * command line's writes): interactiveTransaction, rolled back on failure, cancelled if its client
   * goes away. BEGIN and COMMIT count in `onStatement` too.
   */
  async interactive<T>(
    work: (tx: StatementRunner) => Promise<T>,
    opening: readonly TransactionStatement[] = [],
    departure?: Departure,
  ): Promise<T> {
    if (departure?.gone) throw new ClientGone();
    const { failedClients, onStatement } = this.options;
    const own = await this.ownConnection(departure);
    const { client } = own;
    const query = async <R>(statement: Statement, values: readonly unknown[]): Promise<R[]> => {
      try {
        const result = await client.query<R & pg.QueryResultRow>({ ...statement, values: values as unknown[] });
        return result.rows;
      } catch (error) {
        // Its session ended, or its server turned read-only: closed below, not used again.
        if (closesConnection(error)) failedClients.add(client);
        throw statementFailure(error, failedClients.has(client), this.options.writes.observer);
      } finally {
        onStatement?.(statement.text);
      }
    };
    try {
      return await interactiveTransaction(query, opening, work);
    } catch (error) {
      // Rolled back unless its connection is going (a ROLLBACK after a failed COMMIT only warns).
      if (!own.cancelled && !failedClients.has(client))
        await client.query('ROLLBACK').then(
          () => undefined,
          () => (own.cancelled = true),
        );
      throw error;
    } finally {
      own.stopListening?.();
      // A cancelled or broken connection is closed (a cancel request may still be on its way to it).
      client.release(own.cancelled || failedClients.has(client) ? true : undefined);
    }
  }

  /** In a commit group; when the user's lock is held elsewhere, again on a connection of its own, where it waits for it. */
  private async small(userId: number, statements: readonly TransactionStatement[], departure: Departure | undefined): Promise<unknown[][]> {
    try {
      return await this.groups.commit(userId, statements);
    } catch (error) {
      if (!isUserLockRefusal(error)) throw error;
      // Refused: its transaction rolled back, nothing of it was kept.
      if (departure?.gone) throw new ClientGone();
      const [lock, ...rest] = statements;
      return this.onOwnConnection([{ ...LOCK, values: lock!.values }, ...rest], departure);
    }
  }

  /**
   * Sends `statements` as one transaction in one burst on a pooled connection of its own, where it
   * may wait for locks. No user's queue or lock (run() adds them; the long polls' heartbeats have none).
   */
  async onOwnConnection(statements: readonly TransactionStatement[], departure?: Departure): Promise<unknown[][]> {
    const { failedClients, onStatement } = this.options;
    const own = await this.ownConnection(departure);
    const { client } = own;
    const progress = transactionProgress();
    try {
      return await sendTransaction(client, statements, progress, onStatement);
    } catch (error) {
      // Its session ended, or its server turned read-only: the connection is closed below, the next one reaches the primary.
      if (closesConnection(error)) failedClients.add(client);
      const failure = statementFailure(error, failedClients.has(client), this.options.writes.observer);
      if (commitMayHaveHappened(failure, progress.completed, statements.length)) throw new CommitOutcomeUnknown(failure);
      throw failure;
    } finally {
      own.stopListening?.();
      // Closed when cancelled or broken (a cancel request may still be on its way) or its prepared
      // statements are out of step (unsendable); after any other failure it rolled back and serves on.
      client.release(own.cancelled || progress.unsendable || failedClients.has(client) ? true : undefined);
    }
  }

  /** A pooled connection of its own; what it runs is cancelled (through another connection) if the client goes away. */
  private async ownConnection(departure: Departure | undefined) {
    const client = await connectOrUnavailable(this.options.pool);
    const own = { client, cancelled: false, stopListening: undefined as (() => void) | undefined };
    own.stopListening = departure?.onGone(() => {
      own.cancelled = true;
      const pid = (client as { processID?: number }).processID;
      if (pid) this.options.cancelVia.run({ text: 'SELECT pg_cancel_backend($1)' }, [pid]).catch(() => undefined);
    });
    return own;
  }
}
