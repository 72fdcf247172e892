import { createServer } from 'node:http';

/**
 * The floor of the long polls' steady state: the same clients and heartbeat cycle against a bare
 * node:http server, with nothing else (no framework, no authentication, no database, no log line).
 * Each GET /api/v1/events is held HEARTBEAT_SECONDS plus a random whole number of 250 ms steps up
 * to HEARTBEAT_JITTER_SECONDS, then answered with a heartbeat shaped as the server's; GET /ready
 * answers at once. What it costs is what Node's HTTP alone costs for the cycle (bench/longpoll.ts).
 *
 * Environment: PORT, HOST (default 127.0.0.1), HEARTBEAT_SECONDS, HEARTBEAT_JITTER_SECONDS.
 */

const heartbeatMs = Number(process.env.HEARTBEAT_SECONDS ?? 45) * 1000;
const jitterSteps = Math.max(0, Math.floor((Number(process.env.HEARTBEAT_JITTER_SECONDS ?? 10) * 1000) / 250) - 1);

const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://floor');
  if (url.pathname === '/ready') {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ready"}');
    return;
  }
  const queueId = url.searchParams.get('queue_id');
  const lastEventId = Number(url.searchParams.get('last_event_id') ?? -1);
  const timer = setTimeout(
    () => {
      const body = JSON.stringify({ result: 'success', msg: '', events: [{ type: 'heartbeat', id: lastEventId + 1 }], queue_id: queueId });
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) }).end(body);
    },
    heartbeatMs + Math.floor(Math.random() * (jitterSteps + 1)) * 250,
  );
  res.on('close', () => clearTimeout(timer));
});
// Held polls and idle kept-alive connections are not timed out (the server's limits are longer than a cycle).
server.requestTimeout = 0;
server.headersTimeout = 0;
server.keepAliveTimeout = 120_000;
server.listen(Number(process.env.PORT), process.env.HOST ?? '127.0.0.1');
