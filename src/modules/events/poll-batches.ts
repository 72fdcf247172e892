import type { Database } from '../../db/database.js';
import type { UserTransactions } from '../../db/user-transactions.js';
import { Batcher } from '../../lib/batcher.js';
import { KeyedQueue } from '../../lib/keyed-queue.js';
import type { ApiEvent } from '../event-log/event-log.repository.js';
import type { WaitingPoll } from './event-polls.repository.js';
import { answerHeartbeats, endLeftPolls, type PollStart, type PollStartRequest, startPolls } from './poll-batches.repository.js';

/**
 * Batching of the long polls' own statements: what 10,000 connected clients cost all day
 * is their heartbeats and the polls they open again right after, about 200 a second; one statement
 * for many of them costs the database about what one of them did.
 */

/** Bounds one statement's work. */
const MAX_BATCH = 500;

/**
 * The starts of the polls handled in one turn of the event loop go as one statement (startPolls)
 * when the turn ends, skipping rows held by writes; those, and a start alone, are sent without
 * skipping (they wait for the row). The starts of one queue go one after another, in arrival
 * order, each once the previous one's statement is done, as Zulip's one process handles them: each
 * replaces the poll before it, which answers with what is pending, and the last one waits. So
 * one statement never updates a row twice, and 200 polls of one queue at once (a client's retry
 * loop) hold one pooled connection at a time, not the whole pool with 200 statements waiting for
 * one row.
 */
export class PollStartBatches {
  private readonly batcher = new Batcher({ max: MAX_BATCH, send: (requests: PollStartRequest[]) => this.send(requests) });
  private readonly queues = new KeyedQueue<string>();

  constructor(private readonly db: Database) {}

  start(request: PollStartRequest): Promise<PollStart> {
    return this.queues.run(request.queueId, () => this.batcher.add(request));
  }

  private async send(requests: PollStartRequest[]): Promise<(PollStart | Promise<PollStart>)[]> {
    if (requests.length === 1) return [this.alone(requests[0]!)];
    const starts = await startPolls(this.db, requests, true);
    // Unknown, or its row held by a write: alone, waiting for the row (or answering 'missing').
    return requests.map((request, index) => starts[index] ?? this.alone(request));
  }

  private async alone(request: PollStartRequest): Promise<PollStart> {
    return (await startPolls(this.db, [request], false))[0]!;
  }
}

/**
 * Blocking polls wait up to `gatherMs` before their authentication, so that those arriving within
 * that time are authenticated by one statement and started by one (both are shared by the requests
 * of one turn of the event loop): the clients of a busy instance poll again one at a time, right
 * after their heartbeats, and a turn rarely held more than one. Their authentication and start are
 * what a heartbeat cycle costs beyond the heartbeat; a poll that waits anyway loses nothing, and an
 * event committed meanwhile is in its answer (it answers at once when events are pending).
 */
export class PollGathering extends Batcher<undefined, void> {
  constructor(gatherMs: number) {
    super({ delayMs: gatherMs, max: Infinity, send: async (polls) => polls.map(() => undefined) });
  }

  /** Resolves with every other poll that arrived within gatherMs of the first (or at shutdown's flush). */
  wait(): Promise<void> {
    return this.add(undefined);
  }
}

/** A statement that ends many polls: by poll id, its result, or null when its queue is gone; absent when its row was skipped. */
type EndPolls<R> = (polls: readonly WaitingPoll[], skipLocked: boolean) => Promise<Map<string, R | null>>;

/**
 * Ends of polls due within `tickMs` of each other go as one statement (`endPolls`), one poll per
 * queue in a statement (two would meet one row twice: one of them was replaced); one due otherwise
 * starts a tick of its own, so none waits longer than that; `flush()` sends what is due now (each
 * tick, and shutdown). A row another transaction holds is skipped and its poll ended again alone,
 * waiting for it. A poll's end: the statement's result; null when its queue is gone.
 */
