import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { type Database } from '../src/db/database.js';
import { type CpuReader, cpuReader } from './cpu.js';
import { basicAuth, FORM, formBody, type Measurement, mergeMeasurements, runLoad } from './load.js';
import { LARGE_ORGANIZATIONS, measureLargeOrganizations } from './large-org.js';
import { formatLongPolls, type LongPollFigures, measureCycleFloor, measureLongPolls } from './longpoll.js';
import { formatLargeWrites, LARGE_WRITES, type LargeWriteFigures, measureLargeWrites } from './large-writes.js';
import { formatNeighbour, measureNeighbour, NEIGHBOUR, type NeighbourFigures } from './neighbour.js';
import {
  formatNeighbours,
  formatPollStorms,
  measureNeighbours,
  measurePollStorms,
  neighbourMeasurements,
  type NeighbourFigures as OrganizationNeighbourFigures,
  NEIGHBOURS,
  POLL_STORMS,
  type PollStormFigures,
  seedNeighbour,
} from './neighbours.js';
import { freePort } from '../src/lib/free-port.js';
import { ensureBuilt, type RunningProcess, startServer } from '../scripts/lib/processes.js';
import { startScratchDatabase } from '../scripts/lib/scratch-database.js';
import { formatReport, type Row } from './report.js';
import { buildScenarios, PRODUCTION_COMPARISONS, type Scenario, type ServerKind, USERS_COMPARISON, WRITERS } from './scenarios.js';
import { type Seeded, seedOrganization } from './seed.js';
import { countStatements } from './statements.js';

/**
 * `npm run bench`: an ephemeral PostgreSQL with a realistic organization, the built server and a
 * bare Fastify + pg floor as separate processes on 127.0.0.1, autocannon against each scenario,
 * one table. Exits 1 when any request failed. Everything started here is stopped on the way out,
 * Ctrl-C included.
 *
 * Environment: BENCH_DURATION_SECONDS (10), BENCH_WARMUP_SECONDS (3), BENCH_CONNECTIONS (50),
 * BENCH_ROUNDS (5: floor/ours alternations for GET /users/{id}, alone/attacked ones of the large-reads scenario; the ratio is their median), BENCH_ONLY (a regular expression:
 * the scenarios whose names match), BENCH_CPU_PROF_DIR (run our servers and the floors under
 * --cpu-prof, profiles there; the floor's in floor/, the production-default processes' in
 * production/ and production-floor/), BENCH_SERVER (node arguments of our server, default the image's `--max-semi-space-size=8 dist/server.js`: to compare builds),
 * BENCH_LOG_LEVEL (our server's LOG_LEVEL, default silent: to see what request logging costs),
 * BENCH_NEIGHBOUR_ROUNDS (3: rounds of the noisy-neighbour scenario, bench/neighbour.ts),
 * BENCH_NEIGHBOUR_LARGE_PER_SECOND (unset: its large writes unpaced).
 *
 * The production scenarios come first: a second instance of ours with the server's defaults (rate
 * limiting on with the default rule, info logs written to a file) against a floor that writes the
 * same request log, with callers rotating over 20,000 members (reads) or 1,000 writers (writes),
 * in alternating rounds, with a third instance of ours that has the Prometheus metrics on (scraped
 * every 15 s) for their cost. Then the large organizations (1,000 to 50,000 users: GET /users and
 * register, with and without gzip; BENCH_LARGE_ORG_REQUESTS, 3, requests of each) on the
 * production-default instance, and BENCH_ROUNDS alternations with the json_agg floor of GET /users.
 */

function positiveInteger(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1 || value > 100_000) throw new Error(`${name} must be a positive integer`);
  return value;
}

