/**
 * `npm run test:failover`: a PostgreSQL primary lost under load loses no acknowledged write.
 *
 * Starts a real Patroni cluster from Debian's packages (scripts/failover/cluster.ts: one etcd,
 * two PostgreSQL 15 nodes with synchronous_mode, HAProxy routing to the primary by Patroni's
 * /primary check, all from deploy/patroni/), two built instances of the server on it, and the
 * project's own HAProxy (deploy/haproxy.cfg) in front of them. Under mixed load (reads, settings
 * writes, navigation-view writes, registers, long polls) it performs a switchover
 * (`patronictl switchover`), waits for the cluster to be whole again, then a failover (SIGKILL of
 * the primary's postmaster), and requires:
 * - no acknowledged write lost: each 200 in the database once, with its audit rows and its events
 *   (a never-polled witness queue per user); every other answer left all of it or nothing; a 503
 *   left nothing (a 504 is the app's "the commit's answer was lost": counted applied / not);
 * - no process exit, no answer but 200, 503, 504 (and BAD_EVENT_QUEUE_ID, which clients handle by
 *   registering again), every request answered;
 * - every long poll answered, and each surviving queue's poller received the events of exactly
 *   the applied writes, in order; every queue registered with a 200 exists;
 * - recovery (fault to the first successful write after the last failed one), and the longest
 *   time without a successful write around the fault, within 5 s for the switchover and 15 s for
 *   the failover; both instances' LISTEN connections came back.
 *
 * Needs root (PostgreSQL runs as postgres), patroni, etcd-server, postgresql-15 and haproxy
 * (`.ci/run` installs them). Prints a report; exits 1 on any failure. Everything it starts is
 * stopped and its directory removed on the way out, Ctrl-C included (kept on failure).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createDatabase } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import { freePort } from '../../src/lib/free-port.js';
import { baseEnvironment, ensureBuilt, logLines, onCleanup, runScript } from '../lib/processes.js';
import { balancerConfig, type Instance, startBalancer, startInstance } from '../lb/processes.js';
import { seedLoadUsers } from '../lb/seed.js';
import { Client, type LoadUser, register } from '../lb/traffic.js';
import { checkPolls, checkRegistered, checkStatuses, checkWrites, type Recovery, recoveryFrom } from './checks.js';
import { type Cluster, log, startCluster } from './cluster.js';
import { type Polling, pollLoop, readLoop, registerLoop, type WriteAttempt, writeLoop } from './load.js';

const USERS = 6;
const PAUSE_MS = 25;
const EXTERNAL_HOST = 'failover.test';
const TARGETS = { switchover: 5000, failover: 15_000 };
const WATCHDOG_MS = 8 * 60_000;

const instances: Instance[] = [];
/** Every write attempt, kept as attempts.json with the logs when the run fails. */
const attempts: WriteAttempt[] = [];
let workDirectory: string | undefined;
let keepWorkDirectory = false;

async function keepLogs(): Promise<void> {
  if (!workDirectory) return;
  keepWorkDirectory = true;
  for (const instance of instances) {
    await writeFile(join(workDirectory, `${instance.name}.log`), [...instance.stdout, ...instance.stderr].join('\n')).catch(
      () => undefined,
    );
  }
  await writeFile(join(workDirectory, 'attempts.json'), JSON.stringify(attempts)).catch(() => undefined);
  log(`logs kept in ${workDirectory}`);
}

interface Fault {
  name: 'switchover' | 'failover';
  at: number;
  from: string;
  to: string;
  /** From the fault until the cluster had a leader and a synchronous standby again. */
  wholeAfterMs: number;
  recovery?: Recovery;
}

