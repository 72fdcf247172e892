import { loadavg } from 'node:os';
import autocannon from 'autocannon';

/** One autocannon run against one server, reduced to the figures the report needs. */

export interface LoadSpec {
  /** Base URL, e.g. http://127.0.0.1:4000. */
  url: string;
  connections: number;
  /** Bounded in time; `amount` (when set) ends it earlier, after that many responses. */
  durationSeconds: number;
  amount?: number;
  /** Requests per second over all connections, at most (autocannon's overallRate); unset: as fast as answered. */
  overallRate?: number;
  /** Cycled through per connection. */
  requests: autocannon.Request[];
  headers: Record<string, string>;
}

export interface Measurement {
  requestsPerSecond: number;
  p50: number;
  /** Only where a scenario reports it (the poll storms' target is a p90). */
  p90?: number;
  p99: number;
  total: number;
  non2xx: number;
  /** Connection errors, timeouts included. */
  errors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
  durationSeconds: number;
  /** 1-minute load average when the run ended (the machine is shared). */
  load: number;
  /** CPU milliseconds per completed request, of the server process and of PostgreSQL (all backends). */
  cpuMsPerRequest?: { server: number; postgres: number };
  /** Requests/s of each round, when merged from alternating rounds. */
  roundsPerSecond?: number[];
}

export async function runLoad(spec: LoadSpec): Promise<Measurement> {
  const options: autocannon.Options = {
    url: spec.url,
    connections: spec.connections,
    duration: spec.durationSeconds,
    headers: spec.headers,
    requests: spec.requests,
    timeout: 30,
  };
  if (spec.amount !== undefined) options.amount = spec.amount;
  if (spec.overallRate !== undefined) options.overallRate = spec.overallRate;
  let guard: NodeJS.Timeout | undefined;
  // autocannon's histogram keeps whole milliseconds: a 3.9 ms p50 reads 3, which would decide the
  // bulk update's 1,000/1 ratio by rounding. The percentiles come from the exact times instead.
  const latencies: number[] = [];
  try {
    const result = await new Promise<autocannon.Result>((resolve, reject) => {
      const instance = autocannon(options, (error: Error | null, done: autocannon.Result) => (error ? reject(error) : resolve(done)));
      instance.on('response', (_client, statusCode, _bytes, responseTime) => {
        if (statusCode >= 200 && statusCode < 300) latencies.push(responseTime);
      });
      // amount takes precedence over duration in autocannon: keep the time bound ourselves.
      guard = setTimeout(() => instance.stop(), (spec.durationSeconds * 3 + 5) * 1000);
    });
    const statusCodes: Record<string, number> = {};
    for (const [code, stats] of Object.entries(result.statusCodeStats ?? {})) statusCodes[code] = stats.count ?? 0;
    return {
      // Requests completed per second over the whole run (autocannon's `average` is per-second samples).
      requestsPerSecond: result.requests.total / result.duration,
      p50: percentile(latencies, 0.5),
      p99: percentile(latencies, 0.99),
      total: result.requests.total,
      non2xx: result.non2xx,
      errors: result.errors,
      timeouts: result.timeouts,
      statusCodes,
      durationSeconds: result.duration,
      load: loadavg()[0]!,
    };
  } finally {
    clearTimeout(guard);
  }
}

/** The nearest-rank percentile, in milliseconds; 0 when there is no value. */
function percentile(values: number[], fraction: number): number {
  if (values.length === 0) return 0;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)]!;
}

/** Basic credentials as a client sends them. */
export function basicAuth(email: string, apiKey: string): string {
  return `Basic ${Buffer.from(`${email}:${apiKey}`).toString('base64')}`;
}

export const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

export function formBody(fields: Record<string, string>): string {
  return new URLSearchParams(fields).toString();
}

/** Several alternating runs of the floor and ours, merged (the machine is shared and noisy). */
export function mergeMeasurements(runs: Measurement[]): Measurement {
  const sum = (pick: (run: Measurement) => number) => runs.reduce((total, run) => total + pick(run), 0);
  const total = sum((run) => run.total);
  const statusCodes: Record<string, number> = {};
  for (const run of runs) for (const [code, count] of Object.entries(run.statusCodes)) statusCodes[code] = (statusCodes[code] ?? 0) + count;
  return {
    requestsPerSecond: total / sum((run) => run.durationSeconds),
    p50: sum((run) => run.p50) / runs.length,
    p99: Math.max(...runs.map((run) => run.p99)),
    total,
    non2xx: sum((run) => run.non2xx),
    errors: sum((run) => run.errors),
    timeouts: sum((run) => run.timeouts),
    statusCodes,
    durationSeconds: sum((run) => run.durationSeconds),
    load: Math.max(...runs.map((run) => run.load)),
    roundsPerSecond: runs.map((run) => run.requestsPerSecond),
    ...(runs.every((run) => run.cpuMsPerRequest) && {
      cpuMsPerRequest: {
        server: sum((run) => run.cpuMsPerRequest!.server * run.total) / total,
        postgres: sum((run) => run.cpuMsPerRequest!.postgres * run.total) / total,
      },
    }),
  };
}
