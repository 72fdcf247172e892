import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fork } from 'node:child_process';
import { Agent } from 'node:http';
import { sql } from 'kysely';
import type { Database } from '../src/db/database.js';
import { cpuSeconds } from './cpu.js';
import { basicAuth, FORM, formBody } from './load.js';
import type { RunningProcess } from '../scripts/lib/processes.js';
import type { ClientsMessage, ClientsReply, ClientTotals } from './longpoll-clients.js';
import { connectClient, type PollingClient } from './polling-client.js';
import type { Account } from './seed.js';

/**
 * The idle long-poll scenario: N event queues registered through instance A, each held
 * by a blocking GET /events on instance B, then nothing happens for a while; then deliveries, each
 * a navigation view added through A, answered by the poll waiting on B. It reports what the idle
 * polls cost (PostgreSQL transactions/s of the whole cluster, B's CPU, B's memory per poll) and
 * the delivery latency.
 */

export interface LongPollFigures {
  polls: number;
  /** Seconds the idle window lasted (PostgreSQL's statistics counters included). */
  idleSeconds: number;
  transactionsPerSecond: number;
  /** Instance B's CPU while idle, in % of one core. */
  cpuPercent: number;
  /** B's resident memory per waiting poll above its baseline, in KB. */
  memoryPerPollKb: number;
  rssBeforeMb: number;
  rssAfterMb: number;
  /** Heartbeats answered (and polled again) during the idle window: nothing else happened. */
  heartbeats: number;
  deliveries: number;
  deliveryP50Ms: number;
  deliveryP99Ms: number;
  steady?: SteadyFigures;
}

/** The steady state: every poll answered by a heartbeat and opened again at once, as clients do all day. */
export interface SteadyFigures {
  seconds: number;
  heartbeat: { seconds: number; jitterSeconds: number };
  heartbeats: number;
  transactions: number;
  /** Instance B's CPU over the window, in % of one core (its own CPU time: less moved by neighbours' load). */
  cpuPercent: number;
  rssMaxMb: number;
  rssEndMb: number;
  deliveries: number;
  deliveryP50Ms: number;
  deliveryP99Ms: number;
  /** Deliveries not answered within 10 s (counted as infinitely late in the percentiles). */
  lateDeliveries: number;
  /** Polls answered with a 5xx in the window (each sent again after 1 s). */
  serverErrors: number;
  /** The machine's load average (1 min) at the start and the end of the window. */
  loadBefore: number;
  loadAfter: number;
  /** The same cycle against bare node:http (measureCycleFloor), when measured. */
  floor?: CycleFloor;
}

const STEP = 500;
const STEP_TIMEOUT_MS = 60_000;
// PostgreSQL (15+) publishes an idle backend's statistics up to 10 s late: the window starts this
// long after the last activity (the opening, the deliveries), so that none of it falls into it.
const STATS_SETTLE_MS = 11_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function rssMb(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : Number.NaN;
}

async function transactions(db: Database): Promise<number> {
  const { rows } = await sql<{ n: string }>`
    SELECT (xact_commit + xact_rollback)::text AS n FROM pg_stat_database WHERE datname = current_database()
  `.execute(db);
  return Number(rows[0]!.n);
}

async function registerQueue(server: RunningProcess, account: Account): Promise<string> {
  const response = await fetch(`${server.url}/api/v1/register`, {
    method: 'POST',
    headers: { authorization: basicAuth(account.email, account.apiKey), ...FORM },
    body: formBody({ event_types: '["navigation_view"]', fetch_event_types: '[]' }),
    signal: AbortSignal.timeout(30_000),
  });
  const body = (await response.json()) as { queue_id?: string };
  if (response.status !== 200 || !body.queue_id) throw new Error(`register answered ${response.status}: ${JSON.stringify(body)}`);
  return body.queue_id;
}

async function mapConcurrently<T, R>(items: readonly T[], concurrency: number, task: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) {
        const index = next++;
        results[index] = await task(items[index]!);
      }
    }),
  );
  return results;
}

