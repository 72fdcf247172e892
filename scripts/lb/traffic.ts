import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

/** The clients of the load-balancer test: every request goes through HAProxy and is recorded. */

export interface Exchange {
  kind: string;
  method: string;
  /** The path without the query string, as both logs have it. */
  path: string;
  /** The X-Request-Id sent (undefined: none). */
  sentId: string | undefined;
  /** The x-request-id of the answer. */
  answerId: string | null;
  /** 0 when no answer arrived (the error says why). */
  status: number;
  error?: string;
  body: unknown;
}

export interface Send {
  kind: string;
  method?: string;
  path: string;
  authorization?: string;
  form?: Record<string, string>;
  body?: string;
  headers?: Record<string, string>;
  /** Default: a fresh valid id, every tenth one invalid (a space), which the balancer replaces. */
  requestId?: string;
  timeoutMs?: number;
}

/**
 * Keep-alive connections to the balancer, as real clients hold them. node:http rather than fetch,
 * which does not send a Host header of its own. An idle connection is closed after 20 s, before
 * HAProxy's 60 s idle timeout could close it under a request being sent.
 */
const agent = new http.Agent({ keepAlive: true, timeout: 20_000 });

function exchangeOnce(url: string, method: string, headers: Record<string, string>, body: string | undefined, timeoutMs: number) {
  return new Promise<{ status: number; requestId: string | null; text: string }>((resolve, reject) => {
    const request = http.request(url, { method, headers, agent, timeout: timeoutMs }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () =>
        resolve({ status: response.statusCode ?? 0, requestId: (response.headers['x-request-id'] as string | undefined) ?? null, text }),
      );
      response.on('error', reject);
    });
    request.on('timeout', () => request.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    request.on('error', reject);
    request.end(body);
  });
}

export const VALID_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export class Client {
  readonly exchanges: Exchange[] = [];
  #sequence = 0;

  constructor(
    readonly baseUrl: string,
    readonly host: string,
  ) {}

  async send(request: Send): Promise<Exchange> {
    const sequence = this.#sequence++;
    const sentId = request.requestId ?? (sequence % 10 === 9 ? `lb ${sequence}` : `lb-${sequence}`);
    const method = request.method ?? (request.form || request.body ? 'POST' : 'GET');
    const body = request.form ? new URLSearchParams(request.form).toString() : request.body;
    const exchange: Exchange = {
      kind: request.kind,
      method,
      path: request.path.split('?', 1)[0]!,
      sentId,
      answerId: null,
      status: 0,
      body: undefined,
    };
    this.exchanges.push(exchange);
    const headers: Record<string, string> = {
      host: this.host,
      'x-request-id': sentId,
      ...(request.authorization && { authorization: request.authorization }),
      ...(body !== undefined && { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(Buffer.byteLength(body)) }),
      ...request.headers,
    };
    try {
      const answer = await exchangeOnce(this.baseUrl + request.path, method, headers, body, request.timeoutMs ?? 30_000);
      exchange.status = answer.status;
      exchange.answerId = answer.requestId;
      try {
        exchange.body = JSON.parse(answer.text) as unknown;
      } catch {
        exchange.body = answer.text;
      }
    } catch (error) {
      exchange.error = String(error);
    }
    return exchange;
  }
}

export interface LoadUser {
  index: number;
  id: number;
  authorization: string;
  streamIds: number[];
}

type ApiEvent = Record<string, unknown>;

/** What one user's writer had accepted, in order, and the events each accepted write promises. */
export interface Writes {
  colors: { streamId: number; color: string }[];
  views: { fragment: string; name: string }[];
  events: ApiEvent[];
}

const pause = (ms: number) => sleep(ms * (0.5 + Math.random()));

/**
 * One user's writes, one after another until `stop()`: a bulk update of three channels' colors
 * (a color no request used before) and a navigation view with a unique fragment, in turn.
 */
