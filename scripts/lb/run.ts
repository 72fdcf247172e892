/**
 * `npm run test:lb`: a rolling restart through the real balancer loses nothing.
 *
 * Starts an embedded PostgreSQL (seeded with the admin command line's operations), two built
 * instances (`node dist/server.js`, with their default SHUTDOWN_DRAIN_SECONDS) and HAProxy running
 * deploy/haproxy.cfg with only the replicas' host names and the bind port mapped to 127.0.0.1
 * ports. It checks the edge's promises (X-Request-Id, X-Forwarded-*, the app's 413), then drives
 * reads, writes and long polls through the balancer while it stops one instance with SIGTERM,
 * starts it again once it has exited, waits until HAProxy has it back, and does the same with the
 * other. It then requires: every answer the expected 2xx, every long poll answered and every
 * accepted write's event delivered once, in order; every accepted write in PostgreSQL exactly
 * once; each instance taken out by HAProxy before it closed, and exiting 0; one request id per
 * request in both logs; a long poll held until its heartbeat (45–55 s) through the balancer.
 *
 * Needs haproxy on PATH (`.ci/run` installs Debian's). Prints a report; exits 1 on any failure.
 * Everything it starts is stopped on the way out, Ctrl-C included.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';
import { loadConfig } from '../../src/config.js';
import { freePort } from '../../src/lib/free-port.js';
import { baseEnvironment, ensureBuilt, exitWithin, logLines, onCleanup, runScript } from '../lib/processes.js';
import { startScratchDatabase } from '../lib/scratch-database.js';
import { checkDatabase, checkEdge, checkLogs, checkObservedHeaders } from './checks.js';
import { type Balancer, balancerConfig, haproxyVersion, type Instance, log, startBalancer, startInstance } from './processes.js';
import { seedLoadUsers } from './seed.js';
import { Client, pollLoop, readLoop, register, type Writes, writeLoop } from './traffic.js';

/** Six users, each with a writer, a reader and a long poller pausing ~25 ms between requests. */
const USERS = 6;
const PAUSE_MS = 25;
const EXTERNAL_HOST = 'lb.test';
const WATCHDOG_MS = 8 * 60_000;

/** Every instance started (for the log checks), and the work directory, kept when the run fails. */
const instances: Instance[] = [];
let workDirectory: string | undefined;
let keepWorkDirectory = false;

/** On failure: the app instances' logs next to HAProxy's, for a look afterwards. */
async function keepLogs(): Promise<void> {
  if (!workDirectory) return;
  keepWorkDirectory = true;
  for (const [index, instance] of instances.entries()) {
    await writeFile(join(workDirectory, `${instance.name}-${index}.log`), [...instance.stdout, ...instance.stderr].join('\n')).catch(
      () => undefined,
    );
  }
  log(`logs kept in ${workDirectory}`);
}

interface Restart {
  name: string;
  /** From SIGTERM to HAProxy marking the instance DOWN, to its exit, and to HAProxy marking it UP again. */
  outAfterMs: number;
  exitedAfterMs: number;
  backAfterMs: number;
}