async function heldCount(db: Database, queueIds: readonly string[]): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM event_queues WHERE id = ANY(${queueIds}::uuid[]) AND poll_id IS NOT NULL
  `.execute(db);
  return rows[0]!.n;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;

export async function measureLongPolls(options: {
  db: Database;
  a: RunningProcess;
  b: RunningProcess;
  accounts: readonly Account[];
  idleSeconds: number;
  deliveries: number;
  /** The steady-state window (0: none). */
  steadySeconds: number;
  /** B's heartbeat interval and jitter (HEARTBEAT_SECONDS, HEARTBEAT_JITTER_SECONDS). */
  heartbeat: { seconds: number; jitterSeconds: number };
  log: (line: string) => void;
}): Promise<LongPollFigures> {
  const { db, a, b, accounts, log } = options;
  log(`long polls: registering ${accounts.length} queues through ${a.name}`);
  const queueIds = await mapConcurrently(accounts, 16, (account) => registerQueue(a, account));
  const rssBeforeMb = rssMb(b.pid);
  if (options.idleSeconds === 0) {
    const steady = await measureSteadyState({ ...options, queueIds });
    const none = Number.NaN;
    return {
      polls: accounts.length,
      idleSeconds: 0,
      transactionsPerSecond: none,
      cpuPercent: none,
      memoryPerPollKb: none,
      rssBeforeMb,
      rssAfterMb: none,
      heartbeats: 0,
      deliveries: 0,
      deliveryP50Ms: none,
      deliveryP99Ms: none,
      steady,
    };
  }

  // Opened in steps, each held before the next starts: the listen backlog never overflows.
  const agent = new Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY });
  const clients: PollingClient[] = [];
  const openingStarted = Date.now();
  for (let start = 0; start < accounts.length; start += STEP) {
    const end = Math.min(start + STEP, accounts.length);
    for (let i = start; i < end; i++) clients.push(connectClient(b.url, agent, accounts[i]!, queueIds[i]!));
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    // Only this step's queues: counting all of them each time slowed the opening down. On a slow
    // machine the first polls' heartbeats come before the last steps: a client that has had its
    // answer counts as opened (it polls again at once, and its queue is free until then).
    const answered = () => clients.slice(start, end).filter((client) => client.heartbeats() > 0).length;
    while ((await heldCount(db, queueIds.slice(start, end))) + answered() < end - start) {
      if (Date.now() > deadline) throw new Error(`only part of the first ${end} polls are held after ${STEP_TIMEOUT_MS} ms`);
      await sleep(100);
    }
  }
  log(`long polls: ${clients.length} polls held by ${b.name} after ${((Date.now() - openingStarted) / 1000).toFixed(1)} s`);
  // B's CPU second by second from here on, printed at the end: where idle CPU goes, if anywhere.
  const timeline: string[] = [];
  let lastCpu = cpuSeconds(b.pid)!;
  const sampler = setInterval(() => {
    const now = cpuSeconds(b.pid)!;
    timeline.push(((now - lastCpu) * 1000).toFixed(0));
    lastCpu = now;
  }, 1000);
  // No transaction of the opening is published late into the window; those of the idle state
  // published after its end stand for those of before it published in it.
  log(`long polls: measuring ${options.idleSeconds} s of idleness after ${STATS_SETTLE_MS / 1000} s`);
  await sleep(STATS_SETTLE_MS);
  const heartbeatsBefore = clients.reduce((sum, client) => sum + client.heartbeats(), 0);
  const transactionsBefore = await transactions(db);
  const cpuBefore = cpuSeconds(b.pid)!;
  const idleStarted = Date.now();
  const monotonicMicros = () => (process.hrtime.bigint() / 1000n).toString();
  log(`long polls: idle window from ${monotonicMicros()} µs (monotonic clock, as in CPU profiles)`);
  await sleep(options.idleSeconds * 1000);
  log(`long polls: idle window until ${monotonicMicros()} µs`);
  const transactionsAfter = await transactions(db);
  const cpuAfter = cpuSeconds(b.pid)!;
  const idleSeconds = (Date.now() - idleStarted) / 1000;
  const rssAfterMb = rssMb(b.pid);
  const heartbeats = clients.reduce((sum, client) => sum + client.heartbeats(), 0) - heartbeatsBefore;
  // Deliveries right after the idle window, before the first heartbeats (45 s after each poll):
  // one at a time, from the write's request to the poll's answer.
  // The first one is a warm-up, not counted: it prepares the statements on A's and B's connections.
  const latencies: number[] = [];
  const stride = Math.max(1, Math.floor(accounts.length / (options.deliveries + 1)));
  for (let n = 0; n <= options.deliveries; n++) {
    const index = (n * stride) % accounts.length;
    const account = accounts[index]!;
    const delivery = clients[index]!.nextDelivery();
    const started = performance.now();
    const write = await fetch(`${a.url}/api/v1/navigation_views`, {
      method: 'POST',
      headers: { authorization: basicAuth(account.email, account.apiKey), ...FORM },
      body: formBody({ fragment: `narrow/channel/1-longpoll/topic/${n}`, is_pinned: 'false', name: `Long poll ${n}` }),
      signal: AbortSignal.timeout(10_000),
    });
    if (write.status !== 200) throw new Error(`the delivery write answered ${write.status}: ${await write.text()}`);
    const answered = await Promise.race([delivery.then(() => true), sleep(10_000).then(() => false)]);
    if (!answered) throw new Error(`the poll of queue ${queueIds[index]} did not deliver the event within 10 s`);
    latencies.push(performance.now() - started);
  }
  log(`long polls: delivery latencies in order (the first one a warm-up): ${latencies.map((ms) => ms.toFixed(1)).join(', ')} ms`);
  latencies.shift();
  latencies.sort((x, y) => x - y);

  clearInterval(sampler);
  log(`long polls: ${b.name}'s CPU ms in each second since the polls were held: ${timeline.join(' ')}`);
  for (const client of clients) client.stop();
  agent.destroy();
  const steady = options.steadySeconds > 0 ? await measureSteadyState({ ...options, queueIds }) : undefined;

  return {
    polls: clients.length,
    idleSeconds,
    transactionsPerSecond: (transactionsAfter - transactionsBefore) / idleSeconds,
    cpuPercent: (100 * (cpuAfter - cpuBefore)) / idleSeconds,
    heartbeats,
    memoryPerPollKb: ((rssAfterMb - rssBeforeMb) * 1024) / clients.length,
    rssBeforeMb,
    rssAfterMb,
    deliveries: latencies.length,
    deliveryP50Ms: percentile(latencies, 50),
    deliveryP99Ms: percentile(latencies, 99),
    ...(steady && { steady }),
  };
}

