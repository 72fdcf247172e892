import * as ops from '../src/cli/operations.js';
import type { Database } from '../src/db/database.js';
import { basicAuth, FORM, formBody, type Measurement, runLoad } from './load.js';
import type { RunningProcess } from './processes.js';
import type { Account } from './seed.js';

/**
 * One caller must not hurt another (issue 31): the latency of a small read in a small organization
 * (B), alone and while one account of the benchmark's large organization (A, about 21,000 users)
 * keeps asking for the whole user list (GET /users, and register with fetch_event_types
 * ["realm_user"]). The ratio of B's two medians is the figure.
 */

export const NEIGHBOURS = 'large reads: another organization\'s GET /users/{id}';

const NEIGHBOUR_SUBDOMAIN = 'neighbour';
/** B's callers, each request in turn: a handful, as a few active clients would be. */
const VICTIM_CONNECTIONS = 4;
/** A's one account: one GET /users and one register in flight at a time. */
const ATTACKER_CONNECTIONS = 2;

export interface NeighbourFigures {
  alone: Measurement;
  underLargeReads: Measurement;
  largeReads: Measurement;
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
 * `durationSeconds`). The server must be one with `EXTERNAL_HOST` at its default (B is reached
 * by its subdomain) and rate limiting off (else the attacker's requests would be refused, which
 * is not what is measured here).
 */
export async function measureNeighbours(options: {
  server: RunningProcess;
  neighbour: Neighbour;
  attacker: Account;
  durationSeconds: number;
  log: (line: string) => void;
}): Promise<NeighbourFigures> {
  const { server, neighbour, attacker, durationSeconds, log } = options;
  const largeReadBytes = {
    users: await bodyBytes(server, attacker, 'GET', '/api/v1/users'),
    register: await bodyBytes(server, attacker, 'POST', '/api/v1/register'),
  };
  log(`large reads: GET /users ${largeReadBytes.users} bytes, register ${largeReadBytes.register} bytes`);
  const victimLoad = () => runLoad({
    url: server.url,
    connections: VICTIM_CONNECTIONS,
    durationSeconds,
    headers: { authorization: basicAuth(neighbour.caller.email, neighbour.caller.apiKey), host: `${NEIGHBOUR_SUBDOMAIN}.localhost:9991` },
    requests: [{ method: 'GET', path: `/api/v1/users/${neighbour.targetUserId}` }],
  });
  // Warm-up (connections, prepared statements, JIT) of both sides, not measured.
  await Promise.all([victimLoad(), attackerLoad(server, attacker, 1)]);
  const alone = await victimLoad();
  const [underLargeReads, largeReads] = await Promise.all([victimLoad(), attackerLoad(server, attacker, durationSeconds)]);
  log(`${NEIGHBOURS}: p50 alone ${alone.p50.toFixed(1)} ms, while A reads its users ${underLargeReads.p50.toFixed(1)} ms ` +
    `(p99 ${alone.p99.toFixed(1)} / ${underLargeReads.p99.toFixed(1)} ms); A: ${largeReads.total} large reads, p50 ${largeReads.p50.toFixed(0)} ms`);
  return { alone, underLargeReads, largeReads, largeReadBytes };
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

/** The report's lines for the scenario. */
export function formatNeighbours(figures: NeighbourFigures): string {
  const { alone, underLargeReads, largeReads, largeReadBytes } = figures;
  const ms = (value: number) => `${value.toFixed(1)} ms`;
  return [
    `${NEIGHBOURS} (organization B, ${VICTIM_CONNECTIONS} connections), alone: p50 ${ms(alone.p50)}, p99 ${ms(alone.p99)}, ${alone.requestsPerSecond.toFixed(0)} req/s`,
    `  while one account of A (about 21,000 users) repeats GET /users (${(largeReadBytes.users / 1e6).toFixed(1)} MB) and register ` +
      `with fetch_event_types=["realm_user"] (${(largeReadBytes.register / 1e6).toFixed(1)} MB) on ${ATTACKER_CONNECTIONS} connections: ` +
      `p50 ${ms(underLargeReads.p50)}, p99 ${ms(underLargeReads.p99)}, ${underLargeReads.requestsPerSecond.toFixed(0)} req/s`,
    `  ratio of the medians: ${(underLargeReads.p50 / alone.p50).toFixed(2)} (target ≤ 2); A's large reads: ${largeReads.total}, ` +
      `p50 ${ms(largeReads.p50)}, non-2xx ${largeReads.non2xx}, errors ${largeReads.errors + underLargeReads.errors + alone.errors}`,
  ].join('\n');
}