const DURATION = positiveInteger('BENCH_DURATION_SECONDS', 10);
const WARMUP = positiveInteger('BENCH_WARMUP_SECONDS', Math.min(3, DURATION));
const CONNECTIONS = positiveInteger('BENCH_CONNECTIONS', 50);
// Five, not three: on a shared VM single rounds swing widely (bench/RESULTS.md), and a median of five
// holds where one of three outliers could still decide.
const ROUNDS = positiveInteger('BENCH_ROUNDS', 5);
const ONLY = new RegExp(process.env.BENCH_ONLY ?? '');
// Alone, then with the neighbour, this many times (the p99 reported is the worst round's).
const NEIGHBOUR_ROUNDS = positiveInteger('BENCH_NEIGHBOUR_ROUNDS', 3);
const NEIGHBOUR_LARGE_PER_SECOND = process.env.BENCH_NEIGHBOUR_LARGE_PER_SECOND
  ? positiveInteger('BENCH_NEIGHBOUR_LARGE_PER_SECOND', 1)
  : 0;
const CPU_PROF_DIR = process.env.BENCH_CPU_PROF_DIR;
// The image's node flags (Dockerfile), so that a run on Node 24 measures the image's young generation.
const IMAGE_NODE_FLAGS = ['--max-semi-space-size=8'];
const SERVER_ARGS = process.env.BENCH_SERVER?.split(' ') ?? [...IMAGE_NODE_FLAGS, 'dist/server.js'];
const LONG_POLLS = 'long polls';
const LARGE_ORG_REQUESTS = positiveInteger('BENCH_LARGE_ORG_REQUESTS', 3);
const LONG_POLL_COUNT = positiveInteger('BENCH_LONG_POLLS', 10_000);
// 0 skips the idle window (and its deliveries): only the steady state is measured.
const LONG_POLL_IDLE_SECONDS = process.env.BENCH_LONG_POLL_IDLE_SECONDS === '0' ? 0 : positiveInteger('BENCH_LONG_POLL_IDLE_SECONDS', 20);
// The steady state after it: heartbeats and re-polls; 0 skips it.
const LONG_POLL_STEADY_SECONDS = Number(process.env.BENCH_LONG_POLL_STEADY_SECONDS ?? 120);
// B's heartbeat interval (Zulip's 45 s, with 10 s of jitter): a shorter one gives the same rate of
// heartbeat cycles with fewer polls (1,000 polls at 5 s ≈ 10,000 at 45 s), for a quick look.
const LONG_POLL_HEARTBEAT_SECONDS = positiveInteger('BENCH_LONG_POLL_HEARTBEAT_SECONDS', 45);
const LONG_POLL_HEARTBEAT = { seconds: LONG_POLL_HEARTBEAT_SECONDS, jitterSeconds: Math.round((LONG_POLL_HEARTBEAT_SECONDS * 10) / 45) };
const SIZES = {
  users: 1000,
  channels: 1200,
  callerSubscriptions: 1100,
  subscriptionsPerUser: 25,
  rotatingCallers: 20_000,
  writers: WRITERS,
};
const SERVER_ENV = {
  AVATAR_SALT: 'bench-salt',
  LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'silent',
  RATE_LIMITING: 'false',
  HOST: '127.0.0.1',
  // The events scenario's 50 connections poll 50 queues of one user (the default keeps 20).
  QUEUE_MAX_PER_USER: '64',
  // The writers' queues are never polled while the writes run, and the floor appends without a
  // cap: past the default cap (10,000) a queue would be dropped and our writes would append nothing.
  QUEUE_MAX_PENDING_EVENTS: '1000000000',
};

const log = (line: string) => console.error(`[bench] ${line}`);

const cleanups: (() => Promise<unknown>)[] = [];
let cleaning: Promise<void> | undefined;
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const step of cleanups.reverse()) {
      // Bounded: a step that hangs (e.g. stopping a PostgreSQL that Ctrl-C already ended, whose exit
      // event never comes again) must not keep the rest from running.
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<void>((resolve) => {
        timer = setTimeout(() => resolve(log('cleanup step timed out')), 10_000);
      });
      await Promise.race([step().catch((error: unknown) => log(`cleanup step failed: ${String(error)}`)), timedOut]);
      clearTimeout(timer);
    }
  })();
  return cleaning;
}
// `on`, not `once`: Ctrl-C reaches this process both from the terminal and relayed by npm/tsx, and
// a second signal without a listener would end the process before the cleanup is done.
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  process.on(signal, () => {
    if (cleaning) return;
    log(`${signal}: stopping everything`);
    void cleanup().finally(() => process.exit(code));
  });
}

