import { Batcher } from '../lib/batcher.js';
import { isUserLockRefusal } from './errors.js';
import type { PipelinedConnections } from './pipelined-connections.js';
import { transactionProgress, type TransactionStatement } from './pipelined-transaction.js';

/**
 * The small write transactions gathered in one turn of the event loop, or while the groups before
 * them commit (one per write connection), each a different user's, committed together as ONE
 * transaction in one burst (pipelined-transaction.ts): one commit, one WAL flush.
 * A flush costs more than a small write (bench/RESULTS.md), and on a pipelined connection each one
 * holds up every transaction behind it.
 *
 * Each member keeps its semantics:
 * - its statements run in order, behind its user's lock (a group never holds one user twice:
 *   Transactions), seeing what committed before it and the members before it (other users' rows);
 * - all or nothing, with its own outcome: when the group rolled back (a server error, a value pg
 *   could not send), the failing member goes again alone, for the answer it would have had alone,
 *   and the others again as a group; if that fails too, each goes alone. A lost connection fails
 *   every member (503): the commit's outcome is unknown, so nothing is sent again. (Savepoints would
 *   not save the others: a ROLLBACK TO SAVEPOINT can only follow the failure a round trip later.)
 *
 * A member whose user's lock is held elsewhere is refused it at once (ZU002, user_lock_now), as a
 * group must never wait for a lock: it fails with the refusal (Transactions sends it again on
 * a connection of its own), and the others go again together, counted as a first attempt (each
 * refusal removes a member, so this ends).
 */
export class CommitGroups {
  private readonly batcher: Batcher<Member, Rows>;

  constructor(
    private readonly writes: PipelinedConnections,
    /** Bounds a group's statements: the transactions queued behind it on its connection wait for all of it. */
    maxStatements: number,
  ) {
    this.batcher = new Batcher({
      // A group per write connection at most: the writes that come while they commit go together after.
      // Commits that NOTIFY are serialized by PostgreSQL, each with its WAL flush: a group a turn was
      // one write a flush once the flush was slow (bench/RESULTS.md).
      maxInFlight: writes.connections,
      max: maxStatements,
      weight: (member) => member.statements.length,
      order: (a, b) => a.userId - b.userId,
      send: (group) => this.send(group),
    });
  }

  /** Commits `statements` (a user's lock first) as one transaction, with others gathered with it; resolves to each statement's rows. */
  commit(userId: number, statements: readonly TransactionStatement[]): Promise<Rows> {
    return this.batcher.add({ userId, statements });
  }

  /** `again`: the group is what remained of a failed one; a second failure sends each member alone. */
  private async send(group: Member[], again = false): Promise<(Rows | Promise<Rows>)[]> {
    if (!again) this.writes.observer.commitGroup?.(group.length);
    if (group.length === 1) return [this.alone(group[0]!)];
    const progress = transactionProgress();
    try {
      const rows = await this.writes.transaction(
        group.flatMap((member) => member.statements),
        progress,
      );
      let at = 0;
      return group.map((member) => rows.slice(at, (at += member.statements.length)));
    } catch (error) {
      // Not rolled back: nothing sent (no connection), or the connection lost: each member fails alike.
      if (!progress.rolledBack) throw error;
      const failed = memberAt(group, progress.completed);
      const refused = isUserLockRefusal(error);
      // The COMMIT's own failure names no member: each goes alone.
      if (!failed || (again && !refused)) return group.map((member) => this.alone(member));
      const others = group.filter((member) => member !== failed);
      const rest = this.send(others, again || !refused);
      return group.map((member) =>
        member !== failed ? rest.then((results) => results[others.indexOf(member)]!) : refused ? Promise.reject(error) : this.alone(member),
      );
    }
  }

  private alone(member: Member): Promise<Rows> {
    return this.writes.transaction(member.statements);
  }
}

/** The member whose statements include the group's `index`-th one. */
function memberAt(group: Member[], index: number): Member | undefined {
  let first = 0;
  for (const member of group) {
    if (index < first + member.statements.length) return member;
    first += member.statements.length;
  }
  return undefined;
}

type Rows = unknown[][];

interface Member {
  userId: number;
  statements: readonly TransactionStatement[];
}
