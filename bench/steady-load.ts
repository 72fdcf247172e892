import { Agent, request } from 'node:http';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import type { Measurement } from './load.js';

/**
 * An open-loop client, run as a process of its own by bench/neighbours.ts: requests leave on
 * schedule whether or not the earlier ones were answered, so a blocked server shows in the
 * latencies (a closed loop of a few connections sends almost nothing while the server is blocked,
 * and its median never sees the blocks). Prints the Measurement as JSON.
 *
 *   node --import tsx bench/steady-load.ts '{"url":…,"ratePerSecond":100,"durationSeconds":10,"headers":{…}}'
 */

export interface SteadyLoadSpec {
  url: string;
  ratePerSecond: number;
  durationSeconds: number;
  headers: Record<string, string>;
  /** GET unless set; `body` is sent with each request. */
  method?: 'GET' | 'POST';
  body?: string;
  /**
   * Each request sent once the previous one answered, for `durationSeconds` (`ratePerSecond` unused):
   * for one user's writes, which take turns anyway, so that the figure is a write's latency, not
   * a queue of the client's own making.
   */
  oneAtATime?: boolean;
}

/** GET (or `method`) `url` `ratePerSecond` times a second for `durationSeconds`, each timed from when it was sent. */
async function steadyLoad({
  url,
  ratePerSecond,
  durationSeconds,
  headers,
  method = 'GET',
  body,
  oneAtATime,
}: SteadyLoadSpec): Promise<Measurement> {
  const agent = new Agent({ keepAlive: true });
  const latencies: number[] = [];
  const statusCodes: Record<string, number> = {};
  let errors = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const sent = performance.now();
      const outgoing = request(url, { agent, method, headers, timeout: 30_000 }, (response) => {
        response.resume();
        response.on('end', () => {
          const code = String(response.statusCode);
          statusCodes[code] = (statusCodes[code] ?? 0) + 1;
          if (code === '200') latencies.push(performance.now() - sent);
          resolve();
        });
      });
      outgoing.on('error', () => {
        errors++;
        resolve();
      });
      outgoing.end(body);
    });
  const inFlight: Promise<void>[] = [];
  const started = performance.now();
  while (oneAtATime && performance.now() - started < durationSeconds * 1000) await one();
  for (let i = 0; !oneAtATime && i < durationSeconds * ratePerSecond; i++) {
    const due = started + (i * 1000) / ratePerSecond;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    inFlight.push(one());
  }
  await Promise.all(inFlight);
  agent.destroy();
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const at = (fraction: number) => latencies[Math.min(latencies.length - 1, Math.ceil(fraction * latencies.length) - 1)] ?? 0;
  const total = Object.values(statusCodes).reduce((sum, count) => sum + count, 0);
  return {
    requestsPerSecond: total / seconds,
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    total,
    non2xx: total - latencies.length,
    errors,
    timeouts: 0,
    statusCodes,
    durationSeconds: seconds,
    load: loadavg()[0]!,
  };
}

if (process.argv[2]) console.log(JSON.stringify(await steadyLoad(JSON.parse(process.argv[2]) as SteadyLoadSpec)));
