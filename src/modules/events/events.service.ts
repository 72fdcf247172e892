import type { Config } from '../../config.js';
import type { Database } from '../../db/database.js';
import type { Departure } from '../../lib/departure.js';
import { uniqueId } from '../../lib/unique-ids.js';
import { ApiError, badRequest } from '../../http/errors.js';
import { finishPoll, finishPollIfReady, type QueueOwner } from './event-polls.repository.js';
import { PollWaiter, type QueueWakeups } from './event-wakeups.js';
import type { ApiEvent } from '../event-log/event-log.repository.js';
import { deleteEventQueue } from './event-queues.repository.js';
import type { HeartbeatBatches, HeartbeatWheel, LeftPollBatches, PollStartBatches } from './poll-batches.js';

/** GET and DELETE /api/v1/events (docs/api.md §3.13, docs/api.md §3.14). */

// Queue ids are the lowercase UUIDs register hands out; anything else names no queue.
const QUEUE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const badEventQueueId = (queueId: string): ApiError =>
  new ApiError(400, `Bad event queue ID: ${queueId}`, 'BAD_EVENT_QUEUE_ID', { queue_id: queueId });

export interface EventsDeps {
  db: Database;
  config: Pick<Config, 'heartbeatSeconds' | 'heartbeatJitterSeconds'>;
  wakeups: QueueWakeups;
  starts: PollStartBatches;
  heartbeats: HeartbeatBatches;
  leftPolls: LeftPollBatches;
  wheel: HeartbeatWheel;
}

export interface PollRequest {
  queueId: string;
  lastEventId: number;
  dontBlock: boolean;
  /** Aborted when the client goes away. */
  clientGone: Departure;
}

/**
 * `waited` answers carry queue_id; null means the client left and nothing is to be sent.
 * `notifiedAt`: when the NOTIFY that woke a waiting poll arrived (performance.now()), for the metrics.
 */
export type PollAnswer = { events: ApiEvent[]; waited: boolean; notifiedAt?: number } | null;

/** Called once with the poll's answer (error null), or with its error. */
export type PollDone = (error: Error | null, answer: PollAnswer) => void;

/** Runs a poll; `done` gets its answer. */
export function pollEvents(deps: EventsDeps, caller: QueueOwner, request: PollRequest, done: PollDone): void {
  if (!QUEUE_ID.test(request.queueId)) return done(badEventQueueId(request.queueId), null);
  void new LongPoll(deps, request.queueId, request.clientGone, done).start(caller, request);
}

/**
 * How long a poll waits before its heartbeat: HEARTBEAT_SECONDS plus a random jitter, less the
 * heartbeat wheel's tick (HeartbeatWheel), so that it is answered 45 to 55 s after it started, as
 * Zulip's. In whole ticks: the wheel answers on tick boundaries anyway.
 */
export function heartbeatDelay(config: EventsDeps['config'], tickMs: number, random: () => number = Math.random): number {
  const tick = Math.max(1, tickMs);
  const jitterTicks = Math.floor(Math.max(0, config.heartbeatJitterSeconds * 1000 - tick) / tick);
  return config.heartbeatSeconds * 1000 + Math.floor(random() * (jitterTicks + 1)) * tick;
}

/**
 * One long poll. While it waits it is only this object, in its queue's waiters and in the
 * heartbeat wheel: no suspended async function, promise or timer of its own (memory, times 10,000
 * connected clients). A notification, the instance's periodic check, the client leaving, shutdown
 * or the heartbeat's tick wakes it; it then checks and answers, or waits again.
 */
class LongPoll extends PollWaiter {
  private state: 'starting' | 'waiting' | 'checking' | 'answered' = 'starting';
  /** The wheel's tick its heartbeat falls due in, while it is in the wheel. */
  private tick: number | undefined;
  private due = false;
  private stopListening: (() => void) | undefined;

  constructor(
    private readonly deps: EventsDeps,
    private readonly queueId: string,
    private readonly clientGone: Departure,
    private readonly done: PollDone,
  ) {
    super();
  }

