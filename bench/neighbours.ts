import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import * as ops from '../src/cli/operations.js';
import type { Database } from '../src/db/database.js';
import { basicAuth, FORM, formBody, type Measurement, runLoad } from './load.js';
import type { RunningProcess } from '../scripts/lib/processes.js';
import type { Account } from './seed.js';
import type { SteadyLoadSpec } from './steady-load.js';

/**
 * One caller must not hurt another (issue 31): the latency of a small read in a small organization
 * (B), alone and while one account of the benchmark's large organization (A, about 21,000 users)
 * keeps asking for the whole user list (GET /users, and register with fetch_event_types
 * ["realm_user"]). The ratio of B's two medians is the figure.
 */

export const NEIGHBOURS = "large reads: another organization's GET /users/{id}";

const NEIGHBOUR_SUBDOMAIN = 'neighbour';
/**
 * B's requests per second, sent on schedule whether or not earlier ones were answered (an open
 * loop): a closed loop of a few connections would send almost nothing while the server is
 * blocked, and its median would not see the blocks at all.
 */
const VICTIM_RATE = 100;
/** A's one account: two requests in flight at a time, each connection alternating GET /users and register. */
const ATTACKER_CONNECTIONS = 2;

interface NeighbourRound {
  alone: Measurement;
  underLargeReads: Measurement;
  largeReads: Measurement;
}

export interface NeighbourFigures {
  rounds: NeighbourRound[];
  largeReadBytes: { users: number; register: number };
}

export interface Neighbour {
  caller: Account;
  targetUserId: number;
}

/** A second, small organization: a caller and the user it reads. */
export async function seedNeighbour(db: Database): Promise<Neighbour> {
  await ops.createRealm(db, { subdomain: NEIGHBOUR_SUBDOMAIN, name: 'Neighbour organization' });
  const caller = await ops.createUser(db, { realm: NEIGHBOUR_SUBDOMAIN, email: 'caller@neighbour.example', fullName: 'Nina Neighbour' });
  const target = await ops.createUser(db, { realm: NEIGHBOUR_SUBDOMAIN, email: 'target@neighbour.example', fullName: 'Ned Target' });
  return { caller: { id: caller.user_id, email: caller.email, apiKey: caller.api_key }, targetUserId: target.user_id };
}

const REGISTER_BODY = formBody({ fetch_event_types: '["realm_user"]' });

async function bodyBytes(server: RunningProcess, account: Account, method: 'GET' | 'POST', path: string): Promise<number> {
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: basicAuth(account.email, account.apiKey), ...(method === 'POST' && FORM) },
    ...(method === 'POST' && { body: REGISTER_BODY }),
    signal: AbortSignal.timeout(30_000),
  });
  const body = await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`${method} ${path} answered ${response.status}`);
  return body.byteLength;
}

/**
 * B's GET /users/{id} alone, then again while A's account repeats the large reads (both for
 * `durationSeconds`), in `rounds` alternations (the machine is shared and noisy). The server must be one with `EXTERNAL_HOST` at its default (B is reached
 * by its subdomain) and rate limiting off (else the attacker's requests would be refused, which
 * is not what is measured here).
 */