async function main(): Promise<string[]> {
  const version = haproxyVersion();
  if (!version) throw new Error('haproxy is not on PATH (Debian: apt-get install haproxy)');
  log(`HAProxy ${version}, Node ${process.version}`);
  ensureBuilt(log);
  const scratch = await startScratchDatabase({ prefix: 'zulip-lb-', keepDirectory: () => keepWorkDirectory, onCleanup });
  const { directory: work, url: databaseUrl, handle } = scratch;
  workDirectory = work;
  const users = await seedLoadUsers(handle, {
    users: USERS,
    organization: 'Load balancer test',
    emailDomain: 'lb.example',
    fullName: 'LB User',
    otherOrganization: true,
  });

  const ports = { lb: await freePort(), app1: await freePort(), app2: await freePort() };
  const observedFile = join(work, 'headers.jsonl');
  await writeFile(observedFile, '');
  const env = {
    ...baseEnvironment(),
    DATABASE_URL: databaseUrl,
    AVATAR_SALT: 'lb-test',
    EXTERNAL_HOST,
    EXTERNAL_URI_SCHEME: 'http://',
    HOST: '127.0.0.1',
    TRUST_PROXY: 'true',
    RATE_LIMITING: 'false',
    LOG_LEVEL: 'info',
    LB_TEST_HEADERS_FILE: observedFile,
    // The test organization's GET /users is under the default 4 KiB: gzip must show through the balancer.
    COMPRESSION_THRESHOLD_BYTES: '256',
  };
  const drainSeconds = loadConfig(env).shutdownDrainSeconds;
  const current = new Map<'app1' | 'app2', Instance>();
  for (const name of ['app1', 'app2'] as const) {
    const instance = await startInstance(name, ports[name], env);
    instances.push(instance);
    current.set(name, instance);
  }
  const balancer = await startBalancer(balancerConfig(ports), ports.lb, work);
  const client = new Client(balancer.url, EXTERNAL_HOST);
  const problems = await checkEdge(client, users[0]!, `other.${EXTERNAL_HOST}`, observedFile);
  log(`edge checks: ${problems.length === 0 ? 'ok' : problems.join('; ')}`);

  // The load: per user, a writer, a reader and a long poller, all through the balancer.
  const queues = await Promise.all(users.map((user) => register(client, user, ['subscription', 'navigation_view'])));
  let stopping = false;
  const stop = () => stopping;
  const writers = users.map((user) => writeLoop(client, user, stop, PAUSE_MS));
  const readers = users.map((user) => readLoop(client, user, stop, PAUSE_MS));
  const pollers = users.map((user, index) =>
    pollLoop(client, user, queues[index]!, ({ events }) =>
      events.some((event) => (event.navigation_view as { fragment?: string } | undefined)?.fragment?.endsWith('/final')),
    ),
  );
  // Queues nothing is sent to: their polls wait on an instance until it closes (an empty answer,
  // polled again on the other one), then, after both restarts, until the heartbeat (45–55 s).
  const idleQueues = await Promise.all(users.slice(0, 2).map((user) => register(client, user, ['realm_user'])));
  const idlePollers = idleQueues.map((queueId, index) => pollLoop(client, users[index]!, queueId, ({ heartbeats }) => heartbeats > 0));
  await sleep(3000);

  const restarts: Restart[] = [];
  for (const name of ['app1', 'app2'] as const) {
    restarts.push(await rollingRestart(name, current, balancer, { port: ports[name], env, drainSeconds }, problems));
    await sleep(3000);
  }
  await sleep(3000);

  stopping = true;
  const writes: Writes[] = await Promise.all(
    writers.map(async (written, index) => {
      const writes = await written;
      // The last write: its event tells the poller it has everything.
      const user = users[index]!;
      const final = { fragment: `narrow/channel/${user.streamIds[0]}-lb/user/${user.index}/final`, name: `LB ${user.index} final` };
      const exchange = await client.send({
        kind: 'write',
        path: '/api/v1/navigation_views',
        authorization: user.authorization,
        form: { ...final, is_pinned: 'false' },
      });
      if (exchange.status === 200) {
        writes.views.push(final);
        writes.events.push({ type: 'navigation_view', op: 'add', navigation_view: { ...final, is_pinned: false } });
      }
      return writes;
    }),
  );
  await Promise.all(readers);
  const polled = await Promise.race([Promise.all(pollers), sleep(60_000).then(() => undefined)]);
  if (!polled) problems.push('the long pollers did not receive the last writes within 60 s');
  for (const [index, polling] of (polled ?? []).entries()) {
    const received = polling.events.map(({ id: _id, ...event }) => event);
    if (!isDeepStrictEqual(received, writes[index]!.events)) {
      problems.push(
        `user ${index}: the poller received ${received.length} events, the accepted writes made ${writes[index]!.events.length} (or not the same, in order)`,
      );
    }
  }
  problems.push(...(await checkDatabase(handle.db, users, writes)));
  const idle = await Promise.all(idlePollers);
  for (const polling of idle) {
    // Both restarts happen well within the first heartbeat (45 s): each closing instance that held the poll answered it empty.
    if (polling.emptyAnswers < 1 || polling.heartbeats !== 1 || polling.lastHeldMs < 44_000) {
      problems.push(
        `an idle long poll was not answered empty by a closing instance, then held until its heartbeat: ${JSON.stringify(polling)}`,
      );
    }
  }

  // The instances write their logs at least once a second (src/server.ts): every line is out by now.
  await sleep(1500);
  const logs = checkLogs(client.exchanges, balancer.accessLog(), instances);
  problems.push(...logs.problems);
  const observed = checkObservedHeaders(observedFile);
  problems.push(...observed.problems);

  const failed = client.exchanges.filter((exchange) => exchange.kind !== 'check' && (exchange.status < 200 || exchange.status > 299));
  for (const exchange of failed.slice(0, 10)) problems.push(`failed: ${JSON.stringify(exchange)}`);
  const count = (kind: string) => client.exchanges.filter((exchange) => exchange.kind === kind).length;
  const pollings = polled ?? [];
  log(
    `requests through the balancer: ${client.exchanges.length} (reads ${count('read')}, writes ${count('write')}, ` +
      `long polls ${count('poll')}, registers ${count('register')}, edge checks ${count('check')}); failed: ${failed.length}`,
  );
  const empty = [...pollings, ...idle].reduce((sum, p) => sum + p.emptyAnswers, 0);
  log(
    `long polls: ${count('poll')} answered, ${empty} of them empty (an instance closing), ` +
      `${pollings.reduce((sum, p) => sum + p.events.length, 0)} events delivered; idle polls held ${idle.map((p) => p.lastHeldMs).join(' and ')} ms until their heartbeat`,
  );
  log(
    `writes accepted: ${writes.reduce((sum, w) => sum + w.views.length, 0)} navigation views, ` +
      `${writes.reduce((sum, w) => sum + w.colors.length, 0) / 3} bulk updates (3 channels each); retried by HAProxy: ${logs.retried}`,
  );
  log(`headers checked on ${observed.requests} requests as the app received them`);
  for (const restart of restarts) {
    log(
      `${restart.name}: out of HAProxy ${restart.outAfterMs} ms after SIGTERM, exited 0 after ${restart.exitedAfterMs} ms, ` +
        `back ${restart.backAfterMs} ms after its restart (drain ${drainSeconds} s)`,
    );
  }
  return problems;
}

