import type { Config } from '../../config.js';
import type { Database } from '../../db/database.js';
import type { Departure } from '../../lib/departure.js';
import { uniqueId } from '../../lib/unique-ids.js';
import { ApiError, badRequest } from '../../http/errors.js';
import { finishPoll, finishPollIfReady, type QueueOwner } from './event-polls.repository.js';
import type { PollWaiter, QueueWakeups } from './event-wakeups.js';
import { type ApiEvent, deleteEventQueue } from './events.repository.js';
import type { HeartbeatBatches, PollStartBatches } from './poll-batches.js';

/** GET and DELETE /api/v1/events (spec §3.13, §3.14). */

// Queue ids are the lowercase UUIDs register hands out; anything else names no queue.
const QUEUE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const badEventQueueId = (queueId: string): ApiError =>
  new ApiError(400, `Bad event queue ID: ${queueId}`, 'BAD_EVENT_QUEUE_ID', { queue_id: queueId });

export interface EventsDeps {
  db: Database;
  config: Pick<Config, 'heartbeatSeconds' | 'heartbeatJitterSeconds'>;
  wakeups: QueueWakeups;
  /** Poll starts of one turn of the event loop, one statement. */
  starts: PollStartBatches;
  /** Heartbeats due within one tick of each other, one transaction. */
  heartbeats: HeartbeatBatches;
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

export function pollEvents(deps: EventsDeps, caller: QueueOwner, request: PollRequest): Promise<PollAnswer> {
  return deps.wakeups.track(runPoll(deps, caller, request));
}

async function runPoll(deps: EventsDeps, caller: QueueOwner, request: PollRequest): Promise<PollAnswer> {
  const { wakeups } = deps;
  const { queueId, lastEventId } = request;
  if (!QUEUE_ID.test(queueId)) throw badEventQueueId(queueId);
  const pollId = uniqueId();
  // Subscribed before the first look at the queue: no notification can fall in between.
  const waiter = wakeups.subscribe(queueId);
  try {
    const start = await deps.starts.start({
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
    if (start.replacedPoll) wakeups.wake(queueId, waiter);
    if (start.outcome === 'answered') return { events: start.events, waited: false };
    return await waitForEvents(deps, queueId, pollId, waiter, request.clientGone);
  } finally {
    wakeups.unsubscribe(queueId, waiter);
  }
}

/**
 * How long a poll waits before its heartbeat: HEARTBEAT_SECONDS plus a random jitter, less the
 * heartbeat batch's tick (HeartbeatBatches), so that it is answered 45 to 55 s after it started,
 * as Zulip's. In whole ticks: Node keeps a timer list per distinct delay, and a delay drawn to the
 * fraction of a millisecond made a list per poll, whose making and removal were most of what the
 * timers cost (issue 27); on the grid the polls share about forty lists.
 */
export function heartbeatDelay(
  config: Pick<Config, 'heartbeatSeconds' | 'heartbeatJitterSeconds'>,
  tickMs: number,
  random: () => number = Math.random,
): number {
  const tick = Math.max(1, tickMs);
  const jitterTicks = Math.floor(Math.max(0, config.heartbeatJitterSeconds * 1000 - tick) / tick);
  return config.heartbeatSeconds * 1000 + Math.floor(random() * (jitterTicks + 1)) * tick;
}

async function waitForEvents(
  deps: EventsDeps,
  queueId: string,
  pollId: string,
  waiter: PollWaiter,
  clientGone: Departure,
): Promise<PollAnswer> {
  const { db, config, wakeups, heartbeats } = deps;
  const heartbeatDelayMs = heartbeatDelay(config, heartbeats.tickMs);
  const heartbeatAt = Date.now() + heartbeatDelayMs;
  // From now on the instance's periodic check (PollRechecks) renews this poll's lease and wakes it
  // if a notification was missed; the poll itself only looks again when woken.
  wakeups.hold(queueId, waiter, pollId);
  const onGone = () => waiter.notify();
  const stopListening = clientGone.onGone(onGone);
  if (clientGone.gone) waiter.notify();
  try {
    // The first wait takes the delay as drawn (the common case: nothing comes before the
    // heartbeat); later ones what is left of it.
    for (let waitMs = heartbeatDelayMs; ; waitMs = Math.max(0, heartbeatAt - Date.now())) {
      const notified = await waiter.wait(waitMs);
      if (clientGone.gone) {
        // Nothing is sent; the pending events stay for the next poll.
        await finishPoll(db, queueId, pollId);
        return null;
      }
      if (wakeups.closing) break;
      if (!notified || Date.now() >= heartbeatAt) {
        // Appended only while this poll holds the queue; the poll ends with every pending event.
        const events = await heartbeats.answer(queueId, pollId);
        if (events === null) throw badEventQueueId(queueId);
        return { events, waited: true };
      }
      // Woken by a notification or by the instance's periodic check.
      const outcome = await finishPollIfReady(db, queueId, pollId);
      if (outcome === undefined) throw badEventQueueId(queueId);
      if (outcome !== 'waiting')
        return { events: outcome, waited: true, ...(waiter.notifiedAt !== undefined && { notifiedAt: waiter.notifiedAt }) };
    }
  } finally {
    stopListening();
  }
  const events = await finishPoll(db, queueId, pollId);
  if (events === undefined) throw badEventQueueId(queueId);
  return { events, waited: true };
}

export async function deleteQueue(deps: Pick<EventsDeps, 'db' | 'wakeups'>, caller: QueueOwner, queueId: string): Promise<void> {
  if (!QUEUE_ID.test(queueId) || !(await deleteEventQueue(deps.db, caller, queueId))) throw badEventQueueId(queueId);
  deps.wakeups.wake(queueId);
}
