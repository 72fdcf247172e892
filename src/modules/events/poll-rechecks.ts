import type { FastifyBaseLogger } from 'fastify';
import type { Database } from '../../db/database.js';
import { recheckWaitingPolls } from './event-polls.repository.js';
import type { QueueWakeups } from './event-wakeups.js';

export interface PollRechecksOptions {
  db: Database;
  wakeups: QueueWakeups;
  intervalMs: number;
  log: FastifyBaseLogger;
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

  constructor(private readonly options: PollRechecksOptions) {}

  start(): void {
    this.timer = setInterval(() => this.request(), this.options.intervalMs);
    this.timer.unref();
  }

  /** Checks now, or right after the check in progress (which may have read before what prompted this one). */
  request(): void {
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

  async close(): Promise<void> {
    clearInterval(this.timer);
    this.again = false;
    await this.running;
  }

  private async run(): Promise<void> {
    const { db, wakeups, log } = this.options;
    const held = wakeups.heldPolls();
    if (held.length === 0) return;
    try {
      for (const pollId of await recheckWaitingPolls(db, held)) wakeups.wakePoll(pollId);
    } catch (error) {
      // The next interval tries again; the leases (POLL_LEASE_SECONDS) outlast a few failures.
      log.warn({ err: error, polls: held.length }, 'waiting long polls could not be checked');
    }
  }
}
