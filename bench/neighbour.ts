import { basicAuth, FORM, type Measurement, mergeMeasurements, runLoad } from './load.js';
import type { RunningProcess } from '../scripts/lib/processes.js';
import { bulkBody, rotating, updateSetting } from './scenarios.js';
import type { Seeded } from './seed.js';

/**
 * The noisy neighbour across instances: 1,000 victims send 1-entry settings updates to
 * instance A, first alone, then while one account sends 1,000-entry updates (large writes, which
 * hold its user lock for their whole transaction) to instance B, one after the other on 2
 * connections (or `largePerSecond` of them), and 1-entry updates to A on 2 connections, each as
 * soon as the previous one is answered. Unpaced, B's large writes keep one PostgreSQL backend busy:
 * part of what the victims feel with the fix is that CPU on the 2-core machine, not the lock;
 * paced (BENCH_NEIGHBOUR_LARGE_PER_SECOND), less of it. Before
 * the fix, each of that account's small writes on A waited in its commit group, on a shared write
 * connection, for the lock held by B: every victim write in the group or queued on that connection
 * waited too. Reported: the victims' p99 with the neighbour over their p99 without (target ≤ 2),
 * per round (the two runs of a round are next to each other in time: the shared machine's load
 * changes from minute to minute) and the median of the rounds' ratios.
 */

export const NEIGHBOUR = 'writes while one account writes large from another instance';

/**
 * The victims' concurrency: below saturation on the 2-core benchmark machine, so that their p99 is
 * the latency of a write (including a wait for a group held up by someone else's lock), not the
 * length of a queue of our own making.
 */
const VICTIM_CONNECTIONS = 10;

export interface NeighbourFigures {
  alone: Measurement;
  attacked: Measurement;
  /** The neighbour's 1,000-entry updates on B and 1-entry updates on A, during the attacked runs. */
  large: Measurement;
  small: Measurement;
  /** Each round's victims' p99, alone and with the neighbour. */
  rounds: { alone: number; attacked: number }[];
}

export async function measureNeighbour(options: {
  a: RunningProcess;
  b: RunningProcess;
  seeded: Seeded;
  writers: number;
  warmupSeconds: number;
  durationSeconds: number;
  rounds: number;
  /** The neighbour's large writes per second; 0: as fast as B answers them. */
  largePerSecond: number;
  /** Waits until the requests abandoned by the previous run are done. */
  quiet: () => Promise<void>;
  log: (line: string) => void;
}): Promise<NeighbourFigures> {
  const { a, b, seeded, warmupSeconds, durationSeconds, quiet, log } = options;
  const writers = seeded.rotating.slice(0, options.writers);
  const victims = (seconds: number) =>
    runLoad({
      url: a.url,
      connections: VICTIM_CONNECTIONS,
      durationSeconds: seconds,
      headers: { authorization: basicAuth(writers[0]!.email, writers[0]!.apiKey) },
      requests: [rotating(writers, updateSetting)],
    });
  const path = '/api/v1/users/me/subscriptions/properties';
  const neighbour = { authorization: basicAuth(seeded.caller.email, seeded.caller.apiKey) };
  const writesOf = (size: number) =>
    [true, false].map((flip) => ({ method: 'POST' as const, path, headers: FORM, body: bulkBody(seeded.callerStreamIds, size, flip) }));
  const runs = { alone: [] as Measurement[], attacked: [] as Measurement[], large: [] as Measurement[], small: [] as Measurement[] };
  for (let round = 0; round < options.rounds; round++) {
    await quiet();
    await victims(warmupSeconds);
    runs.alone.push(await victims(durationSeconds));
    log(`${NEIGHBOUR}, round ${round + 1}: victims alone p99 ${runs.alone.at(-1)!.p99.toFixed(1)} ms`);
    await quiet();
    // The neighbour runs through the victims' warm-up and measured run, and a little past them.
    const seconds = warmupSeconds + durationSeconds + 1;
    const pace = options.largePerSecond > 0 ? { overallRate: options.largePerSecond } : {};
    const large = runLoad({ url: b.url, connections: 2, ...pace, durationSeconds: seconds, headers: neighbour, requests: writesOf(1000) });
    const small = runLoad({ url: a.url, connections: 2, durationSeconds: seconds, headers: neighbour, requests: writesOf(1) });
    await victims(warmupSeconds);
    runs.attacked.push(await victims(durationSeconds));
    runs.large.push(await large);
    runs.small.push(await small);
    log(
      `${NEIGHBOUR}, round ${round + 1}: victims with the neighbour p99 ${runs.attacked.at(-1)!.p99.toFixed(1)} ms ` +
        `(neighbour: ${runs.large.at(-1)!.total} large writes on B, ${runs.small.at(-1)!.total} small ones on A)`,
    );
  }
  return {
    alone: mergeMeasurements(runs.alone),
    attacked: mergeMeasurements(runs.attacked),
    large: mergeMeasurements(runs.large),
    small: mergeMeasurements(runs.small),
    rounds: runs.alone.map((alone, round) => ({ alone: alone.p99, attacked: runs.attacked[round]!.p99 })),
  };
}

export function formatNeighbour(figures: NeighbourFigures, writers: number, largePerSecond: number): string {
  const { alone, attacked, large, small, rounds } = figures;
  const ratios = rounds.map((round) => round.attacked / round.alone).sort((x, y) => x - y);
  const ratio =
    ratios.length % 2 === 1 ? ratios[(ratios.length - 1) / 2]! : (ratios[ratios.length / 2 - 1]! + ratios[ratios.length / 2]!) / 2;
  const line = (m: Measurement) =>
    `${m.requestsPerSecond.toFixed(0)} req/s, p50 ${m.p50.toFixed(1)} ms, p99 ${m.p99.toFixed(1)} ms, status ${JSON.stringify(m.statusCodes)}, errors ${m.errors}`;
  return [
    `Noisy neighbour across instances: ${writers} victims' 1-entry settings updates on instance A, ${VICTIM_CONNECTIONS} connections; the account: 1,000-entry updates on B (${largePerSecond > 0 ? `${largePerSecond}/s` : 'unpaced'}), 1-entry ones on A (p99: the worst round)`,
    `  victims alone:                           ${line(alone)}`,
    `  victims while one account writes large:  ${line(attacked)}`,
    `  the account's 1,000-entry updates on B:  ${line(large)}`,
    `  the account's 1-entry updates on A:      ${line(small)}`,
    `  victims' p99 by round, without → with: ${rounds.map((round) => `${round.alone.toFixed(1)} → ${round.attacked.toFixed(1)} ms`).join(', ')}`,
    `  victims' p99 with / without, median of the rounds: ${ratio.toFixed(2)} × (target ≤ 2: ${ratio <= 2 ? 'met' : 'MISSED'})`,
  ].join('\n');
}
