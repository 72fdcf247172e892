import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import * as ops from '../src/cli/operations.js';
import { basicAuth, FORM, formBody, type Measurement, runLoad } from './load.js';
import type { RunningProcess } from '../scripts/lib/processes.js';
import type { Account } from './seed.js';
import type { SteadyLoadSpec } from './steady-load.js';

/**
 * One caller must not hurt another: the latency of a small read in a small organization
 * (B), alone and while one account of the benchmark's large organization (A, about 21,000 users)
 * keeps asking for the whole user list (GET /users, and register with fetch_event_types
 * ["realm_user"]). The ratio of B's two medians is the figure.
 */

export const NEIGHBOURS = "large reads: another organization's GET /users/{id}";

export const NEIGHBOUR_SUBDOMAIN = 'neighbour';
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
export async function seedNeighbour(operator: ops.Operator): Promise<Neighbour> {
  const { db } = operator;
  await ops.createRealm(db, { subdomain: NEIGHBOUR_SUBDOMAIN, name: 'Neighbour organization' });
  const caller = await ops.createUser(operator, {
    realm: NEIGHBOUR_SUBDOMAIN,
    email: 'caller@neighbour.example',
    fullName: 'Nina Neighbour',
  });
  const target = await ops.createUser(operator, { realm: NEIGHBOUR_SUBDOMAIN, email: 'target@neighbour.example', fullName: 'Ned Target' });
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
/** What a scenario of one attacker of A beside B's victim is given. */
interface NeighbourScenario {
  server: RunningProcess;
  neighbour: Neighbour;
  attacker: Account;
  durationSeconds: number;
  rounds: number;
  log: (line: string) => void;
}

export async function measureNeighbours(options: NeighbourScenario): Promise<NeighbourFigures> {
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

/** One account's poll storms (N9): the same organization-B victim, its subscriptions instead of a user. */
export const POLL_STORMS = "poll storms: another organization's GET /users/me/subscriptions";

/** Polls of one queue the attacker sends at once, again as soon as all but one have answered. */
const STORM_POLLS = 200;

export interface PollStormFigures {
  rounds: { alone: Measurement; underStorms: Measurement; polls: number; failedPolls: number }[];
}

/**
 * B's GET /users/me/subscriptions alone, then while one account of A sends STORM_POLLS blocking
 * polls of one of its queues at once, over and over (a client's retry loop): each replaces the one
 * before it, which answers at once, and the newest waits. In `rounds` alternations.
 */
export async function measurePollStorms(options: NeighbourScenario): Promise<PollStormFigures> {
  const { server, neighbour, attacker, durationSeconds, log } = options;
  const victimLoad = (seconds = durationSeconds) =>
    steadyLoad({
      url: `${server.url}/api/v1/users/me/subscriptions`,
      ratePerSecond: VICTIM_RATE,
      durationSeconds: seconds,
      headers: { authorization: basicAuth(neighbour.caller.email, neighbour.caller.apiKey), host: `${NEIGHBOUR_SUBDOMAIN}.localhost:9991` },
    });
  await victimLoad(2);
  const rounds: PollStormFigures['rounds'] = [];
  for (let round = 0; round < options.rounds; round++) {
    const alone = await victimLoad();
    const [underStorms, storms] = await Promise.all([victimLoad(), pollStorms(server, attacker, durationSeconds)]);
    log(
      `${POLL_STORMS}: p50 alone ${alone.p50.toFixed(1)} ms, during the storms ${underStorms.p50.toFixed(1)} ms ` +
        `(p99 ${alone.p99.toFixed(1)} / ${underStorms.p99.toFixed(1)} ms); A: ${storms.polls} polls answered, ${storms.failedPolls} not 200`,
    );
    rounds.push({ alone, underStorms, ...storms });
  }
  return { rounds };
}

async function pollStorms(
  server: RunningProcess,
  attacker: Account,
  durationSeconds: number,
): Promise<{ polls: number; failedPolls: number }> {
  const headers = { authorization: basicAuth(attacker.email, attacker.apiKey) };
  const registered = await fetch(`${server.url}/api/v1/register`, {
    method: 'POST',
    headers: { ...headers, ...FORM },
    body: formBody({ event_types: '["heartbeat"]' }),
  });
  const { queue_id: queueId } = (await registered.json()) as { queue_id: string };
  const url = (dontBlock: boolean) =>
    `${server.url}/api/v1/events?queue_id=${queueId}&last_event_id=-1${dontBlock ? '&dont_block=true' : ''}`;
  let polls = 0;
  let failedPolls = 0;
  const sent: Promise<void>[] = [];
  const end = Date.now() + durationSeconds * 1000;
  while (Date.now() < end) {
    let answered = 0;
    let allButOne: () => void = () => undefined;
    const waited = new Promise<void>((resolve) => (allButOne = resolve));
    for (let i = 0; i < STORM_POLLS; i++) {
      sent.push(
        fetch(url(false), { headers, signal: AbortSignal.timeout(120_000) }).then(
          async (response) => {
            await response.arrayBuffer();
            polls++;
            if (response.status !== 200) failedPolls++;
            if (++answered === STORM_POLLS - 1) allButOne();
          },
          () => {
            failedPolls++;
            if (++answered === STORM_POLLS - 1) allButOne();
          },
        ),
      );
    }
    await waited;
  }
  // The newest poll waits: one that does not block replaces it; then the queue goes.
  await (await fetch(url(true), { headers })).arrayBuffer();
  await Promise.all(sent);
  await fetch(`${server.url}/api/v1/events?queue_id=${queueId}`, { method: 'DELETE', headers });
  return { polls, failedPolls };
}

/** The report's lines for the poll storms: each round's victim figures alone and during the storms, side by side. */
export function formatPollStorms(figures: PollStormFigures): string {
  const ms = (value: number) => `${value.toFixed(1)} ms`;
  return [
    `${POLL_STORMS} (organization B, ${VICTIM_RATE} requests/s on schedule), alone → while one account of A sends ${STORM_POLLS} polls of one queue at once, again and again:`,
    ...figures.rounds.map(
      (r, index) =>
        `  round ${index + 1}: p50 ${ms(r.alone.p50)} → ${ms(r.underStorms.p50)}, p90 ${ms(r.alone.p90 ?? NaN)} → ${ms(r.underStorms.p90 ?? NaN)}, p99 ${ms(r.alone.p99)} → ${ms(r.underStorms.p99)}, ` +
        `answered ${r.alone.total} → ${r.underStorms.total}, ` +
        `not 200 ${r.alone.non2xx + r.alone.errors} → ${r.underStorms.non2xx + r.underStorms.errors}; A's polls answered ${r.polls} (${r.failedPolls} not 200)`,
    ),
    `  p90 during the storms / alone, median of the rounds: ${median(figures.rounds.map((r) => (r.underStorms.p90 ?? NaN) / (r.alone.p90 ?? NaN))).toFixed(2)} × (target ≤ 3)`,
  ].join('\n');
}

/**
 * B's client runs in a process of its own: in this one, autocannon receiving A's 7 MB answers
 * would hold up B's timings.
 */
export async function steadyLoad(spec: SteadyLoadSpec): Promise<Measurement> {
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
