import { createServer } from 'node:http';

/**
 * The floor of the long polls' steady state: the same clients and heartbeat cycle against a bare
 * node:http server, with nothing else (no framework, no authentication, no database, no log line).
 * Each GET /api/v1/events is held HEARTBEAT_SECONDS plus a random whole number of 250 ms steps up
 * to HEARTBEAT_JITTER_SECONDS, then answered with a heartbeat shaped as the server's; GET /ready
 * answers at once. What it costs is what Node's HTTP alone costs for the cycle (bench/longpoll.ts).
 * As the server does (HeartbeatWheel), the heartbeats falling due in one 250 ms tick are sent
 * together by one timer: with a timer per poll, each firing on its own, the floor cost 7.2 to 8.5 %
 * of a core at 10,000 polls here against 5.3 to 5.6 % this way.
 *
 * Environment: PORT, HOST (default 127.0.0.1), HEARTBEAT_SECONDS, HEARTBEAT_JITTER_SECONDS.
 */

const heartbeatMs = Number(process.env.HEARTBEAT_SECONDS ?? 45) * 1000;
const jitterSteps = Math.max(0, Math.floor((Number(process.env.HEARTBEAT_JITTER_SECONDS ?? 10) * 1000) / 250) - 1);

const TICK_MS = 250;
/** The heartbeats to send, by the tick they fall due in. */
const due = new Map<number, Set<() => void>>();
let lastTick = Math.floor(Date.now() / TICK_MS);
setInterval(() => {
  const now = Math.floor(Date.now() / TICK_MS);
  while (lastTick < now) {
    const polls = due.get(++lastTick);
    due.delete(lastTick);
    for (const answer of polls ?? []) answer();
  }
}, TICK_MS);

const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://floor');
  if (url.pathname === '/ready') {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ready"}');
    return;
  }
  const queueId = url.searchParams.get('queue_id');
  const lastEventId = Number(url.searchParams.get('last_event_id') ?? -1);
  const answer = () => {
    const body = JSON.stringify({ result: 'success', msg: '', events: [{ type: 'heartbeat', id: lastEventId + 1 }], queue_id: queueId });
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) }).end(body);
  };
  const tick = Math.ceil((Date.now() + heartbeatMs + Math.floor(Math.random() * (jitterSteps + 1)) * TICK_MS) / TICK_MS);
  let polls = due.get(tick);
  if (!polls) due.set(tick, (polls = new Set()));
  polls.add(answer);
  res.on('close', () => polls.delete(answer));
});
// Held polls and idle kept-alive connections are not timed out (the server's limits are longer than a cycle).
server.requestTimeout = 0;
server.headersTimeout = 0;
server.keepAliveTimeout = 120_000;
server.listen(Number(process.env.PORT), process.env.HOST ?? '127.0.0.1');
