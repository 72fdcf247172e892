import type { BaseLogger } from 'pino';
import type { Database } from '../../db/database.js';
import type { Metrics } from '../../metrics/metrics.js';
import { leaseRenewalSeconds, recheckWaitingPolls } from './event-polls.repository.js';
import type { QueueWakeups } from './event-wakeups.js';

export interface PollRechecksOptions {
  db: Database;
  wakeups: QueueWakeups;
  intervalMs: number;
  log: Pick<BaseLogger, 'warn'>;
  metrics: Metrics | undefined;
}

/**
 * The safety net of waiting long polls, one statement per instance whatever their number: every
 * POLL_RECHECK_SECONDS, and at once when the LISTEN connection was lost or came back (its
 * notifications may have been missed), it renews the leases of all the instance's waiting polls
 * and wakes those whose queue has events, is gone or is held by a newer poll. Polls themselves
 * never look at the database while they wait: 10,000 idle polls cost one statement per interval.
 */
export class PollRechecks {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = false;

  constructor(private readonly options: PollRechecksOptions) {}

  start(): void {
    this.timer = setInterval(() => this.request(), this.options.intervalMs);
    this.timer.unref();
  }

  /** Checks now, or right after the check in progress (which may have read before what prompted this one). */
  request(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.run().finally(() => {
      this.running = undefined;
      if (this.again) {
        this.again = false;
        this.request();
      }
    });
  }

  /** No check starts any more (shutdown: the polls are answered without one). */
  stop(): void {
    this.stopped = true;
    this.again = false;
    clearInterval(this.timer);
  }

  /** Stops, and waits for the check in progress, if any. */
  async close(): Promise<void> {
    this.stop();
    await this.running;
  }

  private async run(): Promise<void> {
    const { db, wakeups, log, metrics } = this.options;
    const held = wakeups.heldPolls();
    if (held.length === 0) return;
    try {
      const renewBelow = leaseRenewalSeconds(this.options.intervalMs / 1000);
      for (const pollId of await recheckWaitingPolls(db, held, renewBelow)) wakeups.wakePoll(pollId);
      metrics?.pollRecheck('ok');
    } catch (error) {
      metrics?.pollRecheck('failed');
      // The next interval tries again; the leases are renewed early enough to outlast two failures.
      log.warn({ err: error, polls: held.length }, 'waiting long polls could not be checked');
    }
  }
}
