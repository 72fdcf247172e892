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
 * The transactions of a user's writes (settings, navigation views, register): one writer per user
 * at a time, across instances and within one (docs/api.md §2.10 "Register consistency").
 *
 * - Within this process a user's transactions first wait in the user's queue in memory, WITHOUT a pool
 *   connection: otherwise a burst of one user's writes would fill the pool with connections
 *   waiting for that user's lock, and every other request of the instance would time out (503).
 * - A transaction is data: the statements with their values (BoundStatement), known before it is
 *   sent, resolving to a tuple of their rows typed by each statement; none can be issued after
 *   another's rows arrive (runInteractive, a BEGIN … COMMIT of its own, is for writes that must).
 * - Then, on one connection (see TransactionSize), `BEGIN`, the user's advisory lock, the
 *   transaction's statements and `COMMIT` are sent in one burst (pipelined-transaction.ts): one
 *   round trip and one commit, however many statements. The lock is a statement of its own before
 *   the others: each statement takes its snapshot when it starts (READ COMMITTED), so the
 *   statements see everything the user's previous transaction (on any instance) committed.
 * - A statement that fails rolls the whole transaction back, and the statements after it are not
 *   run. Nothing of the transaction is then stored.
 * - The small transactions of one turn, each another user's, commit together (commit-groups.ts):
 *   one WAL flush for all of them, each with its own outcome.
 * - A small transaction never waits for its lock on a shared write connection: there it would hold
 *   up every transaction of its group and every one queued behind it on that connection, for as
 *   long as another instance's transaction of the same user (a large one: up to the statement
 *   timeout) keeps the lock. It takes the lock with user_lock_now (migration 0007), which refuses
 *   at once (SQLSTATE ZU002) when the lock is held: its transaction (its group) rolls back,
 *   nothing of it is kept, and the others of the group are sent again without it. It is then sent
 *   once more, on a pooled connection of its own with the waiting lock, exactly as a large one:
 *   it waits there for the lock within the pool's statement timeout (past it: 57014, a 503), is
 *   cancelled if its client goes away, and is not sent at all if the client has already gone.
 *   Its client sees one answer, that of the second attempt; the refusal is never shown. Both the
 *   refusal and the retry happen while the transaction holds the user's queue, so the user's next write still waits.
 * - When the client goes away (`departure`) before its queue lets it through, nothing is sent; while a large
 *   transaction's statements run, they are cancelled (pg_cancel_backend), so it rolls back and its
 *   connection is closed rather than reused.
 */

/** Names the advisory lock of a user's event-producing writes: pg_advisory_xact_lock(namespace, user id). */
export const USER_EVENT_LOCK_NAMESPACE = 7001;

/**
 * Names the advisory lock of an organization's channel memberships:
 * pg_advisory_xact_lock(namespace, realm id). A change of who is subscribed where (subscribe,
 * unsubscribe) sends events to many users (peer_add to every member of the organization, say),
 * and register's initial state must agree with each of their queues. Rather than every
 * recipient's user lock (thousands, in an unknown order that could deadlock), the change holds
 * this lock exclusively, taken after its caller's user lock, and register holds it shared after
 * its own user lock: registers never wait for each other, and a register and a membership change
 * of the same organization are serialized (the order user lock → organization lock is the same
 * everywhere, so they cannot deadlock).
 */
export const REALM_MEMBERSHIP_LOCK_NAMESPACE = 7002;
export const REALM_MEMBERSHIP_LOCK = { name: 'realm_membership_lock', text: 'SELECT pg_advisory_xact_lock($1, $2)' };
export const REALM_MEMBERSHIP_LOCK_SHARED = { name: 'realm_membership_lock_shared', text: 'SELECT pg_advisory_xact_lock_shared($1, $2)' };