export async function measureNeighbours(options: {
  server: RunningProcess;
  neighbour: Neighbour;
  attacker: Account;
  durationSeconds: number;
  rounds: number;
  log: (line: string) => void;
}): Promise<NeighbourFigures> {
  const { server, neighbour, attacker, durationSeconds, log } = options;
  const largeReadBytes = {
    users: await bodyBytes(server, attacker, 'GET', '/api/v1/users'),
    register: await bodyBytes(server, attacker, 'POST', '/api/v1/register'),
  };
  log(`large reads: GET /users ${largeReadBytes.users} bytes, register ${largeReadBytes.register} bytes`);
  const victimLoad = (seconds = durationSeconds) =>
    steadyLoad({
      url: `${server.url}/api/v1/users/${neighbour.targetUserId}`,
      ratePerSecond: VICTIM_RATE,
      durationSeconds: seconds,
      headers: { authorization: basicAuth(neighbour.caller.email, neighbour.caller.apiKey), host: `${NEIGHBOUR_SUBDOMAIN}.localhost:9991` },
    });
  // Warm-up (connections, prepared statements, JIT) of both sides, not measured.
  await Promise.all([victimLoad(2), attackerLoad(server, attacker, 2)]);
  const rounds: NeighbourRound[] = [];
  for (let round = 0; round < options.rounds; round++) {
    const alone = await victimLoad();
    const [underLargeReads, largeReads] = await Promise.all([victimLoad(), attackerLoad(server, attacker, durationSeconds)]);
    log(
      `${NEIGHBOURS}: p50 alone ${alone.p50.toFixed(1)} ms, while A reads its users ${underLargeReads.p50.toFixed(1)} ms ` +
        `(p99 ${alone.p99.toFixed(1)} / ${underLargeReads.p99.toFixed(1)} ms); A: ${largeReads.total} large reads, p50 ${largeReads.p50.toFixed(0)} ms`,
    );
    rounds.push({ alone, underLargeReads, largeReads });
  }
  return { rounds, largeReadBytes };
}

/**
 * B's client runs in a process of its own: in this one, autocannon receiving A's 7 MB answers
 * would hold up B's timings.
 */
async function steadyLoad(spec: SteadyLoadSpec): Promise<Measurement> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'bench/steady-load.ts', JSON.stringify(spec)], {
    cwd: new URL('..', import.meta.url).pathname,
    timeout: (spec.durationSeconds + 60) * 1000,
  });
  return JSON.parse(stdout) as Measurement;
}

function attackerLoad(server: RunningProcess, attacker: Account, durationSeconds: number): Promise<Measurement> {
  return runLoad({
    url: server.url,
    connections: ATTACKER_CONNECTIONS,
    durationSeconds,
    headers: { authorization: basicAuth(attacker.email, attacker.apiKey) },
    requests: [
      { method: 'GET', path: '/api/v1/users' },
      { method: 'POST', path: '/api/v1/register', headers: FORM, body: REGISTER_BODY },
    ],
  });
}

const median = (values: number[]) => {
  const sorted = [...values].sort((x, y) => x - y);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

/** Every measurement of the scenario, to tell whether a request failed. */
export const neighbourMeasurements = (figures: NeighbourFigures): Measurement[] =>
  figures.rounds.flatMap((round) => [round.alone, round.underLargeReads, round.largeReads]);

/** The report's lines for the scenario: medians over the rounds, and each round. */
export function formatNeighbours(figures: NeighbourFigures): string {
  const { rounds, largeReadBytes } = figures;
  const ms = (value: number) => `${value.toFixed(1)} ms`;
  const of = (pick: (round: NeighbourRound) => number) => median(rounds.map(pick));
  const failed = neighbourMeasurements(figures).reduce((total, m) => total + m.non2xx + m.errors, 0);
  return [
    `${NEIGHBOURS} (organization B, ${VICTIM_RATE} requests/s on schedule), medians of ${rounds.length} rounds:`,
    `  alone: p50 ${ms(of((r) => r.alone.p50))}, p99 ${ms(of((r) => r.alone.p99))}`,
    `  while one account of A (about 21,000 users) repeats GET /users (${(largeReadBytes.users / 1e6).toFixed(1)} MB) and register ` +
      `with fetch_event_types=["realm_user"] (${(largeReadBytes.register / 1e6).toFixed(1)} MB) on ${ATTACKER_CONNECTIONS} connections: ` +
      `p50 ${ms(of((r) => r.underLargeReads.p50))}, p99 ${ms(of((r) => r.underLargeReads.p99))}`,
    `  ratio of the medians: ${of((r) => r.underLargeReads.p50 / r.alone.p50).toFixed(2)} (target ≤ 2; rounds: ` +
      `${rounds.map((r) => (r.underLargeReads.p50 / r.alone.p50).toFixed(2)).join(', ')}); A's large reads: ` +
      `${rounds.reduce((total, r) => total + r.largeReads.total, 0)}, p50 ${ms(of((r) => r.largeReads.p50))}; failed requests: ${failed}`,
  ].join('\n');
}
