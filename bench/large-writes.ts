import { sql } from 'kysely';
import * as ops from '../src/cli/operations.js';
import type { Database } from '../src/db/database.js';
import { basicAuth, formBody, type Measurement, runLoad } from './load.js';
import type { RunningProcess } from '../scripts/lib/processes.js';
import type { RotatingCaller } from './seed.js';
import { NEIGHBOUR_SUBDOMAIN, type Neighbour, steadyLoad } from './neighbours.js';

/**
 * Many accounts' large writes beside another organization's small ones: organization B's one-change
 * settings update (pin_to_top of its one channel) sent one after the other, alone, then while
 * ATTACKERS accounts of A each keep three 10,000-entry pin_to_top updates in flight (multipart:
 * three fit in one user's body budget, USER_REQUEST_BODY_BYTES), in alternating rounds.
 */

export const LARGE_WRITES = "large writes of many accounts: another organization's one-change write";

const ATTACKERS = 12;
const IN_FLIGHT_PER_ATTACKER = 3;
const ENTRIES = 10_000;
const BOUNDARY = 'benchLargeWrites0123456789';

export interface LargeWriteFigures {
  rounds: { alone: Measurement; attacked: Measurement; large: Measurement }[];
  bodyBytes: number;
}

/** B's caller gets a channel and a subscription to it (the one its writes flip). */
async function subscribeVictim(db: Database, email: string, realm: string): Promise<number> {
  const { stream_id } = await ops.createStream(db, { realm, name: 'large-writes-victim' });
  await sql`INSERT INTO subscriptions (realm_id, user_id, stream_id, color)
    SELECT realm_id, id, ${stream_id}, '#c2c2c2' FROM users WHERE delivery_email = ${email}`.execute(db);
  return stream_id;
}

/** Channels of A each attacker is subscribed to (and its updates cycle over). */
const ATTACKER_CHANNELS = 25;

/** 10,000 pin_to_top changes over the attacker's channels, as one multipart field; it is subscribed to them first. */
async function attackerBody(db: Database, attacker: RotatingCaller, streamIds: number[]): Promise<string> {
  await sql`INSERT INTO subscriptions (realm_id, user_id, stream_id, color)
    SELECT s.realm_id, ${attacker.id}, s.id, '#c2c2c2' FROM streams s WHERE s.id = ANY(${streamIds}::int[])
    ON CONFLICT DO NOTHING`.execute(db);
  const entries = Array.from({ length: ENTRIES }, (_, index) => ({
    stream_id: streamIds[index % streamIds.length]!,
    property: 'pin_to_top',
    value: index % 2 === 0,
  }));
  return `--${BOUNDARY}\r\nContent-Disposition: form-data; name="subscription_data"\r\n\r\n${JSON.stringify(entries)}\r\n--${BOUNDARY}--\r\n`;
}

