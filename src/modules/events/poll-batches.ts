import type { Database } from '../../db/database.js';
import type { UserTransactions } from '../../db/user-transactions.js';
import { KeyedTurns } from '../../lib/keyed-turns.js';
import type { ApiEvent } from './events.repository.js';
import {
  answerHeartbeats,
  endLeftPolls,
  type HeartbeatRequest,
  type PollStart,
  type PollStartRequest,
  startPolls,
} from './poll-batches.repository.js';

/**
 * Batching of the long polls' own statements: what 10,000 connected clients cost all day
 * is their heartbeats and the polls they open again right after, about 200 a second; one statement
 * for many of them costs the database about what one of them did.
 */

/** Bounds one statement's work. */
const MAX_BATCH = 500;

interface PendingStart {
  request: PollStartRequest;
  resolve: (start: PollStart) => void;
  reject: (error: unknown) => void;
}

/**
 * The starts of the polls handled in one turn of the event loop go as one statement (startPolls)
 * when the turn ends, skipping rows held by writes; those, and a start alone, are sent without
 * skipping (they wait for the row). The starts of one queue take their turns, in arrival order,
 * each once the previous one's statement is done, as Zulip's one process handles them: each
 * replaces the poll before it, which answers with what is pending, and the last one waits. So
 * one statement never updates a row twice, and 200 polls of one queue at once (a client's retry
 * loop) hold one pooled connection at a time, not the whole pool with 200 statements waiting for
 * one row.
 */
export class PollStartBatches {
  private pending: PendingStart[] = [];
  private scheduled = false;
  private readonly queues = new KeyedTurns<string>();

  constructor(private readonly db: Database) {}

  start(request: PollStartRequest): Promise<PollStart> {
    return this.queues.run(request.queueId, () => this.gather(request));
  }

  private gather(request: PollStartRequest): Promise<PollStart> {
    if (this.pending.length >= MAX_BATCH) this.send();
    const started = new Promise<PollStart>((resolve, reject) => this.pending.push({ request, resolve, reject }));
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.send();
      });
    }
    return started;
  }

  private send(): void {
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    if (batch.length === 1) return this.alone(batch[0]!);
    startPolls(
      this.db,
      batch.map((entry) => entry.request),
      true,
    ).then(
      (starts) =>
        batch.forEach((entry, index) => {
          const start = starts[index];
          // Unknown, or its row held by a write: alone, waiting for the row (or answering 'missing').
          if (start) entry.resolve(start);
          else this.alone(entry);
        }),
      (error: unknown) => batch.forEach((entry) => entry.reject(error)),
    );
  }

  private alone({ request, resolve, reject }: PendingStart): void {
    startPolls(this.db, [request], false).then((starts) => resolve(starts[0]!), reject);
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
export class PollGathering {
  private waiting: (() => void)[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly gatherMs: number) {}

  /** Resolves with every other poll that arrived within gatherMs of the first, in one turn. */
  wait(): Promise<void> {
    const gathered = new Promise<void>((resolve) => this.waiting.push(resolve));
    this.timer ??= setTimeout(() => this.release(), this.gatherMs);
    return gathered;
  }

  /** Lets the waiting polls through now (shutdown). */
  release(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const waiting = this.waiting;
    this.waiting = [];
    for (const resolve of waiting) resolve();
  }
}

interface PollEnd<R> {
  queueId: string;
  pollId: string;
  resolve: (result: R | null) => void;
  reject: (error: unknown) => void;
}

/** A statement that ends many polls: by poll id, its result, or null when its queue is gone; absent when its row was skipped. */
type EndPolls<R> = (polls: readonly HeartbeatRequest[], skipLocked: boolean) => Promise<Map<string, R | null>>;

/**
 * Ends of polls due within `tickMs` of each other go as one statement (`endPolls`), one poll per
 * queue in a statement; one due otherwise starts a tick of its own, so none waits longer than
 * that. A row another transaction holds is skipped and its poll ended again alone, waiting for it.
 */
class PollEndBatches<R> {
  private due: PollEnd<R>[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly tickMs: number,
    private readonly endPolls: EndPolls<R>,
  ) {}

  /** The poll's end: the statement's result; null when its queue is gone. */
  answer(queueId: string, pollId: string): Promise<R | null> {
    const answered = new Promise<R | null>((resolve, reject) => this.due.push({ queueId, pollId, resolve, reject }));
    this.timer ??= setTimeout(() => this.flush(), this.tickMs);
    return answered;
  }

  /** Sends what is due now (each tick, and shutdown: the polls are answering). */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    let rest = this.due;
    this.due = [];
    // One poll per queue in a statement: two would meet one row twice (one of them was replaced).
    while (rest.length > 0) {
      const batch: PollEnd<R>[] = [];
      const later: PollEnd<R>[] = [];
      const queueIds = new Set<string>();
      for (const entry of rest) {
        if (batch.length < MAX_BATCH && !queueIds.has(entry.queueId)) {
          queueIds.add(entry.queueId);
          batch.push(entry);
        } else later.push(entry);
      }
      this.send(batch);
      rest = later;
    }
  }

  private send(batch: PollEnd<R>[]): void {
    this.endPolls(batch, true).then(
      (results) => {
        for (const entry of batch) {
          const result = results.get(entry.pollId);
          if (result !== undefined) {
            entry.resolve(result);
            continue;
          }
          // Its row was held by another transaction (or is gone): alone, waiting for it.
          this.endPolls([entry], false).then((alone) => entry.resolve(alone.get(entry.pollId) ?? null), entry.reject);
        }
      },
      (error: unknown) => batch.forEach((entry) => entry.reject(error)),
    );
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

  /** How many polls wait for their heartbeat. */
  get size(): number {
    let size = 0;
    for (const slot of this.slots.values()) size += slot.size;
    return size;
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