async function main(): Promise<string[]> {
  ensureBuilt(log);
  const work = await mkdtemp(join(tmpdir(), 'zulip-failover-'));
  workDirectory = work;
  onCleanup(async () => {
    if (!keepWorkDirectory) await rm(work, { recursive: true, force: true });
  });
  const cluster = await startCluster(work);
  const databaseUrl = cluster.url('zulip');
  log(`cluster up: ${(await cluster.members()).map((member) => `${member.name} ${member.role}`).join(', ')}`);
  const handle = createDatabase(databaseUrl);
  onCleanup(() => handle.close());
  await migrateToLatest(handle.db);
  const users = await seedLoadUsers(handle, {
    users: USERS,
    organization: 'Failover test',
    emailDomain: 'failover.example',
    fullName: 'Failover User',
  });

  const ports = { lb: await freePort(), app1: await freePort(), app2: await freePort() };
  const env = {
    ...baseEnvironment(),
    DATABASE_URL: databaseUrl,
    AVATAR_SALT: 'failover-test',
    EXTERNAL_HOST,
    EXTERNAL_URI_SCHEME: 'http://',
    HOST: '127.0.0.1',
    TRUST_PROXY: 'true',
    RATE_LIMITING: 'false',
    LOG_LEVEL: 'info',
    LB_TEST_HEADERS_FILE: join(work, 'headers.jsonl'),
    // The register loop makes ~30 queues per user: none may be evicted (the checks look for each).
    QUEUE_MAX_PER_USER: '1000',
  };
  for (const name of ['app1', 'app2'] as const) instances.push(await startInstance(name, ports[name], env));
  const balancer = await startBalancer(balancerConfig(ports), ports.lb, work);
  const client = new Client(balancer.url, EXTERNAL_HOST);

  const types = ['subscription', 'navigation_view'];
  const queues = await Promise.all(users.map((user) => register(client, user, types)));
  const witnessQueues = await Promise.all(users.map((user) => register(client, user, types)));
  let stopping = false;
  const stop = () => stopping;
  const registered: string[] = [];
  const writers = users.map((user) => writeLoop(client, user, stop, PAUSE_MS, attempts));
  const readers = users.map((user) => readLoop(client, user, stop, PAUSE_MS));
  const registers = registerLoop(client, users, stop, 200, registered);
  const finalFragment = (user: LoadUser) => `narrow/channel/${user.streamIds[0]}-fo/user/${user.index}/final`;
  const pollers = users.map((user, index) =>
    pollLoop(client, user, queues[index]!, (events) =>
      events.some((event) => (event.navigation_view as { fragment?: string } | undefined)?.fragment === finalFragment(user)),
    ),
  );
  await sleep(4000);

  const problems: string[] = [];
  const faults: Fault[] = [];
  const leader = await cluster.waitHealthy(30_000);
  const other = leader === 'pg1' ? 'pg2' : 'pg1';
  log(`switchover ${leader} → ${other}`);
  const invoked = Date.now();
  const switched = await cluster.switchover(leader, other);
  if (!switched.ok) problems.push(`patronictl switchover failed: ${switched.output}`);
  const afterSwitchover = await cluster.waitHealthy(90_000, leader);
  // The switchover starts when the primary's Patroni gets the request (patronictl itself takes
  // seconds to start and look at the cluster first).
  let at = cluster.loggedAt(leader, 'received switchover request', invoked - 1000) ?? invoked;
  faults.push({ name: 'switchover', at, from: leader, to: afterSwitchover, wholeAfterMs: Date.now() - at });
  await sleep(5000);

  log(`failover: SIGKILL of ${afterSwitchover}'s postmaster`);
  at = Date.now();
  cluster.killPostgres(afterSwitchover);
  const afterFailover = await cluster.waitHealthy(90_000, afterSwitchover);
  faults.push({ name: 'failover', at, from: afterSwitchover, to: afterFailover, wholeAfterMs: Date.now() - at });
  await sleep(5000);

  stopping = true;
  await Promise.all([...writers, ...readers, registers]);
  // The last write of each user: its event tells the poller it has everything.
  for (const user of users) {
    const view = { fragment: finalFragment(user), name: `FO ${user.index} final` };
    const startedAt = Date.now();
    const exchange = await client.send({
      kind: 'write',
      path: '/api/v1/navigation_views',
      authorization: user.authorization,
      form: { ...view, is_pinned: 'false' },
    });
    attempts.push({
      user: user.index,
      kind: 'view',
      key: view.fragment,
      name: view.name,
      streamIds: [],
      startedAt,
      endedAt: Date.now(),
      status: exchange.status,
      events: [{ type: 'navigation_view', op: 'add', navigation_view: { ...view, is_pinned: false } }],
    });
  }
  const pollings = await Promise.race([Promise.all(pollers), sleep(60_000).then(() => undefined)]);
  if (!pollings) problems.push('the long pollers did not receive the last writes within 60 s');

  for (const fault of faults) {
    // Up to a second before the next fault: recoveryFrom looks a second back from a fault.
    const next = (faults[faults.indexOf(fault) + 1]?.at ?? Number.POSITIVE_INFINITY) - 1000;
    fault.recovery = recoveryFrom(attempts, fault.at, next);
    const target = TARGETS[fault.name];
    if (!(fault.recovery.recoveryMs <= target))
      problems.push(`${fault.name}: first successful write ${fault.recovery.recoveryMs} ms after the fault (target ${target} ms)`);
    // Writes may also stall without failing (waiting for the synchronous standby, say).
    if (fault.recovery.longestGapMs > target)
      problems.push(`${fault.name}: ${fault.recovery.longestGapMs} ms without a successful write (target ${target} ms)`);
  }
  // Compare with the primary of now, through the cluster's balancer.
  const outcomes = await checkWrites(handle.db, users, attempts, witnessQueues);
  problems.push(...outcomes.problems);
  problems.push(...(await checkRegistered(handle.db, registered)));
  if (pollings) problems.push(...checkPolls(pollings, outcomes.applied));
  problems.push(...checkStatuses(client.exchanges));
  const listenLosses: number[] = [];
  for (const instance of instances) {
    if (instance.child.exitCode !== null || instance.child.signalCode !== null)
      problems.push(`${instance.name} exited (${instance.child.exitCode ?? instance.child.signalCode})`);
    const lost = logLines(instance).filter((line) => line.msg === 'events listener connection lost; reconnecting').length;
    listenLosses.push(lost);
    if (lost < 2) problems.push(`${instance.name}: its LISTEN connection was lost ${lost} times, expected once per fault at least`);
  }
  log(
    `LISTEN connections lost and opened again: ${instances.map((instance, index) => `${instance.name} ${listenLosses[index]} times`).join(', ')}`,
  );

  await report(client, attempts, outcomes.byStatus, registered.length, pollings ?? [], faults, cluster);
  return problems;
}