const loadAverage = () => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

/** One delivery: a navigation view added through A, until the poll of `client` on B answers it. */
async function deliver(a: RunningProcess, account: Account, client: PollingClient, n: number): Promise<number> {
  const delivery = client.nextDelivery();
  const started = performance.now();
  const write = await fetch(`${a.url}/api/v1/navigation_views`, {
    method: 'POST',
    headers: { authorization: basicAuth(account.email, account.apiKey), ...FORM },
    body: formBody({ fragment: `narrow/channel/1-steady/topic/${n}`, is_pinned: 'false', name: `Steady ${n}` }),
    signal: AbortSignal.timeout(10_000),
  });
  if (write.status !== 200) throw new Error(`the delivery write answered ${write.status}: ${await write.text()}`);
  // Not within 10 s: counted as 10 s (and said), rather than ending the run on a loaded machine.
  const answered = await Promise.race([delivery.then(() => true), sleep(10_000).then(() => false)]);
  return answered ? performance.now() - started : Number.POSITIVE_INFINITY;
}

/** The steady state's clients: most in a process of their own (bench/longpoll-clients.ts), the probes here. */
interface ConnectedClients {
  /** The clients of the accounts at these indices, in this process: the deliveries' polls. */
  probes: Map<number, PollingClient>;
  /** Heartbeats and 5xx answers received so far by all of them. */
  totals(): Promise<ClientTotals>;
  stop(): Promise<void>;
}

/**
 * One polling client per account on `server`, opened evenly over the heartbeat interval plus half
 * its jitter (50 s at Zulip's 45 + 0..10 s), so that their heartbeats spread as a long-running
 * instance's do; returns once the first heartbeats have come (55 s after the first poll at Zulip's
 * interval), when every part of the cycle runs. BENCH_LONG_POLL_KEEP_ALIVE=1: each poll goes on a
 * kept-alive connection, as the official clients' HTTP libraries do; by default each poll opens a
 * connection of its own. The clients at `probeIndices` are opened in this process, the others in
 * bench/longpoll-clients.ts, so that their load does not pause the process that times deliveries.
 */
