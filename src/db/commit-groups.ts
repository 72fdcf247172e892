import { Batcher } from '../lib/batcher.js';
import { isUserLockRefusal } from './errors.js';
import type { PipelinedConnections } from './pipelined-connections.js';
import { transactionProgress, type TransactionStatement } from './pipelined-transaction.js';

/**
 * The small write transactions of one turn of the event loop, each a different user's, committed
 * together: their statements go as ONE transaction (one `BEGIN`, every member's statements, one
 * `COMMIT`, in one burst: pipelined-transaction.ts), so they share one commit and one WAL flush. With synchronous commit a flush costs more than a small write itself (waiting on the
 * disk; bench/RESULTS.md), and on a pipelined connection each commit's
 * flush holds up every transaction behind it: one flush per transaction made the write path wait
 * on the disk rather than work.
 *
 * What stays as it was for each member:
 * - its statements run in order, behind its user's lock, each seeing what was committed before it
 *   (and the members before it in the group, which write other users' rows only);
 * - all or nothing, with its own outcome: when the group fails with an error the server reported
 *   (a refusal, a deadlock, a timeout) or a value pg could not send, the whole group rolled back. The member whose statement
 *   failed is then sent again alone, so that its answer is the one it would have had alone, and
 *   the others again as a group (so one refused request costs the others one more round trip, not
 *   one transaction each); if that group fails too, each of its members goes alone. A lost
 *   connection fails every member as it would have failed each (503): whether the commit happened
 *   is unknown, so nothing is sent again. (A savepoint per member would not save the others: after
 *   a failure the transaction refuses everything until a ROLLBACK TO SAVEPOINT, which can only be
 *   sent once the failure is known, a round trip later, as the group sent again is.)
 *
 * A member whose user's lock is held elsewhere (by another instance, say) is refused it at once
 * (ZU002, user_lock_now): a group never waits for a user's lock, which would hold up all its
 * members and the connection behind it for as long as the other holder keeps it. The group rolled
 * back; the refused member fails with the refusal, not sent again here (UserTransactions sends it
 * on a connection of its own), and the others go again together, as after any other culprit's
 * failure, but counted as a first attempt (each refusal removes a member, so this ends). Each
 * instance runs at most one transaction per user at a time (UserTransactions), so a group never
 * holds one user twice.
 */
export class CommitGroups {
  private readonly batcher: Batcher<Member, Rows>;

  constructor(
    private readonly writes: PipelinedConnections,
    /** Bounds a group's statements: the transactions queued behind it on its connection wait for all of it. */
    maxStatements: number,
  ) {
    this.batcher = new Batcher({
      max: maxStatements,
      weight: (member) => member.statements.length,
      order: (a, b) => a.userId - b.userId,
      send: (group) => this.send(group),
    });
  }

  /** Commits `statements` (a user's lock first) as one transaction, with others of this turn; resolves to each statement's rows. */
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