  async start(caller: QueueOwner, request: PollRequest): Promise<void> {
    const { wakeups, starts, wheel, config } = this.deps;
    const { queueId } = this;
    const { lastEventId } = request;
    wakeups.begin();
    // Subscribed before the first look at the queue: no notification can fall in between.
    wakeups.subscribe(queueId, this);
    try {
      const pollId = uniqueId();
      const start = await starts.start({
        owner: caller,
        queueId,
        lastEventId,
        pollId,
        answerNow: request.dontBlock || wakeups.closing,
      });
      if (start.outcome === 'missing') throw badEventQueueId(queueId);
      if (start.outcome === 'pruned') throw badRequest(`An event newer than ${lastEventId} has already been pruned!`);
      if (start.outcome === 'not_in_queue') throw badRequest(`Event ${lastEventId} was not in this queue`);
      // A poll this one replaced on this instance answers now (others hear it through NOTIFY).
      if (start.replacedPoll) wakeups.wake(queueId, this);
      if (start.outcome === 'answered') return this.answer(null, { events: start.events, waited: false });
      // From now on the instance's periodic check (PollRechecks) renews this poll's lease and wakes
      // it if a notification was missed; the poll itself only looks again when woken.
      wakeups.hold(queueId, this, pollId);
      this.stopListening = this.clientGone.onGone(() => this.notify());
      this.tick = wheel.add(this, heartbeatDelay(config, wheel.tickMs));
      this.state = 'waiting';
      if (this.notified || this.clientGone.gone) this.check();
    } catch (error) {
      this.answer(asError(error), null);
    }
  }

  override notify(): void {
    super.notify();
    if (this.state === 'waiting') this.check();
  }

  heartbeatDue(): void {
    this.tick = undefined;
    this.due = true;
    if (this.state === 'waiting') this.check();
  }

  private check(): void {
    this.state = 'checking';
    this.look().catch((error: unknown) => this.answer(asError(error), null));
  }

  /** Answers, or goes back to waiting when nothing is to be sent and nothing came meanwhile. */
  private async look(): Promise<void> {
    const { db, wakeups, heartbeats } = this.deps;
    const { queueId } = this;
    const pollId = this.pollId!;
    for (;;) {
      this.notified = false;
      if (this.clientGone.gone) {
        // Nothing is sent; the pending events stay for the next poll. Ended with the others that left meanwhile.
        await this.deps.leftPolls.add({ queueId, pollId });
        return this.answer(null, null);
      }
      if (wakeups.closing) {
        const events = await finishPoll(db, queueId, pollId);
        if (events === undefined) throw badEventQueueId(queueId);
        return this.answer(null, { events, waited: true });
      }
      if (this.due) {
        // Appended only while this poll holds the queue; the poll ends with every pending event.
        const events = await heartbeats.add({ queueId, pollId });
        if (events === null) throw badEventQueueId(queueId);
        return this.answer(null, { events, waited: true });
      }
      // Woken by a notification or by the instance's periodic check.
      const outcome = await finishPollIfReady(db, queueId, pollId);
      if (outcome === undefined) throw badEventQueueId(queueId);
      if (outcome !== 'waiting')
        return this.answer(null, { events: outcome, waited: true, ...(this.notifiedAt !== undefined && { notifiedAt: this.notifiedAt }) });
      if (!this.notified && !this.due) {
        this.state = 'waiting';
        return;
      }
    }
  }

  private answer(error: Error | null, answer: PollAnswer): void {
    if (this.state === 'answered') return;
    this.state = 'answered';
    const { wakeups, wheel } = this.deps;
    if (this.tick !== undefined) wheel.remove(this, this.tick);
    this.tick = undefined;
    this.stopListening?.();
    wakeups.unsubscribe(this.queueId, this);
    wakeups.end();
    this.done(error, answer);
  }
}

/** What was thrown, as an Error. */
const asError = (error: unknown): Error => (error instanceof Error ? error : new Error(String(error)));

export async function deleteQueue(deps: Pick<EventsDeps, 'db' | 'wakeups'>, caller: QueueOwner, queueId: string): Promise<void> {
  if (!QUEUE_ID.test(queueId) || !(await deleteEventQueue(deps.db, caller, queueId))) throw badEventQueueId(queueId);
  deps.wakeups.wake(queueId);
}