async function openClients(
  server: RunningProcess,
  accounts: readonly Account[],
  queueIds: readonly string[],
  heartbeat: { seconds: number; jitterSeconds: number },
  log: (line: string) => void,
  probeIndices: ReadonlySet<number> = new Set(),
): Promise<ConnectedClients> {
  const keepAlive = process.env.BENCH_LONG_POLL_KEEP_ALIVE === '1';
  const child = fork('bench/longpoll-clients.ts', [], { execArgv: ['--import', 'tsx'] });
  const ask = (message: ClientsMessage | null, answer: ClientsReply['type']) =>
    new Promise<ClientsReply>((resolve, reject) => {
      const onMessage = (reply: ClientsReply) => {
        if (reply.type !== answer) return;
        child.off('exit', onExit);
        child.off('message', onMessage);
        resolve(reply);
      };
      const onExit = (code: number | null) => reject(new Error(`bench/longpoll-clients.ts exited (${code}) before its ${answer}`));
      child.on('message', onMessage);
      child.once('exit', onExit);
      if (message) child.send(message);
    });
  await ask(null, 'ready');
  const agent = new Agent({ keepAlive, maxSockets: Number.POSITIVE_INFINITY });
  const probes = new Map<number, PollingClient>();
  const spreadMs = heartbeat.seconds * 1000 + heartbeat.jitterSeconds * 500;
  const openedAt = Date.now();
  log(`long polls, steady state: opening ${accounts.length} polls on ${server.name} over ${spreadMs / 1000} s`);
  child.send({
    type: 'open',
    url: server.url,
    keepAlive,
    openedAt,
    spreadMs,
    total: accounts.length,
    clients: accounts.flatMap(({ email, apiKey }, index) =>
      probeIndices.has(index) ? [] : [{ email, apiKey, index, queueId: queueIds[index]! }],
    ),
  } satisfies ClientsMessage);
  for (const index of [...probeIndices].sort((x, y) => x - y)) {
    const due = openedAt + (index * spreadMs) / accounts.length;
    if (due > Date.now()) await sleep(due - Date.now());
    probes.set(index, connectClient(server.url, agent, accounts[index]!, queueIds[index]!));
  }
  await sleep(Math.max(0, openedAt + (heartbeat.seconds + heartbeat.jitterSeconds) * 1000 - Date.now()));
  const own = () => [...probes.values()];
  return {
    probes,
    totals: async () => {
      const theirs = (await ask({ type: 'totals' }, 'totals')) as ClientTotals;
      return {
        heartbeats: theirs.heartbeats + own().reduce((sum, client) => sum + client.heartbeats(), 0),
        serverErrors: theirs.serverErrors + own().reduce((sum, client) => sum + client.serverErrors(), 0),
      };
    },
    stop: async () => {
      for (const client of own()) client.stop();
      agent.destroy();
      await ask({ type: 'stop' }, 'stopped');
    },
  };
}

/** Samples a process's RSS every second, keeping the largest. */
function rssPeak(pid: number): { peakMb: () => number; stop: () => void } {
  let peak = rssMb(pid);
  const sampler = setInterval(() => {
    try {
      peak = Math.max(peak, rssMb(pid));
    } catch {
      // The process has exited: the run is failing anyway.
    }
  }, 1000);
  return { peakMb: () => peak, stop: () => clearInterval(sampler) };
}

export interface CycleFloor {
  seconds: number;
  heartbeats: number;
  cpuPercent: number;
  rssMaxMb: number;
}

/**
 * The steady state's floor: the same clients and heartbeat cycle (one client per account, kept
 * alive or not as for B, opened over the same spread, measured as long from the same point) against
 * bench/longpoll-floor.ts, a bare node:http server: what Node's HTTP alone costs for the cycle.
 */
