/**
 * In-process wake-ups of waiting long polls. A poll subscribes to its queue before it checks the
 * database, so a notification arriving at any moment after that is never lost: it is kept until
 * the poll next waits.
 */

export class PollWaiter {
  /** Set once the poll holds its queue and waits (QueueWakeups.hold). */
  pollId: string | undefined;
  /** performance.now() when the first NOTIFY for its queue arrived (QueueWakeups.notified): the delivery latency's start. */
  notifiedAt: number | undefined;
  private notified = false;
  private release: (() => void) | undefined;

  notify(): void {
    this.notified = true;
    this.release?.();
  }

  /**
   * Resolves when notified (now, if a notification came since the last wait) or after `ms`: to
   * true when notified, false when the time ran out. The caller goes by this, not by the clock:
   * Node's timers run on the event loop's cached time and fire up to a millisecond early by
   * Date.now(), and a poll that took that for a wake-up ran a needless check (issue 27).
   */
  wait(ms: number): Promise<boolean> {
    if (this.notified) {
      this.notified = false;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const done = (notified: boolean): void => {
        clearTimeout(timer);
        this.release = undefined;
        this.notified = false;
        resolve(notified);
      };
      const timer = setTimeout(() => done(false), ms);
      this.release = () => done(true);
    });
  }
}

export class QueueWakeups {
  private readonly waiters = new Map<string, Set<PollWaiter>>();
  /** The polls that hold their queue and wait, by poll id, with their queue. */
  private readonly held = new Map<string, { queueId: string; waiter: PollWaiter }>();
  private readonly polls = new Set<Promise<unknown>>();
  private closingFlag = false;

  /** True once the instance shuts down: polls answer at once with what is pending. */
  get closing(): boolean {
    return this.closingFlag;
  }

  subscribe(queueId: string): PollWaiter {
    const waiter = new PollWaiter();
    let set = this.waiters.get(queueId);
    if (!set) this.waiters.set(queueId, (set = new Set()));
    set.add(waiter);
    return waiter;
  }

  unsubscribe(queueId: string, waiter: PollWaiter): void {
    if (waiter.pollId !== undefined) this.held.delete(waiter.pollId);
    const set = this.waiters.get(queueId);
    set?.delete(waiter);
    if (set?.size === 0) this.waiters.delete(queueId);
  }

  /** The poll now holds its queue and waits: the periodic check (PollRechecks) covers it. */
  hold(queueId: string, waiter: PollWaiter, pollId: string): void {
    waiter.pollId = pollId;
    this.held.set(pollId, { queueId, waiter });
  }

  /** The waiting polls that hold their queue. */
  heldPolls(): { queueId: string; pollId: string }[] {
    return Array.from(this.held, ([pollId, { queueId }]) => ({ queueId, pollId }));
  }

  /** The check found that this poll should answer (PollRechecks). */
  wakePoll(pollId: string): void {
    this.held.get(pollId)?.waiter.notify();
  }

  /** Something about the queue changed (events, deletion, a new poll): its polls re-check. */
  wake(queueId: string, except?: PollWaiter): void {
    for (const waiter of this.waiters.get(queueId) ?? []) if (waiter !== except) waiter.notify();
  }

  /** A NOTIFY for the queue arrived at `at` (performance.now()): its polls re-check. */
  notified(queueId: string, at: number): void {
    for (const waiter of this.waiters.get(queueId) ?? []) {
      waiter.notifiedAt ??= at;
      waiter.notify();
    }
  }

  /** How many polls hold their queue and wait (the metrics' waiting polls). */
  get waitingPolls(): number {
    return this.held.size;
  }

  /** After notifications may have been missed (the listener reconnected): every poll re-checks. */
  wakeAll(): void {
    for (const set of this.waiters.values()) for (const waiter of set) waiter.notify();
  }

  /** Runs a poll, remembered until it settles so that shutdown can wait for it. */
  track<T>(poll: Promise<T>): Promise<T> {
    this.polls.add(poll);
    const forget = () => this.polls.delete(poll);
    poll.then(forget, forget);
    return poll;
  }

  /** Ends every waiting poll (each answers with what is pending) and waits until all have answered. */
  async close(): Promise<void> {
    this.closingFlag = true;
    this.wakeAll();
    await Promise.allSettled([...this.polls]);
  }
}