async function report(
  client: Client,
  attempts: WriteAttempt[],
  byStatus: Map<number, { applied: number; notApplied: number }>,
  registers: number,
  pollings: Polling[],
  faults: Fault[],
  cluster: Cluster,
): Promise<void> {
  const statuses = new Map<string, number>();
  for (const exchange of client.exchanges) statuses.set(`${exchange.status}`, (statuses.get(`${exchange.status}`) ?? 0) + 1);
  log(`requests: ${client.exchanges.length}; by status: ${[...statuses].map(([status, count]) => `${status}: ${count}`).join(', ')}`);
  log(
    `writes: ${attempts.length}; ${[...byStatus].map(([status, c]) => `${status}: ${c.applied} applied, ${c.notApplied} not applied`).join('; ')}`,
  );
  const pollStatuses: Record<number, number> = {};
  for (const polling of pollings)
    for (const [status, count] of Object.entries(polling.statuses))
      pollStatuses[Number(status)] = (pollStatuses[Number(status)] ?? 0) + count;
  log(
    `registers answered 200: ${registers}; long polls: ${pollings.reduce((sum, p) => sum + p.polls, 0)} (by status ${JSON.stringify(pollStatuses)}), ` +
      `${pollings.reduce((sum, p) => sum + p.events.length, 0)} events delivered, ${pollings.reduce((sum, p) => sum + p.reregistered, 0)} queues registered again`,
  );
  for (const fault of faults) {
    const r = fault.recovery;
    log(
      `${fault.name} ${fault.from} → ${fault.to}: first successful write ${r?.recoveryMs} ms after the fault (target ${TARGETS[fault.name]} ms), ` +
        `${r?.failed} writes failed, longest time without a successful write ${r?.longestGapMs} ms; cluster whole again after ${fault.wholeAfterMs} ms`,
    );
  }
  log(`cluster at the end: ${(await cluster.members()).map((member) => `${member.name} ${member.role} TL ${member.timeline}`).join(', ')}`);
}

runScript(main, {
  watchdogMs: WATCHDOG_MS,
  keepLogs,
  log,
  passed: 'passed: 0 acknowledged writes lost, 0 crashes, recovery within the targets',
});
