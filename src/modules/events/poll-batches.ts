import type { Database } from '../../db/database.js';
import type { Transactions } from '../../db/transactions.js';
import { Batcher } from '../../lib/batcher.js';
import { KeyedQueue } from '../../lib/keyed-queue.js';
import type { ApiEvent } from '../event-log/event-log.repository.js';
import type { WaitingPoll } from './event-polls.repository.js';
import { answerHeartbeats, endLeftPolls, type PollStart, type PollStartRequest, startPolls } from './poll-batches.repository.js';

/**
 * Batching of the long polls' own statements: 10,000 connected clients send about 200 heartbeats
 * and new polls a second; one statement for many of them costs about what one did.
 */

/** Bounds one statement's work. */
const MAX_BATCH = 500;

/**
 * The starts of one turn of the event loop go as one statement (startPolls), skipping rows held by
 * writes; those, and a start alone, are sent without skipping (they wait for the row). The starts
 * of one queue go one after another, in arrival order, as Zulip's one process handles them (each
 * replaces the one before, which answers): one statement never updates a row twice, and a client's
 * retry loop holds one pooled connection, not the whole pool waiting for one row.
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
 * that time share one authentication statement and one start: clients poll again one at a time,
 * right after their heartbeats. A poll that waits anyway loses nothing, and an event committed
 * meanwhile is in its answer.
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

/**
 * Ends of polls due within `tickMs` of each other go as one statement (`endPolls`), one poll per
 * queue in a statement (two would meet one row twice: one of them was replaced); one due otherwise
 * starts a tick of its own, so none waits longer than that; `flush()` sends what is due now (each
 * tick, and shutdown). A row another transaction holds is skipped and its poll ended again alone,
 * waiting for it. `endPolls` answers by poll id: null when the queue is gone, absent when skipped.
 */
class PollEndBatches<R> extends Batcher<WaitingPoll, R | null> {
  constructor(tickMs: number, endPolls: (polls: readonly WaitingPoll[], skipLocked: boolean) => Promise<Map<string, R | null>>) {
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
 * The heartbeats due within `tickMs` of each other go as one transaction (answerHeartbeats), flushed
 * by the heartbeat wheel at each tick: at 200 a second, a 250 ms tick answers about 50 at a time.
 * A poll's answer: its pending events, the heartbeat last; null when its queue is gone.
 */
export class HeartbeatBatches extends PollEndBatches<ApiEvent[]> {
  constructor(transactions: Transactions, tickMs: number) {
    super(tickMs, (polls, skipLocked) => answerHeartbeats(transactions, polls, skipLocked));
  }
}

/**
 * The polls whose clients left within `tickMs` of each other end in one statement (endLeftPolls):
 * when a load balancer restarts, every client of an instance leaves at once (bench/RESULTS.md).
 * Nothing is answered; resolves true, or null when the queue is gone.
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
 * The waiting polls by the tick (of `tickMs`, on the global performance.now(), which tests fake)
 * their heartbeat falls due in: one timer for all of them, not one per poll (memory). A poll is told
 * at the first tick boundary at least its delay after it was added; `onTick` then runs once.
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