/**
 * Within this process the holders of an organization's membership lock first wait in its queue in
 * memory (RealmQueue), without a connection: a burst of subscribes of one organization, or
 * registers behind one, would otherwise each hold a pool connection while PostgreSQL makes them
 * wait for the lock, and other organizations' requests would get 503s. The lock is still taken (it
 * serializes across instances), so at most one exclusive holder per organization and instance
 * waits for it on a connection. The order is: the user's queue, the organization's queue (both in
 * memory, before a connection), then on the connection the user's lock, the organization's
 * lock. No one waits in memory while holding a lock of PostgreSQL, and the locks are taken in the
 * same order everywhere, so they cannot deadlock. The lock is waited for, so its holders are large
 * or interactive transactions, never small ones (which would wait on a shared write connection).
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
 * Where a transaction runs. `small`: on one of the shared write connections (DB_WRITE_CONNECTIONS),
 * where the small transactions of one turn of the event loop leave together, as one commit group
 * (one socket write, one commit); it holds up the transactions behind
 * it on that connection while it runs, so only short work goes there, it never waits for its
 * user's lock there (see above), and once sent it runs to its end (a cancel could hit another
 * transaction of the connection). `large`: on a pooled connection of its own, cancelled if its
 * client goes away.
 */
export type TransactionSize = 'small' | 'large';

/** The statements of a transaction (UserTransactions.run); undefined ones are left out. */
export type TransactionStatements = readonly (BoundStatement<unknown> | undefined)[];

/** A statement's rows, or undefined for a statement left out. */
type RowsOf<S> = S extends BoundStatement<infer Row> ? Row[] : undefined;

/** What a transaction's statements resolve to: each one's rows, in order. */
export type TransactionRows<S extends TransactionStatements> = { -readonly [K in keyof S]: RowsOf<S[K]> };

/** At most this many statements in one commit group (commit-groups.ts): 32 one-statement writes. */
const MAX_GROUP_STATEMENTS = 64;

export class UserTransactions {
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
   * Runs `statements`, in order, in the user's transaction (behind the user's lock, which this
   * prepends) and resolves, once committed, to their rows, in the same order: a tuple typed by each
   * statement's rows. A statement left out (undefined: a section the caller does not want) is not
   * sent and resolves to undefined. The statements are data, all known before anything is sent:
   * none can depend on another's rows (runInteractive is for writes that read first). `realm`: the
   * organization's queue, when the statements take its membership lock.
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
   * Runs `work` in a transaction of the user's on a pooled connection of its own, where, unlike
   * run(), `work` may await a statement's rows before it issues the next: for writes whose
   * statements depend on what an earlier one read (subscribing other users: the channels, the
   * users and the recipients of the events are read under the locks, then written). It waits in
   * the user's queue with the user's other transactions of this process, as run() does, then runs as
   * interactive() with the user's lock (waited for) as its opening. `realm`: the organization's
   * queue, when `work` takes its membership lock.
   */
  runInteractive<T>(userId: number, work: (tx: StatementRunner) => Promise<T>, departure?: Departure, realm?: RealmQueue): Promise<T> {
    return this.inQueues(userId, realm, () =>
      this.interactive(work, [{ ...LOCK, values: [USER_EVENT_LOCK_NAMESPACE, userId] }], departure),
    );
  }

  /**
   * Runs `work` in a transaction on a pooled connection of its own, no user's queue waited in (the
   * operator's writes of the admin command line; runInteractive adds a user's): BEGIN and
   * `opening` (its locks) leave with the work's first statement, then the work's other
   * statements, COMMIT (pipelined-transaction.ts, interactiveTransaction); a failure rolls it all
   * back. Its statements are cancelled (pg_cancel_backend) if its client goes away. Every
   * statement counts in `onStatement`, BEGIN and COMMIT included.
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
   * Sends `statements` as one transaction in one burst (pipelined-transaction.ts) on a pooled
   * connection of its own, where it may wait for locks; resolves to each statement's rows. No
   * user's queue or lock: run() adds them; the long polls' heartbeats come here as they are.
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
      // A cancelled or broken connection is closed (a cancel request may still be on its way to
      // it), and so is one whose prepared statements pg no longer knows (a value it could not
      // send); after any other failure the transaction has rolled back and the connection serves again.
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
