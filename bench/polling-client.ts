import { Agent, request } from 'node:http';
import { basicAuth } from './load.js';

/**
 * The long-poll scenario's connected clients (bench/longpoll.ts): each holds a blocking
 * GET /events and polls again after every answer, with the new last_event_id.
 */

/** What a client authenticates with. */
export interface Credentials {
  email: string;
  apiKey: string;
}

/** A connected client: it polls again after every answer, as the official clients do. */
export interface PollingClient {
  /** Resolves with the next answer that carries something other than heartbeats. */
  nextDelivery(): Promise<void>;
  /** Heartbeats received so far. */
  heartbeats(): number;
  /** Polls answered with a 5xx so far (each waited out and sent again). */
  serverErrors(): number;
  stop(): void;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function getEvents(url: string, agent: Agent, account: Credentials, queueId: string, lastEventId: number) {
  const target = new URL(`${url}/api/v1/events?queue_id=${queueId}&last_event_id=${lastEventId}`);
  let cancel = () => {};
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(target, { agent, headers: { authorization: basicAuth(account.email, account.apiKey) } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
    cancel = () => req.destroy();
  });
  return { answer, cancel: () => cancel() };
}

/** A blocking GET /events loop on its own connection (one socket per poll, as separate clients have). */
export function connectClient(url: string, agent: Agent, account: Credentials, queueId: string): PollingClient {
  let heartbeats = 0;
  let retried = 0;
  let stopped = false;
  let cancelCurrent = () => {};
  let delivered: (() => void) | undefined;
  let failed: ((error: Error) => void) | undefined;
  void (async () => {
    let lastEventId = -1;
    while (!stopped) {
      const current = getEvents(url, agent, account, queueId, lastEventId);
      cancelCurrent = current.cancel;
      let answer: { status: number; body: string };
      try {
        answer = await current.answer;
      } catch (error) {
        if (!stopped) failed?.(error as Error);
        return;
      }
      if (answer.status >= 500 && !stopped) {
        // As the official clients do: a server error is waited out and the same poll sent again.
        retried++;
        await sleep(1000);
        continue;
      }
      if (answer.status !== 200) {
        failed?.(new Error(`GET /events answered ${answer.status}: ${answer.body}`));
        return;
      }
      const events = (JSON.parse(answer.body) as { events: { id: number; type: string }[] }).events;
      heartbeats += events.filter((event) => event.type === 'heartbeat').length;
      if (events.length > 0) lastEventId = events.at(-1)!.id;
      if (events.some((event) => event.type !== 'heartbeat')) delivered?.();
    }
  })();
  return {
    nextDelivery: () =>
      new Promise<void>((resolve, reject) => {
        delivered = resolve;
        failed = reject;
      }),
    heartbeats: () => heartbeats,
    serverErrors: () => retried,
    stop: () => {
      stopped = true;
      cancelCurrent();
    },
  };
}