async function rollingRestart(
  name: 'app1' | 'app2',
  current: Map<'app1' | 'app2', Instance>,
  balancer: Balancer,
  options: { port: number; env: Record<string, string>; drainSeconds: number },
  problems: string[],
): Promise<Restart> {
  const instance = current.get(name)!;
  const signalledAt = Date.now();
  log(`${name}: SIGTERM`);
  instance.child.kill('SIGTERM');
  const outAt = await balancer.waitForMessage(new RegExp(`Server app/${name} is DOWN`), signalledAt, (options.drainSeconds + 5) * 1000);
  const exit = await exitWithin(instance, (options.drainSeconds + 15) * 1000);
  const exitedAt = Date.now();
  if (exit.code !== 0) problems.push(`${name} exited with ${exit.code ?? exit.signal}`);
  const closingAt = logLines(instance).find((line) => line.msg === 'shutting down')?.time as number | undefined;
  if (closingAt === undefined || closingAt < outAt) problems.push(`${name} began closing before HAProxy took it out`);
  await sleep(1000);
  const restartedAt = Date.now();
  const restarted = await startInstance(name, options.port, options.env);
  instances.push(restarted);
  current.set(name, restarted);
  const backAt = await balancer.waitForMessage(new RegExp(`Server app/${name} is UP`), restartedAt, 30_000);
  return { name, outAfterMs: outAt - signalledAt, exitedAfterMs: exitedAt - signalledAt, backAfterMs: backAt - restartedAt };
}

runScript(main, { watchdogMs: WATCHDOG_MS, keepLogs, log, passed: 'passed' });
