import { setTimeout as sleep } from 'node:timers/promises';
import type { Client, Exchange, LoadUser } from '../lb/traffic.js';

/**
 * The mixed load of `npm run test:failover`, through the app's balancer: per user a writer
 * (settings: a bulk color update of three channels; a navigation view), a reader and a long
 * poller, plus registers. Unlike test:lb's loops, every write attempt is kept with its answer,
 * whatever it was, so the checks can tell what a 503 (or 504) left behind.
 */

type ApiEvent = Record<string, unknown>;

export interface WriteAttempt {
  user: number;
  kind: 'color' | 'view';
  /** The color (unique to this attempt) or the view's fragment (unique too). */
  key: string;
  streamIds: number[];
  name?: string;
  startedAt: number;
  endedAt: number;
  status: number;
  /** The events an applied attempt makes, in order. */
  events: ApiEvent[];
}

const pause = (ms: number) => sleep(ms * (0.5 + Math.random()));

export async function writeLoop(
  client: Client,
  user: LoadUser,
  stop: () => boolean,
  pauseMs: number,
  attempts: WriteAttempt[],
): Promise<void> {
  for (let n = 0; !stop(); n++) {
    const startedAt = Date.now();
    let attempt: Omit<WriteAttempt, 'status' | 'endedAt'>;
    let exchange: Exchange;
    if (n % 2 === 0) {
      const color = `#${(user.index * 0x10000 + n).toString(16).padStart(6, '0')}`;
      const streams = user.streamIds.slice(0, 3);
      const data = streams.map((streamId) => ({ stream_id: streamId, property: 'color', value: color }));
      attempt = {
        user: user.index,
        kind: 'color',
        key: color,
        streamIds: streams,
        startedAt,
        events: streams.map((streamId) => ({ type: 'subscription', op: 'update', stream_id: streamId, property: 'color', value: color })),
      };
      exchange = await client.send({
        kind: 'write',
        path: '/api/v1/users/me/subscriptions/properties',
        authorization: user.authorization,
        form: { subscription_data: JSON.stringify(data) },
      });
    } else {
      const view = { fragment: `narrow/channel/${user.streamIds[0]}-fo/user/${user.index}/${n}`, name: `FO ${user.index} ${n}` };
      attempt = {
        user: user.index,
        kind: 'view',
        key: view.fragment,
        name: view.name,
        streamIds: [],
        startedAt,
        events: [{ type: 'navigation_view', op: 'add', navigation_view: { ...view, is_pinned: false } }],
      };
      exchange = await client.send({
        kind: 'write',
        path: '/api/v1/navigation_views',
        authorization: user.authorization,
        form: { ...view, is_pinned: 'false' },
      });
    }
    attempts.push({ ...attempt, status: exchange.status, endedAt: Date.now() });
    await pause(pauseMs);
  }
}

/** One user's reads, one after another until `stop()`. */
export async function readLoop(client: Client, user: LoadUser, stop: () => boolean, pauseMs: number): Promise<void> {
  const paths = [`/api/v1/users/${user.id}`, '/api/v1/users/me/subscriptions', '/api/v1/navigation_views', '/api/v1/users'];
  for (let n = 0; !stop(); n++) {
    await client.send({ kind: 'read', path: paths[n % paths.length]!, authorization: user.authorization });
    await pause(pauseMs);
  }
}

/** Registers until `stop()`: each queue answered 200 must exist afterwards. */
export async function registerLoop(
  client: Client,
  users: LoadUser[],
  stop: () => boolean,
  pauseMs: number,
  registered: string[],
): Promise<void> {
  for (let n = 0; !stop(); n++) {
    const exchange = await client.send({
      kind: 'register',
      path: '/api/v1/register',
      authorization: users[n % users.length]!.authorization,
      form: { event_types: JSON.stringify(['navigation_view']) },
    });
    const queueId = (exchange.body as { queue_id?: string } | undefined)?.queue_id;
    if (exchange.status === 200 && queueId) registered.push(queueId);
    await pause(pauseMs);
  }
}

export interface Polling {
  /** The events received on the queues that survived (all of them unless `reregistered`). */
  events: ApiEvent[];
  polls: number;
  /** Answers by status (0: none arrived). */
  statuses: Record<number, number>;
  /** The queue was gone (BAD_EVENT_QUEUE_ID) and a new one was registered, as Zulip's clients do. */
  reregistered: number;
}

/**
 * Long polls one queue as a Zulip client does: after a 5xx it waits and polls the same queue
 * again from where it was; after BAD_EVENT_QUEUE_ID it registers a new queue. Stops once `done`
 * holds after an answer.
 */
export async function pollLoop(client: Client, user: LoadUser, queueId: string, done: (events: ApiEvent[]) => boolean): Promise<Polling> {
  const polling: Polling = { events: [], polls: 0, statuses: {}, reregistered: 0 };
  let queue = queueId;
  let lastEventId = -1;
  while (!done(polling.events)) {
    const exchange = await client.send({
      kind: 'poll',
      path: `/api/v1/events?queue_id=${queue}&last_event_id=${lastEventId}`,
      authorization: user.authorization,
      timeoutMs: 100_000,
    });
    polling.polls++;
    polling.statuses[exchange.status] = (polling.statuses[exchange.status] ?? 0) + 1;
    const body = exchange.body as { code?: string; events?: (ApiEvent & { id: number })[] } | undefined;
    if (exchange.status === 400 && body?.code === 'BAD_EVENT_QUEUE_ID') {
      const again = await client.send({
        kind: 'register',
        path: '/api/v1/register',
        authorization: user.authorization,
        form: { event_types: JSON.stringify(['subscription', 'navigation_view']) },
      });
      const newQueue = (again.body as { queue_id?: string } | undefined)?.queue_id;
      if (again.status === 200 && newQueue) {
        queue = newQueue;
        lastEventId = -1;
        polling.reregistered++;
      } else {
        await sleep(500);
      }
      continue;
    }
    if (exchange.status !== 200 || !body?.events) {
      await sleep(500);
      continue;
    }
    for (const event of body.events) {
      lastEventId = Math.max(lastEventId, event.id);
      if (event.type !== 'heartbeat') polling.events.push(event);
    }
  }
  return polling;
}