export async function measureCycleFloor(options: {
  floor: RunningProcess;
  accounts: readonly Account[];
  steadySeconds: number;
  heartbeat: { seconds: number; jitterSeconds: number };
  log: (line: string) => void;
}): Promise<CycleFloor> {
  const { floor, accounts, heartbeat, log } = options;
  const queueIds = accounts.map(() => randomUUID());
  const clients = await openClients(floor, accounts, queueIds, heartbeat, log);
  const heartbeatsBefore = (await clients.totals()).heartbeats;
  const cpuBefore = cpuSeconds(floor.pid)!;
  const started = Date.now();
  log(`long polls, steady state: measuring the floor ${options.steadySeconds} s`);
  const rss = rssPeak(floor.pid);
  await sleep(options.steadySeconds * 1000);
  const seconds = (Date.now() - started) / 1000;
  const cpuAfter = cpuSeconds(floor.pid)!;
  rss.stop();
  const heartbeats = (await clients.totals()).heartbeats - heartbeatsBefore;
  await clients.stop();
  return { seconds, heartbeats, cpuPercent: (100 * (cpuAfter - cpuBefore)) / seconds, rssMaxMb: Math.max(rss.peakMb(), rssMb(floor.pid)) };
}

/**
 * The steady state: the polls are opened again, evenly over one heartbeat interval
 * (50 s), so that their heartbeats come as they do all day (N / 50 per second) rather than all
 * at once; each client polls again at once after every answer, with the new last_event_id, as the
 * official clients do. Measured once the first heartbeats have come, for `steadySeconds`, with a
 * delivery every few seconds (its write's transactions count in the window too: about 1 % of it).
 */
async function measureSteadyState(options: {
  db: Database;
  a: RunningProcess;
  b: RunningProcess;
  accounts: readonly Account[];
  queueIds: readonly string[];
  steadySeconds: number;
  deliveries: number;
  heartbeat: { seconds: number; jitterSeconds: number };
  log: (line: string) => void;
}): Promise<SteadyFigures> {
  const { db, a, b, accounts, queueIds, log } = options;
  // The stopped clients' polls end on B (their clients left): wait until none holds its queue.
  const deadline = Date.now() + STEP_TIMEOUT_MS;
  while ((await heldCount(db, queueIds)) > 0) {
    if (Date.now() > deadline) throw new Error('the stopped polls still hold their queues');
    await sleep(500);
  }
  // The deliveries' polls, one account each.
  const probeOf = (n: number) => (n * 7919) % accounts.length;
  const probes = new Set(Array.from({ length: options.deliveries + 1 }, (_, n) => probeOf(n)));
  const clients = await openClients(b, accounts, queueIds, options.heartbeat, log, probes);
  const before = await clients.totals();
  const transactionsBefore = await transactions(db);
  const cpuBefore = cpuSeconds(b.pid)!;
  const loadBefore = loadAverage();
  const started = Date.now();
  log(`long polls, steady state: measuring ${options.steadySeconds} s (load ${loadBefore})`);
  const rss = rssPeak(b.pid);
  const latencies: number[] = [];
  const gapMs = (options.steadySeconds * 1000) / (options.deliveries + 1);
  try {
    for (let n = 0; n <= options.deliveries && Date.now() - started < options.steadySeconds * 1000 - gapMs; n++) {
      const index = probeOf(n);
      const turn = Date.now();
      latencies.push(await deliver(a, accounts[index]!, clients.probes.get(index)!, n));
      await sleep(Math.max(0, turn + gapMs - Date.now()));
    }
  } catch (error) {
    rss.stop();
    throw error;
  }
  await sleep(Math.max(0, started + options.steadySeconds * 1000 - Date.now()));
  const seconds = (Date.now() - started) / 1000;
  const transactionsAfter = await transactions(db);
  const cpuAfter = cpuSeconds(b.pid)!;
  const after = await clients.totals();
  const heartbeats = after.heartbeats - before.heartbeats;
  const serverErrors = after.serverErrors - before.serverErrors;
  rss.stop();
  const rssEndMb = rssMb(b.pid);
  const loadAfter = loadAverage();
  log(
    `long polls, steady state: delivery latencies in order (the first one a warm-up): ${latencies.map((ms) => ms.toFixed(1)).join(', ')} ms`,
  );
  await clients.stop();
  latencies.shift();
  latencies.sort((x, y) => x - y);
  return {
    lateDeliveries: latencies.filter((ms) => ms === Number.POSITIVE_INFINITY).length,
    seconds,
    heartbeat: options.heartbeat,
    heartbeats,
    transactions: transactionsAfter - transactionsBefore,
    cpuPercent: (100 * (cpuAfter - cpuBefore)) / seconds,
    rssMaxMb: Math.max(rss.peakMb(), rssEndMb),
    rssEndMb,
    deliveries: latencies.length,
    deliveryP50Ms: percentile(latencies, 50),
    deliveryP99Ms: percentile(latencies, 99),
    serverErrors,
    loadBefore,
    loadAfter,
  };
}