export async function measureLargeWrites(options: {
  server: RunningProcess;
  db: Database;
  neighbour: Neighbour;
  attackers: RotatingCaller[];
  /** Channels of A (active ones: the first of the benchmark caller's). */
  channelIds: number[];
  durationSeconds: number;
  rounds: number;
  log: (line: string) => void;
}): Promise<LargeWriteFigures> {
  const { server, db, attackers, durationSeconds, log } = options;
  const victim = options.neighbour.caller;
  const streamId = await subscribeVictim(db, victim.email, NEIGHBOUR_SUBDOMAIN);
  const bodies = await Promise.all(
    attackers.slice(0, ATTACKERS).map((attacker) => attackerBody(db, attacker, options.channelIds.slice(0, ATTACKER_CHANNELS))),
  );
  const victimLoad = (seconds = durationSeconds) =>
    steadyLoad({
      url: `${server.url}/api/v1/users/me/subscriptions/properties`,
      method: 'POST',
      body: formBody({ subscription_data: JSON.stringify([{ stream_id: streamId, property: 'pin_to_top', value: true }]) }),
      ratePerSecond: 0,
      oneAtATime: true,
      durationSeconds: seconds,
      headers: {
        authorization: basicAuth(victim.email, victim.apiKey),
        host: `${NEIGHBOUR_SUBDOMAIN}.localhost:9991`,
        'content-type': 'application/x-www-form-urlencoded',
      },
    });
  const attack = async (seconds: number): Promise<Measurement> => {
    const runs = await Promise.all(
      attackers.slice(0, ATTACKERS).map((attacker, index) =>
        runLoad({
          url: server.url,
          connections: IN_FLIGHT_PER_ATTACKER,
          durationSeconds: seconds,
          headers: { authorization: basicAuth(attacker.email, attacker.apiKey) },
          requests: [
            {
              method: 'POST',
              path: '/api/v1/users/me/subscriptions/properties',
              headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
              body: bodies[index]!,
            },
          ],
        }),
      ),
    );
    const statusCodes: Record<string, number> = {};
    for (const run of runs)
      for (const [code, count] of Object.entries(run.statusCodes)) statusCodes[code] = (statusCodes[code] ?? 0) + count;
    const sum = (pick: (run: Measurement) => number) => runs.reduce((total, run) => total + pick(run), 0);
    const latencies = runs.map((run) => run.p50).sort((x, y) => x - y);
    return {
      ...runs[0]!,
      requestsPerSecond: sum((run) => run.requestsPerSecond),
      p50: latencies[Math.floor(latencies.length / 2)]!,
      p99: Math.max(...runs.map((run) => run.p99)),
      total: sum((run) => run.total),
      non2xx: sum((run) => run.non2xx),
      errors: sum((run) => run.errors),
      timeouts: sum((run) => run.timeouts),
      statusCodes,
    };
  };
  await Promise.all([victimLoad(2), attack(2)]);
  const rounds: LargeWriteFigures['rounds'] = [];
  for (let round = 0; round < options.rounds; round++) {
    const alone = await victimLoad();
    const [attacked, large] = await Promise.all([victimLoad(), attack(durationSeconds)]);
    log(
      `${LARGE_WRITES}: p50 alone ${alone.p50.toFixed(1)} ms, attacked ${attacked.p50.toFixed(1)} ms ` +
        `(answered ${alone.total} / ${attacked.total}, status ${JSON.stringify(attacked.statusCodes)}); A: ${large.total} large writes, status ${JSON.stringify(large.statusCodes)}`,
    );
    rounds.push({ alone, attacked, large });
  }
  return { rounds, bodyBytes: Buffer.byteLength(bodies[0]!) };
}

/** The report's lines: each round's victim figures alone and attacked, side by side, and the median ratio. */
export function formatLargeWrites(figures: LargeWriteFigures): string {
  const ms = (value: number) => `${value.toFixed(1)} ms`;
  const ratios = figures.rounds.map((r) => r.attacked.p50 / r.alone.p50).sort((x, y) => x - y);
  const failed = (m: Measurement) => m.non2xx + m.errors;
  return [
    `${LARGE_WRITES} (organization B, one write after the other), alone → while ${ATTACKERS} accounts of A each keep ` +
      `${IN_FLIGHT_PER_ATTACKER} ${ENTRIES.toLocaleString('en')}-entry updates (${(figures.bodyBytes / 1e3).toFixed(0)} KB multipart) in flight:`,
    ...figures.rounds.map(
      (r, index) =>
        `  round ${index + 1}: p50 ${ms(r.alone.p50)} → ${ms(r.attacked.p50)}, p99 ${ms(r.alone.p99)} → ${ms(r.attacked.p99)}, ` +
        `answered ${r.alone.total} → ${r.attacked.total}, not 200 ${failed(r.alone)} → ${failed(r.attacked)}; ` +
        `A's large writes ${r.large.total}, status ${JSON.stringify(r.large.statusCodes)}`,
    ),
    `  p50 attacked / alone, median of the rounds: ${ratios[Math.floor(ratios.length / 2)]!.toFixed(2)} × (target ≤ 5)`,
  ].join('\n');
}
