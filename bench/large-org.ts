import { request } from 'node:http';
import { performance } from 'node:perf_hooks';
import { brotliCompressSync, constants, gunzipSync, gzipSync } from 'node:zlib';
import { sql } from 'kysely';
import * as ops from '../src/cli/operations.js';
import { cpuSeconds } from './cpu.js';
import type { RunningProcess } from '../scripts/lib/processes.js';

/**
 * The large-organization scenario: GET /users and POST /register (all of its state, as the official
 * clients fetch it) in organizations of 1,000, 10,000 and 50,000 users, each asked without and with
 * `Accept-Encoding: gzip`: time per request (one at a time, the median), bytes on the wire and
 * before compression, and the server's CPU per request. Then, on the largest answer, what gzip
 * (the server's, level 6) and brotli (quality 4, @fastify/compress's default) cost and save.
 * Last, at each size, `rounds` alternations of the json_agg floor's GET /users (bench/floor.ts), our
 * GET /users and our register, uncompressed, one request each: the ratios to the floor of the
 * round, and their median.
 */

export const LARGE_ORGANIZATIONS = 'large organization: GET /users and register, compressed or not';
const SIZES = [1000, 10_000, 50_000];
const TIMEZONES = ['', 'Europe/Berlin', 'America/New_York', 'Asia/Kolkata', 'America/Sao_Paulo', 'Australia/Sydney'];

interface Answer {
  status: number;
  ms: number;
  wire: Buffer;
  encoding: string | undefined;
}

function send(
  server: RunningProcess,
  host: string,
  authorization: string,
  method: 'GET' | 'POST',
  path: string,
  gzip: boolean,
): Promise<Answer> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host, authorization, ...(gzip && { 'accept-encoding': 'gzip' }) };
    if (method === 'POST') headers['content-type'] = 'application/x-www-form-urlencoded';
    const req = request(`${server.url}${path}`, { method, headers, timeout: 120_000 }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => {
        const encoding = response.headers['content-encoding'];
        resolve({ status: response.statusCode ?? 0, ms: performance.now() - started, wire: Buffer.concat(chunks), encoding });
      });
      response.on('error', reject);
    });
    req.on('error', reject);
    req.end(method === 'POST' ? '' : undefined);
  });
}

