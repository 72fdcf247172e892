import type { WaitingPoll } from './event-polls.repository.js';

/**
 * In-process wake-ups of waiting long polls. A poll subscribes to its queue before it checks the
 * database, so a notification arriving at any moment after that is never lost: it is kept until
 * the poll next waits.
 */

export class PollWaiter {
  /** Set once the poll holds its queue and waits (QueueWakeups.hold). */
  pollId: string | undefined;
  /** performance.now() when the first NOTIFY for its queue arrived (QueueWakeups.wake): the delivery latency's start. */
  notifiedAt: number | undefined;
  /** A notification came that the poll has not yet looked at (it clears this when it looks). */
  notified = false;

  /** Something about the queue changed; a waiting poll (events.service.ts) also starts its check. */
  notify(): void {
    this.notified = true;
  }
}

/**
 * A queue's waiters: almost always one poll, kept as itself (a Set per queue was about 200 bytes of
 * each waiting poll's memory); a Set only while a queue has several.
 */
type Waiters = PollWaiter | Set<PollWaiter>;

export class QueueWakeups {
  private readonly waiters = new Map<string, Waiters>();
  /** The polls that hold their queue and wait, by poll id, with their queue. */
  private readonly held = new Map<string, { queueId: string; waiter: PollWaiter }>();
  private inFlight = 0;
  /** While shutdown waits for the polls in flight: resolved when the last one has its answer. */
  private drained: { promise: Promise<void>; resolve: () => void } | undefined;
  /** True once the instance shuts down: polls answer at once with what is pending. */
  closing = false;

  subscribe(queueId: string, waiter: PollWaiter): void {
    const current = this.waiters.get(queueId);
    if (current === undefined) this.waiters.set(queueId, waiter);
    else if (current instanceof Set) current.add(waiter);
    else this.waiters.set(queueId, new Set([current, waiter]));
  }

  unsubscribe(queueId: string, waiter: PollWaiter): void {
    if (waiter.pollId !== undefined) this.held.delete(waiter.pollId);
    const current = this.waiters.get(queueId);
    if (current === waiter) this.waiters.delete(queueId);
    else if (current instanceof Set) {
      current.delete(waiter);
      if (current.size === 0) this.waiters.delete(queueId);
    }
  }

  /** The poll now holds its queue and waits: the periodic check (PollRechecks) covers it. */
  hold(queueId: string, waiter: PollWaiter, pollId: string): void {
    waiter.pollId = pollId;
    this.held.set(pollId, { queueId, waiter });
  }

  /** The waiting polls that hold their queue. */
  heldPolls(): WaitingPoll[] {
    return Array.from(this.held, ([pollId, { queueId }]) => ({ queueId, pollId }));
  }

  /** The check found that this poll should answer (PollRechecks). */
  wakePoll(pollId: string): void {
    this.held.get(pollId)?.waiter.notify();
  }

  /**
   * Something about the queue changed (events, deletion, a new poll): its polls re-check.
   * `notifiedAt`: when the NOTIFY that said so arrived (performance.now()).
   */
  wake(queueId: string, except?: PollWaiter, notifiedAt?: number): void {
    const waiters = this.waiters.get(queueId);
    for (const waiter of waiters instanceof Set ? [...waiters] : waiters ? [waiters] : []) {
      if (waiter === except) continue;
      waiter.notifiedAt ??= notifiedAt;
      waiter.notify();
    }
  }

  /** How many polls hold their queue and wait (the metrics' waiting polls). */
  get waitingPolls(): number {
    return this.held.size;
  }

  /** A poll begins; `end` when it has its answer. Counted, not kept: close waits until none is left. */
  begin(): void {
    this.inFlight++;
  }

  end(): void {
    this.inFlight--;
    if (this.inFlight > 0 || !this.drained) return;
    this.drained.resolve();
    this.drained = undefined;
  }

  /** Ends every waiting poll (each answers with what is pending) and waits until all have answered. */
  async close(): Promise<void> {
    this.closing = true;
    for (const queueId of [...this.waiters.keys()]) this.wake(queueId);
    if (this.inFlight === 0) return;
    if (!this.drained) {
      let resolve!: () => void;
      const promise = new Promise<void>((done) => (resolve = done));
      this.drained = { promise, resolve };
    }
    await this.drained.promise;
  }
}