export async function writeLoop(client: Client, user: LoadUser, stop: () => boolean, pauseMs: number): Promise<Writes> {
  const writes: Writes = { colors: [], views: [], events: [] };
  for (let n = 0; !stop(); n++) {
    if (n % 2 === 0) {
      const color = `#${(user.index * 0x10000 + n).toString(16).padStart(6, '0')}`;
      const streams = user.streamIds.slice(0, 3);
      const data = streams.map((streamId) => ({ stream_id: streamId, property: 'color', value: color }));
      const exchange = await client.send({
        kind: 'write',
        path: '/api/v1/users/me/subscriptions/properties',
        authorization: user.authorization,
        form: { subscription_data: JSON.stringify(data) },
      });
      if (exchange.status === 200) {
        for (const streamId of streams) {
          writes.colors.push({ streamId, color });
          writes.events.push({ type: 'subscription', op: 'update', stream_id: streamId, property: 'color', value: color });
        }
      }
    } else {
      const view = { fragment: `narrow/channel/${user.streamIds[0]}-lb/user/${user.index}/${n}`, name: `LB ${user.index} ${n}` };
      const exchange = await client.send({
        kind: 'write',
        path: '/api/v1/navigation_views',
        authorization: user.authorization,
        form: { fragment: view.fragment, name: view.name, is_pinned: 'false' },
      });
      if (exchange.status === 200) {
        writes.views.push(view);
        writes.events.push({ type: 'navigation_view', op: 'add', navigation_view: { ...view, is_pinned: false } });
      }
    }
    await pause(pauseMs);
  }
  return writes;
}

/** One user's reads, one after another until `stop()`. */
export async function readLoop(client: Client, user: LoadUser, stop: () => boolean, pauseMs: number): Promise<void> {
  const paths = [`/api/v1/users/${user.id}`, '/api/v1/users/me/subscriptions', '/api/v1/navigation_views', '/api/v1/users'];
  for (let n = 0; !stop(); n++) {
    await client.send({ kind: 'read', path: paths[n % paths.length]!, authorization: user.authorization });
    await pause(pauseMs);
  }
}

export interface Polling {
  events: ApiEvent[];
  polls: number;
  /** Polls answered with no events: by a closing instance. */
  emptyAnswers: number;
  heartbeats: number;
  /** How long the last poll was held. */
  lastHeldMs: number;
}

/** Registers a queue through the balancer. */
export async function register(client: Client, user: LoadUser, eventTypes: string[]): Promise<string> {
  const exchange = await client.send({
    kind: 'register',
    path: '/api/v1/register',
    authorization: user.authorization,
    form: { event_types: JSON.stringify(eventTypes) },
  });
  const queueId = (exchange.body as { queue_id?: string } | undefined)?.queue_id;
  if (exchange.status !== 200 || !queueId) throw new Error(`register failed: ${exchange.status} ${JSON.stringify(exchange.body)}`);
  return queueId;
}

/**
 * Long polls one queue, as a Zulip client does: each answer's events are taken and the next poll
 * asks for what follows; an answer with no events (an instance closing) is simply polled again.
 * Stops once `done` holds after an answer, or when an answer is not a 200.
 */
export async function pollLoop(client: Client, user: LoadUser, queueId: string, done: (polling: Polling) => boolean): Promise<Polling> {
  const polling: Polling = { events: [], polls: 0, emptyAnswers: 0, heartbeats: 0, lastHeldMs: 0 };
  let lastEventId = -1;
  while (!done(polling)) {
    const startedAt = Date.now();
    const exchange = await client.send({
      kind: 'poll',
      path: `/api/v1/events?queue_id=${queueId}&last_event_id=${lastEventId}`,
      authorization: user.authorization,
      timeoutMs: 100_000,
    });
    polling.polls++;
    polling.lastHeldMs = Date.now() - startedAt;
    if (exchange.status !== 200) break;
    const events = (exchange.body as { events: (ApiEvent & { id: number })[] }).events;
    if (events.length === 0) polling.emptyAnswers++;
    for (const event of events) {
      lastEventId = Math.max(lastEventId, event.id);
      if (event.type === 'heartbeat') polling.heartbeats++;
      else polling.events.push(event);
    }
  }
  return polling;
}