async function seedOrganization(operator: ops.Operator, users: number): Promise<{ host: string; authorization: string }> {
  const { db } = operator;
  const subdomain = `large${users}`;
  await ops.createRealm(db, { subdomain, name: `Large organization of ${users}` });
  const caller = await ops.createUser(operator, { realm: subdomain, email: `caller@${subdomain}.example`, fullName: 'Large Caller' });
  const realm = await db.selectFrom('realms').select('id').where('subdomain', '=', subdomain).executeTakeFirstOrThrow();
  await sql`
    INSERT INTO users (realm_id, delivery_email, full_name, date_joined, role, timezone, avatar_source,
                       avatar_version, email_address_visibility, api_key_hash)
    SELECT ${realm.id}, 'person' || g || '@${sql.raw(subdomain)}.example', 'Person ' || g,
           timestamptz '2023-01-01' + g * interval '7 minutes',
           CASE WHEN g % 200 = 0 THEN 200 WHEN g % 100 = 0 THEN 300 WHEN g % 16 = 0 THEN 600 ELSE 400 END,
           (${TIMEZONES}::text[])[1 + g % ${TIMEZONES.length}],
           CASE WHEN g % 5 = 0 THEN 'U' ELSE 'G' END, 1 + g % 3, 1 + g % 5,
           encode(sha256(convert_to('large-${sql.raw(subdomain)}-' || g, 'UTF8')), 'hex')
    FROM generate_series(1, ${users - 1}) AS g
  `.execute(db);
  await sql`ANALYZE users`.execute(db);
  return {
    host: `${subdomain}.localhost:9991`,
    authorization: `Basic ${Buffer.from(`${caller.email}:${caller.api_key}`).toString('base64')}`,
  };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const kb = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`;

/** The json_agg floor's GET /users against ours and our register, alternating, one request each per round. */
async function floorRatios(
  server: RunningProcess,
  floor: RunningProcess,
  organization: { host: string; authorization: string },
  users: number,
  rounds: number,
  log: (line: string) => void,
): Promise<string> {
  const time = async (target: RunningProcess, method: 'GET' | 'POST', path: string) => {
    const answer = await send(target, organization.host, organization.authorization, method, path, false);
    if (answer.status !== 200) throw new Error(`${method} ${path} at ${users} users answered ${answer.status}`);
    return answer.ms;
  };
  await time(floor, 'GET', '/api/v1/users'); // warm-up (the floor's statement is prepared on first use)
  const measured: { floor: number; users: number; register: number }[] = [];
  for (let round = 0; round < rounds; round++) {
    const figures = {
      floor: await time(floor, 'GET', '/api/v1/users'),
      users: await time(server, 'GET', '/api/v1/users'),
      register: await time(server, 'POST', '/api/v1/register'),
    };
    log(
      `${users} users, round ${round + 1}: floor ${figures.floor.toFixed(0)} ms, GET /users ${figures.users.toFixed(0)} ms, register ${figures.register.toFixed(0)} ms`,
    );
    measured.push(figures);
  }
  const ratios = (key: 'users' | 'register') => {
    const each = measured.map((figures) => figures[key] / figures.floor);
    return `**${median(each).toFixed(2)}** (${each.map((ratio) => ratio.toFixed(2)).join(', ')})`;
  };
  const ms = (key: 'floor' | 'users' | 'register') => median(measured.map((figures) => figures[key])).toFixed(0);
  return `| ${users.toLocaleString('en')} | ${ms('floor')} | ${ms('users')} | ${ratios('users')} | ${ms('register')} | ${ratios('register')} |`;
}

export async function measureLargeOrganizations(options: {
  operator: ops.Operator;
  server: RunningProcess;
  floor: RunningProcess;
  requests: number;
  rounds: number;
  log: (line: string) => void;
}): Promise<string> {
  const { operator, server, floor, requests, rounds, log } = options;
  const ratioLines = [
    '| users | json_agg floor ms | GET /users ms | GET /users / floor (rounds) | register ms | register / floor (rounds) |',
    '|---:|---:|---:|---|---:|---|',
  ];
  const lines = [
    '| users | request | Accept-Encoding | ms/request (median, one at a time) | bytes on the wire | JSON bytes | server CPU ms/request |',
    '|---:|---|---|---:|---:|---:|---:|',
  ];
  let largest: Buffer | undefined;
  for (const users of SIZES) {
    const started = Date.now();
    const organization = await seedOrganization(operator, users);
    log(`large organization of ${users} users seeded in ${Date.now() - started} ms`);
    for (const [method, path, label] of [
      ['GET', '/api/v1/users', 'GET /users'],
      ['POST', '/api/v1/register', 'POST /register'],
    ] as const) {
      for (const gzip of [false, true]) {
        const run = () => send(server, organization.host, organization.authorization, method, path, gzip);
        await run(); // warm-up
        const cpuBefore = cpuSeconds(server.pid);
        const answers: Answer[] = [];
        for (let i = 0; i < requests; i++) answers.push(await run());
        const cpuAfter = cpuSeconds(server.pid);
        const last = answers.at(-1)!;
        if (answers.some((answer) => answer.status !== 200))
          throw new Error(`${label} at ${users} users answered ${answers.map((a) => a.status).join(', ')}`);
        if ((last.encoding === 'gzip') !== gzip) throw new Error(`${label} at ${users} users: content-encoding ${String(last.encoding)}`);
        const json = gzip ? gunzipSync(last.wire) : last.wire;
        if (!gzip && method === 'POST' && users === SIZES.at(-1)) largest = json;
        const cpu = cpuBefore !== undefined && cpuAfter !== undefined ? ((cpuAfter - cpuBefore) * 1000) / requests : undefined;
        const row =
          `| ${users.toLocaleString('en')} | ${label} | ${gzip ? 'gzip' : '—'} | ${median(answers.map((a) => a.ms)).toFixed(0)} | ` +
          `${last.wire.length.toLocaleString('en')} (${kb(last.wire.length)}) | ${json.length.toLocaleString('en')} | ${cpu === undefined ? '—' : cpu.toFixed(0)} |`;
        log(row);
        lines.push(row);
      }
    }
    ratioLines.push(await floorRatios(server, floor, organization, users, rounds, log));
  }
  lines.push('', ...ratioLines);
  if (largest) {
    const cost = (compress: (input: Buffer) => Buffer) => {
      const started = process.cpuUsage();
      const output = compress(largest);
      const used = process.cpuUsage(started);
      return { bytes: output.length, ms: (used.user + used.system) / 1000 };
    };
    const gzip = cost((input) => gzipSync(input));
    const brotli = cost((input) => brotliCompressSync(input, { params: { [constants.BROTLI_PARAM_QUALITY]: 4 } }));
    lines.push(
      '',
      `register at ${SIZES.at(-1)!.toLocaleString('en')} users, ${largest.length.toLocaleString('en')} JSON bytes compressed in this process: ` +
        `gzip (level 6) ${gzip.bytes.toLocaleString('en')} bytes in ${gzip.ms.toFixed(0)} ms of CPU; ` +
        `brotli (quality 4) ${brotli.bytes.toLocaleString('en')} bytes in ${brotli.ms.toFixed(0)} ms of CPU.`,
    );
  }
  return lines.join('\n');
}
