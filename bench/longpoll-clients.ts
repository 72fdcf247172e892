import { Agent } from 'node:http';
import { connectClient, type Credentials, type PollingClient } from './polling-client.js';

/**
 * The steady state's connected clients in a process of their own, started by bench/longpoll.ts
 * (`fork`, IPC): 10,000 clients' sockets and answers cost their process garbage collections and
 * pauses of 10 to 40 ms, which, in the process that times the deliveries, made most of the slowest
 * deliveries (a pause there delays the write's answer or the poll's, not the servers). The
 * deliveries' own clients stay in the timing process.
 *
 * Messages in: `open` (the clients, each opened at `openedAt + index * spreadMs / total`),
 * `totals`, `stop`. Out: `ready`, `totals` ({ heartbeats, serverErrors }), `stopped`.
 */

export interface OpenMessage {
  type: 'open';
  url: string;
  keepAlive: boolean;
  openedAt: number;
  spreadMs: number;
  total: number;
  clients: (Credentials & { index: number; queueId: string })[];
}

export type ClientsMessage = OpenMessage | { type: 'totals' } | { type: 'stop' };

export interface ClientTotals {
  heartbeats: number;
  serverErrors: number;
}

export type ClientsReply = { type: 'ready' } | { type: 'stopped' } | ({ type: 'totals' } & ClientTotals);

const clients: PollingClient[] = [];
let agent: Agent | undefined;
let opening: NodeJS.Timeout | undefined;

const reply = (message: ClientsReply) => process.send!(message);

function open(message: OpenMessage): void {
  agent = new Agent({ keepAlive: message.keepAlive, maxSockets: Number.POSITIVE_INFINITY });
  let next = 0;
  // Every 10 ms, the clients whose time has come: evenly spread, as bench/longpoll.ts opens its own.
  opening = setInterval(() => {
    const now = Date.now();
    for (; next < message.clients.length; next++) {
      const client = message.clients[next]!;
      if (message.openedAt + (client.index * message.spreadMs) / message.total > now) return;
      clients.push(connectClient(message.url, agent!, client, client.queueId));
    }
    clearInterval(opening);
  }, 10);
}

process.on('message', (message: ClientsMessage) => {
  if (message.type === 'open') open(message);
  else if (message.type === 'totals')
    reply({
      type: 'totals',
      heartbeats: clients.reduce((sum, client) => sum + client.heartbeats(), 0),
      serverErrors: clients.reduce((sum, client) => sum + client.serverErrors(), 0),
    });
  else {
    clearInterval(opening);
    for (const client of clients) client.stop();
    agent?.destroy();
    reply({ type: 'stopped' });
    process.disconnect();
  }
});
// The bench ended (or failed): nothing is left holding polls.
process.on('disconnect', () => process.exit(0));
reply({ type: 'ready' });