/** POST /register for `account`: the queue id, or undefined when the endpoint is not there. */
async function registerQueue(server: RunningProcess, account: Seeded['caller']): Promise<string | undefined> {
  const response = await fetch(`${server.url}/api/v1/register`, {
    method: 'POST',
    headers: { authorization: basicAuth(account.email, account.apiKey), ...FORM },
    // A day: the events scenario polls these queues only after the others ran (20 min and more),
    // and an idle queue past its lifespan is deleted (the default is 10 min).
    body: formBody({ fetch_event_types: '[]', idle_queue_timeout: '86400' }),
    signal: AbortSignal.timeout(10_000),
  });
  if (response.status === 404) return undefined;
  const body = (await response.json()) as { queue_id?: string };
  if (response.status !== 200 || !body.queue_id) throw new Error(`register answered ${response.status}: ${JSON.stringify(body)}`);
  return body.queue_id;
}

async function fetchUserJson(server: RunningProcess, seeded: Seeded): Promise<string> {
  const response = await fetch(`${server.url}/api/v1/users/${seeded.targetUserId}`, {
    headers: { authorization: basicAuth(seeded.caller.email, seeded.caller.apiKey) },
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`${server.name} GET /users/{id} answered ${response.status}: ${text}`);
  return text;
}

/**
 * Requests autocannon abandons at the end of a run keep running in the server (a 1,000-entry
 * update is not cancelled by a closed socket): wait until the database has been idle for a
 * moment, so that they do not count against the next scenario. Bounded.
 */
async function waitForQuietDatabase(db: Database): Promise<void> {
  const started = Date.now();
  let quietPolls = 0;
  while (quietPolls < 3 && Date.now() - started < 180_000) {
    const { rows } = await sql<{ busy: number }>`
      SELECT count(*)::int AS busy FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND state <> 'idle'
    `.execute(db);
    quietPolls = rows[0]!.busy === 0 ? quietPolls + 1 : 0;
    await sleep(200);
  }
  if (Date.now() - started > 2000) log(`waited ${((Date.now() - started) / 1000).toFixed(1)} s for abandoned requests to finish`);
}

async function measure(
  scenario: Scenario,
  server: RunningProcess,
  history: Map<string, Measurement>,
  db: Database,
  cpu: CpuReader,
): Promise<Measurement> {
  const headers = { authorization: basicAuth(scenario.account.email, scenario.account.apiKey) };
  const base = { url: server.url, connections: scenario.connections ?? CONNECTIONS, headers };
  await waitForQuietDatabase(db);
  const warmup = await scenario.prepare('warmup', WARMUP, history);
  await runLoad({ ...base, durationSeconds: WARMUP, ...warmup });
  await waitForQuietDatabase(db);
  const load = await scenario.prepare('measure', DURATION, history);
  const before = cpu.read(server.pid);
  const result = await runLoad({ ...base, durationSeconds: DURATION, ...load });
  const after = cpu.read(server.pid);
  if (before && after && result.total > 0) {
    result.cpuMsPerRequest = {
      server: (1000 * (after.server - before.server)) / result.total,
      postgres: (1000 * (after.postgres - before.postgres)) / result.total,
    };
  }
  const cpuText = result.cpuMsPerRequest
    ? `, CPU/request: server ${result.cpuMsPerRequest.server.toFixed(3)} ms, PostgreSQL ${result.cpuMsPerRequest.postgres.toFixed(3)} ms`
    : '';
  log(
    `${scenario.name}: ${result.requestsPerSecond.toFixed(0)} req/s, p50 ${result.p50.toFixed(1)} ms, p99 ${result.p99.toFixed(1)} ms, ` +
      `status ${JSON.stringify(result.statusCodes)}, errors ${result.errors}, load ${result.load.toFixed(2)}${cpuText}`,
  );
  return result;
}

async function main(): Promise<number> {
  log(
    `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, load ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  log(`${DURATION} s per scenario after ${WARMUP} s warm-up, ${CONNECTIONS} connections`);
  if (SERVER_ARGS.at(-1) === 'dist/server.js') ensureBuilt(log);

  log('starting PostgreSQL (embedded, ephemeral)');
  const {
    directory: workDir,
    url: databaseUrl,
    handle,
  } = await startScratchDatabase({ prefix: 'zulip-bench-', handle: { poolMax: 4 }, onCleanup: (step) => void cleanups.push(step) });
  const postgresVersion = (await sql<{ v: string }>`SELECT current_setting('server_version') AS v`.execute(handle.db)).rows[0]!.v;
  const seedStart = Date.now();
  const seeded = await seedOrganization(handle, SIZES);
  const neighbourOrganization = await seedNeighbour(handle);
  log(`PostgreSQL ${postgresVersion}; seeded in ${Date.now() - seedStart} ms: ${JSON.stringify(seeded.counts)}`);

  const ours = await startServer({
    name: 'server',
    args: [...(CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${CPU_PROF_DIR}`] : []), ...SERVER_ARGS],
    env: { ...SERVER_ENV, DATABASE_URL: databaseUrl },
    port: await freePort(),
    readyPath: '/ready',
  });
  cleanups.push(() => ours.stop());
  const floor = await startServer({
    name: 'floor',
    args: [...(CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${join(CPU_PROF_DIR, 'floor')}`] : []), '--import', 'tsx', 'bench/floor.ts'],
    env: { DATABASE_URL: databaseUrl },
    port: await freePort(),
    readyPath: '/health',
  });
  cleanups.push(() => floor.stop());
  // The production defaults: rate limiting on (default rule), info logs to a file. All but the cap
  // on pending events: the writers' queues are never polled, and the floor never drops them.
  const oursProduction = await startServer({
    name: 'server (production defaults)',
    args: [...(CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${join(CPU_PROF_DIR, 'production')}`] : []), ...SERVER_ARGS],
    env: {
      AVATAR_SALT: SERVER_ENV.AVATAR_SALT,
      HOST: SERVER_ENV.HOST,
      QUEUE_MAX_PENDING_EVENTS: SERVER_ENV.QUEUE_MAX_PENDING_EVENTS,
      DATABASE_URL: databaseUrl,
    },
    port: await freePort(),
    readyPath: '/ready',
    logFile: join(workDir, 'server.log'),
  });
  cleanups.push(() => oursProduction.stop());
  // The same with the Prometheus metrics on: scraped every 15 s during the run, as Prometheus would.
  const metricsPort = await freePort();
  const oursProductionMetrics = await startServer({
    name: 'server (production defaults, metrics on)',
    args: [...(CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${join(CPU_PROF_DIR, 'production-metrics')}`] : []), ...SERVER_ARGS],
    env: {
      AVATAR_SALT: SERVER_ENV.AVATAR_SALT,
      HOST: SERVER_ENV.HOST,
      QUEUE_MAX_PENDING_EVENTS: SERVER_ENV.QUEUE_MAX_PENDING_EVENTS,
      DATABASE_URL: databaseUrl,
      METRICS_PORT: String(metricsPort),
    },
    port: await freePort(),
    readyPath: '/ready',
    logFile: join(workDir, 'server-metrics.log'),
  });
  cleanups.push(() => oursProductionMetrics.stop());
  const scraper = setInterval(
    () =>
      void fetch(`http://127.0.0.1:${metricsPort}/metrics`).then(
        (response) => response.text(),
        () => undefined,
      ),
    15_000,
  );
  cleanups.push(async () => clearInterval(scraper));
  const floorProduction = await startServer({
    name: 'floor (request log)',
    args: [
      ...(CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${join(CPU_PROF_DIR, 'production-floor')}`] : []),
      '--import',
      'tsx',
      'bench/floor.ts',
    ],
    env: { DATABASE_URL: databaseUrl, FLOOR_LOG_FILE: join(workDir, 'floor.log') },
    port: await freePort(),
    readyPath: '/health',
  });
  cleanups.push(() => floorProduction.stop());
  const servers: Record<ServerKind, RunningProcess> = {
    ours,
    floor,
    'ours-production': oursProduction,
    'ours-production-metrics': oursProductionMetrics,
    'floor-production': floorProduction,
  };
  log(
    `server pid ${ours.pid} at ${ours.url}, floor pid ${floor.pid} at ${floor.url}; with production defaults: ` +
      `server pid ${oursProduction.pid}, floor pid ${floorProduction.pid}`,
  );

  const [ourJson, floorJson] = [await fetchUserJson(ours, seeded), await fetchUserJson(floor, seeded)];
  log(`GET /users/{id} body: ours ${ourJson.length} bytes, floor ${floorJson.length} bytes`);
  const keysOf = (json: string) => Object.keys((JSON.parse(json) as { user: object }).user).join();
  if (keysOf(ourJson) !== keysOf(floorJson)) {
    log(`the floor's user object differs in shape:\n  ours  ${ourJson}\n  floor ${floorJson}`);
  }

  // A connected client of the caller: every write below also stores its events in this queue.
  const callerQueue = await registerQueue(ours, seeded.caller);
  const pollerQueues: string[] = [];
  if (callerQueue === undefined) log('POST /register is not there (404): the events scenario is skipped');
  else for (let i = 0; i < CONNECTIONS; i++) pollerQueues.push((await registerQueue(ours, seeded.poller))!);

  const scenarios = buildScenarios({ db: handle.db, seeded, connections: CONNECTIONS, pollerQueues })
    .filter((scenario) => ONLY.test(scenario.name))
    .filter((scenario) => pollerQueues.length > 0 || !scenario.name.startsWith('GET /events'));
  const statements = await countStatements(
    databaseUrl,
    SERVER_ENV,
    scenarios.filter((scenario) => scenario.server === 'ours'),
  );
  const productionEnv = { AVATAR_SALT: SERVER_ENV.AVATAR_SALT, LOG_LEVEL: 'silent' };
  for (const [name, count] of await countStatements(
    databaseUrl,
    productionEnv,
    scenarios.filter((scenario) => scenario.server.startsWith('ours-production')),
  )) {
    statements.set(name, count);
  }

  const cpu = await cpuReader(handle.db);
  const history = new Map<string, Measurement>();
  // Comparisons run in alternating rounds (floor, ours, floor, ours…): the machine is shared and noisy.
  const comparisons = [...PRODUCTION_COMPARISONS, USERS_COMPARISON];
  for (const names of comparisons) {
    const group = scenarios.filter((scenario) => names.includes(scenario.name));
    if (group.length === 0) continue;
    const runs = new Map<string, Measurement[]>(group.map((scenario) => [scenario.name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const scenario of group)
        runs.get(scenario.name)!.push(await measure(scenario, servers[scenario.server], history, handle.db, cpu));
    }
    for (const [name, measurements] of runs) history.set(name, mergeMeasurements(measurements));
  }
  for (const scenario of scenarios) {
    if (history.has(scenario.name)) continue;
    history.set(scenario.name, await measure(scenario, servers[scenario.server], history, handle.db, cpu));
  }

  let neighbour: NeighbourFigures | undefined;
  if (ONLY.test(NEIGHBOUR)) neighbour = await runNeighbour(ours, databaseUrl, handle.db, seeded);
  let neighbours: OrganizationNeighbourFigures | undefined;
  if (ONLY.test(NEIGHBOURS)) {
    await waitForQuietDatabase(handle.db);
    // The attacker is a rotating member that neither writes nor long-polls: its queues (one per
    // register, the oldest deleted past QUEUE_MAX_PER_USER) touch no other scenario.
    const attacker = seeded.rotating.at(-1)!;
    neighbours = await measureNeighbours({
      server: ours,
      neighbour: neighbourOrganization,
      attacker,
      durationSeconds: DURATION,
      rounds: ROUNDS,
      log,
    });
  }
  let pollStorms: PollStormFigures | undefined;
  if (ONLY.test(POLL_STORMS)) {
    await waitForQuietDatabase(handle.db);
    // The large-reads attacker's neighbour in the rotation: it neither writes nor long-polls elsewhere.
    pollStorms = await measurePollStorms({
      server: ours,
      neighbour: neighbourOrganization,
      attacker: seeded.rotating.at(-2)!,
      durationSeconds: DURATION,
      rounds: ROUNDS,
      log,
    });
  }
  let largeWrites: LargeWriteFigures | undefined;
  if (ONLY.test(LARGE_WRITES)) {
    await waitForQuietDatabase(handle.db);
    // Rotating members before the poll storm's and large reads' attackers: they neither write nor long-poll elsewhere.
    largeWrites = await measureLargeWrites({
      server: ours,
      db: handle.db,
      neighbour: neighbourOrganization,
      attackers: seeded.rotating.slice(-15, -3),
      channelIds: seeded.callerStreamIds,
      durationSeconds: DURATION,
      rounds: ROUNDS,
      log,
    });
  }
  let largeOrganizations: string | undefined;
  if (ONLY.test(LARGE_ORGANIZATIONS)) {
    largeOrganizations = await measureLargeOrganizations({
      operator: handle,
      server: oursProduction,
      floor: floorProduction,
      requests: LARGE_ORG_REQUESTS,
      rounds: ROUNDS,
      log,
    });
  }

  let longPolls: LongPollFigures | undefined;
  if (ONLY.test(LONG_POLLS)) longPolls = await runLongPolls(databaseUrl, handle.db, seeded, workDir);

  const rows: Row[] = scenarios.map((scenario) => ({
    name: scenario.name,
    measurement: history.get(scenario.name)!,
    statements: statements.get(scenario.name),
  }));
  console.log(
    formatReport(rows, {
      machine: `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, PostgreSQL ${postgresVersion}`,
      settings: `${DURATION} s per scenario (after ${WARMUP} s warm-up), ${CONNECTIONS} connections; GET /users/{id} and the floors: ${ROUNDS} alternating rounds`,
    }),
  );
  if (neighbour) console.log(`\n${formatNeighbour(neighbour, WRITERS, NEIGHBOUR_LARGE_PER_SECOND)}`);
  if (neighbours) console.log(`\n${formatNeighbours(neighbours)}`);
  if (pollStorms) console.log(`\n${formatPollStorms(pollStorms)}`);
  if (largeWrites) console.log(`\n${formatLargeWrites(largeWrites)}`);
  if (largeOrganizations) console.log(`\n${LARGE_ORGANIZATIONS}, production defaults:\n\n${largeOrganizations}`);
  if (longPolls) console.log(`\n${formatLongPolls(longPolls)}`);
  const measured = [
    ...rows.map((row) => row.measurement),
    ...(neighbour ? [neighbour.alone, neighbour.attacked, neighbour.large, neighbour.small] : []),
    ...(neighbours ? neighbourMeasurements(neighbours) : []),
    ...(pollStorms ? pollStorms.rounds.flatMap((round) => [round.alone, round.underStorms]) : []),
    ...(largeWrites ? largeWrites.rounds.flatMap((round) => [round.alone, round.attacked]) : []),
  ];
  return measured.some((m) => m.total === 0 || m.non2xx > 0 || m.errors > 0 || m.timeouts > 0) ? 1 : 0;
}

/** A second instance of ours (B) beside `ours` (A), both on the one PostgreSQL: see neighbour.ts. */
async function runNeighbour(ours: RunningProcess, url: string, db: Database, seeded: Seeded): Promise<NeighbourFigures> {
  const b = await startServer({
    name: 'server B',
    args: [...(CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${join(CPU_PROF_DIR, 'b')}`] : []), ...SERVER_ARGS],
    env: { ...SERVER_ENV, DATABASE_URL: url },
    port: await freePort(),
    readyPath: '/ready',
  });
  cleanups.push(() => b.stop());
  try {
    return await measureNeighbour({
      a: ours,
      b,
      seeded,
      writers: WRITERS,
      warmupSeconds: WARMUP,
      durationSeconds: DURATION,
      rounds: NEIGHBOUR_ROUNDS,
      largePerSecond: NEIGHBOUR_LARGE_PER_SECOND,
      quiet: () => waitForQuietDatabase(db),
      log,
    });
  } finally {
    await b.stop();
  }
}

/** Two more instances with the production defaults: queues registered on A, polls held on B. */
async function runLongPolls(url: string, db: Database, seeded: Seeded, workDir: string): Promise<LongPollFigures> {
  const instance = async (name: string) => {
    const server = await startServer({
      name,
      args: [...(CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${join(CPU_PROF_DIR, name)}`] : []), ...SERVER_ARGS],
      env: {
        AVATAR_SALT: SERVER_ENV.AVATAR_SALT,
        HOST: SERVER_ENV.HOST,
        DATABASE_URL: url,
        HEARTBEAT_SECONDS: String(LONG_POLL_HEARTBEAT.seconds),
        HEARTBEAT_JITTER_SECONDS: String(LONG_POLL_HEARTBEAT.jitterSeconds),
      },
      port: await freePort(),
      readyPath: '/ready',
      logFile: join(workDir, `${name}.log`),
    });
    cleanups.push(() => server.stop());
    return server;
  };
  const a = await instance('long-poll-a');
  const b = await instance('long-poll-b');
  let figures: LongPollFigures;
  try {
    figures = await measureLongPolls({
      db,
      a,
      b,
      accounts: seeded.rotating.slice(0, LONG_POLL_COUNT),
      idleSeconds: LONG_POLL_IDLE_SECONDS,
      deliveries: 50,
      steadySeconds: LONG_POLL_STEADY_SECONDS,
      heartbeat: LONG_POLL_HEARTBEAT,
      log,
    });
  } finally {
    await a.stop();
    await b.stop();
  }
  if (!figures.steady) return figures;
  const floor = await startServer({
    name: 'long-poll floor',
    // The same young generation as B's: the floor is Node's HTTP cost for the cycle, B's RSS is compared to it.
    args: [...IMAGE_NODE_FLAGS, '--import', 'tsx', 'bench/longpoll-floor.ts'],
    env: { HEARTBEAT_SECONDS: String(LONG_POLL_HEARTBEAT.seconds), HEARTBEAT_JITTER_SECONDS: String(LONG_POLL_HEARTBEAT.jitterSeconds) },
    port: await freePort(),
    readyPath: '/ready',
  });
  cleanups.push(() => floor.stop());
  try {
    const accounts = seeded.rotating.slice(0, LONG_POLL_COUNT);
    figures.steady.floor = await measureCycleFloor({
      floor,
      accounts,
      steadySeconds: LONG_POLL_STEADY_SECONDS,
      heartbeat: LONG_POLL_HEARTBEAT,
      log,
    });
  } finally {
    await floor.stop();
  }
  return figures;
}

let exitCode = 1;
try {
  exitCode = await main();
} catch (error) {
  log(`failed: ${(error as Error).stack ?? String(error)}`);
} finally {
  await cleanup();
}
process.exit(exitCode);