class PollEndBatches<R> extends Batcher<WaitingPoll, R | null> {
  constructor(tickMs: number, endPolls: EndPolls<R>) {
    const alone = async (poll: WaitingPoll) => (await endPolls([poll], false)).get(poll.pollId) ?? null;
    super({
      delayMs: tickMs,
      max: MAX_BATCH,
      key: (poll) => poll.queueId,
      send: async (polls) => {
        const results = await endPolls(polls, true);
        return polls.map((poll) => {
          const result = results.get(poll.pollId);
          return result === undefined ? alone(poll) : result;
        });
      },
    });
  }
}

/**
 * The heartbeats due on an instance within `tickMs` of each other go as one transaction
 * (answerHeartbeats): the heartbeat wheel flushes those of each tick at once; one due otherwise (a
 * poll that was checking its queue at its tick) starts a tick of its own, so none waits longer than
 * that. At 200 heartbeats a second, a 250 ms tick answers about 50 at a time. A poll's answer: its
 * pending events, the heartbeat last; null when its queue is gone.
 */
export class HeartbeatBatches extends PollEndBatches<ApiEvent[]> {
  constructor(transactions: UserTransactions, tickMs: number) {
    super(tickMs, (polls, skipLocked) => answerHeartbeats(transactions, polls, skipLocked));
  }
}

/**
 * The polls whose clients left within `tickMs` of each other end in one statement (endLeftPolls):
 * when a load balancer restarts or a network drops, every client of an instance leaves at once, and
 * a statement each was 10,000 statements queued on the pool and a few seconds of 60 to 80 MB more
 * memory (bench/RESULTS.md). Nothing is answered (nobody is there); resolves
 * true, or null when the queue is gone.
 */
export class LeftPollBatches extends PollEndBatches<true> {
  constructor(db: Database, tickMs: number) {
    super(tickMs, (polls, skipLocked) => endLeftPolls(db, polls, skipLocked));
  }
}

/** A waiting poll, told by the wheel when its heartbeat falls due. */
export interface HeartbeatDue {
  heartbeatDue(): void;
}

/**
 * The waiting polls by the tick (of `tickMs`, on performance.now()) their heartbeat falls due in:
 * one timer for all of them, firing each tick while any waits, instead of a timer per poll (with
 * its closures, the part of a waiting poll's memory that was ours). A poll is told at the
 * first tick boundary at least its delay after it was added; `onTick` then runs once (the
 * heartbeats of that tick go as one statement). It reads the global performance.now(), which tests
 * can fake.
 */
export class HeartbeatWheel {
  private readonly slots = new Map<number, Set<HeartbeatDue>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly tickMs: number,
    private readonly onTick: () => void,
  ) {}

  /** Tells `poll` in `delayMs` (up to a tick more); returns its tick, for `remove`. */
  add(poll: HeartbeatDue, delayMs: number): number {
    const tick = Math.ceil((performance.now() + delayMs) / this.tickMs);
    let slot = this.slots.get(tick);
    if (!slot) this.slots.set(tick, (slot = new Set()));
    slot.add(poll);
    if (!this.timer) this.schedule();
    return tick;
  }

  /** The poll answered before its heartbeat. */
  remove(poll: HeartbeatDue, tick: number): void {
    const slot = this.slots.get(tick);
    slot?.delete(poll);
    if (slot?.size === 0) this.slots.delete(tick);
  }

  /** Stops the timer (shutdown; the polls left are answered by other means). */
  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    const next = Math.floor(performance.now() / this.tickMs) + 1;
    this.timer = setTimeout(() => this.fire(next), next * this.tickMs - performance.now());
  }

  private fire(target: number): void {
    this.timer = undefined;
    // Node may run a timer a fraction of a millisecond before its time: the target tick counts as
    // reached. Later ones too, when the event loop was held up.
    const reached = Math.max(target, Math.floor(performance.now() / this.tickMs));
    const due: HeartbeatDue[] = [];
    for (const [tick, slot] of this.slots) {
      if (tick > reached) continue;
      this.slots.delete(tick);
      for (const poll of slot) due.push(poll);
    }
    for (const poll of due) poll.heartbeatDue();
    if (due.length > 0) this.onTick();
    if (this.slots.size > 0) this.schedule();
  }
}