export function formatLongPolls(figures: LongPollFigures): string {
  const f = figures;
  if (f.idleSeconds === 0 && f.steady) {
    return [
      `Long polls: ${f.polls} polls registered on instance A, held on instance B (production defaults), B at ${f.rssBeforeMb.toFixed(0)} MB before them`,
      ...formatSteady(f.steady),
    ].join('\n');
  }
  return [
    `Idle long polls: ${f.polls} polls registered on instance A, held on instance B (production defaults)`,
    `  PostgreSQL transactions/s while idle (whole cluster, ${f.idleSeconds.toFixed(0)} s, ${f.heartbeats} heartbeats in it): ${f.transactionsPerSecond.toFixed(1)} (target ≤ 20: ${f.transactionsPerSecond <= 20 ? 'met' : 'MISSED'})`,
    `  instance B CPU while idle: ${f.cpuPercent.toFixed(1)} % of a core (target ≤ 5: ${f.cpuPercent <= 5 ? 'met' : 'MISSED'})`,
    `  instance B memory: ${f.rssBeforeMb.toFixed(0)} MB before the polls, ${f.rssAfterMb.toFixed(0)} MB with them: ${f.memoryPerPollKb.toFixed(1)} KB per poll (aim ≤ 20)`,
    `  delivery A → B, ${f.deliveries} writes: p50 ${f.deliveryP50Ms.toFixed(1)} ms, p99 ${f.deliveryP99Ms.toFixed(1)} ms (target p99 ≤ 50: ${f.deliveryP99Ms <= 50 ? 'met' : 'MISSED'})`,
    ...(f.steady ? formatSteady(f.steady) : []),
  ].join('\n');
}

function formatSteady(s: SteadyFigures): string[] {
  const perCycle = s.transactions / s.heartbeats;
  const perSecond = s.transactions / s.seconds;
  return [
    `Steady state: each poll answered by its heartbeat (${s.heartbeat.seconds} + 0..${s.heartbeat.jitterSeconds} s) and opened again at once, ${s.seconds.toFixed(0)} s, load average ${s.loadBefore} → ${s.loadAfter}`,
    `  heartbeats answered: ${s.heartbeats} (${(s.heartbeats / s.seconds).toFixed(1)}/s); polls answered 5xx (sent again after 1 s): ${s.serverErrors}`,
    `  PostgreSQL transactions (whole cluster): ${perSecond.toFixed(1)}/s, ${perCycle.toFixed(2)} per heartbeat cycle (target ≤ 1: ${perCycle <= 1 ? 'met' : 'MISSED'})`,
    `  instance B CPU: ${s.cpuPercent.toFixed(1)} % of a core (target ≤ 5: ${s.cpuPercent <= 5 ? 'met' : 'MISSED'})`,
    `  instance B RSS: ${s.rssEndMb.toFixed(0)} MB at the end, ${s.rssMaxMb.toFixed(0)} MB at most (target ≤ 300: ${s.rssMaxMb <= 300 ? 'met' : 'MISSED'})`,
    `  delivery A → B, ${s.deliveries} writes: p50 ${s.deliveryP50Ms.toFixed(1)} ms, p99 ${s.deliveryP99Ms.toFixed(1)} ms, ${s.lateDeliveries} not within 10 s (target p99 ≤ 50: ${s.deliveryP99Ms <= 50 ? 'met' : 'MISSED'})`,
    ...(s.floor
      ? [
          `  floor, the same clients and cycle against bare node:http (bench/longpoll-floor.ts), ${s.floor.seconds.toFixed(0)} s: ${(s.floor.heartbeats / s.floor.seconds).toFixed(1)} heartbeats/s, ${s.floor.cpuPercent.toFixed(1)} % of a core, ${s.floor.rssMaxMb.toFixed(0)} MB at most; B/floor: CPU ${(s.cpuPercent / s.floor.cpuPercent).toFixed(2)}, RSS ${(s.rssMaxMb / s.floor.rssMaxMb).toFixed(2)}`,
        ]
      : []),
  ];
}
