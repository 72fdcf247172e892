import { setTimeout as sleep } from 'node:timers/promises';
import { MAX_REQUESTS_PER_CLIENT, WATCHDOG_MS } from './config.js';
import { send, state, unavailable, violation, violations } from './outcomes.js';
import { readOthers, readSubscriptions, readViews, registerAndDelete } from './reads.js';
import { type ApiEvent, type SimUser } from './seed.js';
import { bulkUpdate, singleUpdate } from './settings.js';
import { addView, removeView, updateView } from './views.js';

// --- The virtual clients. ---

export const OPERATIONS: [number, (port: number, user: SimUser, realmUserIds: number[]) => Promise<void>][] = [
  [20, bulkUpdate],
  [10, singleUpdate],
  [8, addView],
  [7, updateView],
  [4, removeView],
  [4, readSubscriptions],
  [4, readViews],
  [2, registerAndDelete],
  [6, readOthers],
];
export const TOTAL_WEIGHT = OPERATIONS.reduce((sum, [weight]) => sum + weight, 0);

export function pickOperation() {
  let roll = Math.random() * TOTAL_WEIGHT;
  for (const [weight, operation] of OPERATIONS) {
    roll -= weight;
    if (roll < 0) return operation;
  }
  return OPERATIONS[0]![1];
}

export async function runClient(port: number, user: SimUser, realmUserIds: number[], deadline: number): Promise<void> {
  for (let i = 0; i < MAX_REQUESTS_PER_CLIENT && Date.now() < deadline && violations.length < 200 && !state.interrupted; i++) {
    await pickOperation()(port, user, realmUserIds);
  }
}

/** Long-polls the user's polled queue until told to stop; ids must be consecutive. */
export async function runPoller(port: number, user: SimUser, stop: () => boolean): Promise<number> {
  let last = -1;
  const until = Date.now() + WATCHDOG_MS;
  while (Date.now() < until && !state.interrupted) {
    const done = stop();
    const answer = await send(port, user, done ? 'final poll' : 'long poll', {
      method: 'GET',
      path: `/api/v1/events?queue_id=${user.queues.polled}&last_event_id=${last}${done ? '&dont_block=true' : ''}`,
      timeoutMs: 20_000,
    });
    if (unavailable(answer)) {
      await sleep(200); // the same poll again, as a client does after a 503
      continue;
    }
    if (!answer || answer.status !== 200) {
      violation(`${user.label} poll → ${answer?.status} ${answer?.body.slice(0, 200)}`);
      return last;
    }
    for (const event of answer.json!.events as ApiEvent[]) {
      if (event.id !== last + 1) violation(`${user.label} poll: event id ${String(event.id)} after ${last}`);
      last = Number(event.id);
      user.polled.push(event);
    }
    if (done) return last;
  }
  return last;
}

export async function registerQueues(port: number, user: SimUser): Promise<void> {
  const register = async (form: Record<string, string>) => {
    const answer = await send(port, user, 'register', {
      method: 'POST',
      path: '/api/v1/register',
      form: { queue_lifespan_secs: '604800', fetch_event_types: '[]', ...form },
    });
    if (answer?.status !== 200) throw new Error(`${user.label} could not register: ${answer?.status} ${answer?.body}`);
    return String(answer.json!.queue_id);
  };
  user.queues = {
    untouched: await register({}),
    polled: await register({}),
    viewsOnly: await register({ event_types: '["navigation_view"]' }),
  };
}
