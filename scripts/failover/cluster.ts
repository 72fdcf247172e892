import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, chownSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { freePort } from '../../src/lib/free-port.js';
import { onCleanup, REPO_ROOT } from '../lib/processes.js';

/**
 * The PostgreSQL cluster of `npm run test:failover`, from Debian's packages: one etcd, two
 * PostgreSQL 15 nodes run by Patroni (as the `postgres` user, from deploy/patroni/patroni.yml with
 * names, ports and directories mapped to this machine) and HAProxy (deploy/patroni/haproxy.cfg)
 * forwarding to the current primary. Everything it starts is stopped by the cleanups.
 */

export const log = (line: string): void => console.log(`[test:failover] ${new Date().toISOString().slice(11, 23)} ${line}`);

const PG_BIN = '/usr/lib/postgresql/15/bin';
/** The cluster's passwords (test values; the deploy file's placeholders). */
const PASSWORD = 'change-me';

export interface Member {
  name: string;
  /** 'leader', 'sync_standby', 'replica', or another role of Patroni's. */
  role: string;
  state: string;
  timeline?: number;
}

export interface Cluster {
  /** The app's DATABASE_URL: through the HAProxy in front of the cluster. */
  url(database: string): string;
  members(): Promise<Member[]>;
  /**
   * Waits until one leader (not `formerLeader`) and one running synchronous standby are there, and
   * HAProxy forwards to the leader; returns the leader's name.
   */
  waitHealthy(timeoutMs: number, formerLeader?: string): Promise<string>;
  /** `patronictl switchover` from the leader to the other node (resolves when Patroni says it is done). */
  switchover(from: string, to: string): Promise<{ ok: boolean; output: string }>;
  /** SIGKILL of the node's postmaster (the primary's PostgreSQL crashes; its Patroni stays). */
  killPostgres(node: string): number;
  /** When the node's Patroni first logged a line containing `text` at or after `since` (its log is in UTC). */
  loggedAt(node: string, text: string, since: number): number | undefined;
}

function requirePrograms(): void {
  const missing = ['etcd', 'patroni', 'patronictl', 'haproxy', 'runuser'].filter(
    (program) => spawnSync('sh', ['-c', `command -v ${program}`]).status !== 0,
  );
  if (!existsSync(join(PG_BIN, 'postgres'))) missing.push(`${PG_BIN}/postgres`);
  if (missing.length > 0) {
    throw new Error(
      `missing: ${missing.join(', ')} (Debian: apt-get install patroni etcd-server postgresql-15 haproxy; .ci/run installs them)`,
    );
  }
  if (process.getuid?.() !== 0) throw new Error('test:failover runs PostgreSQL as the postgres user: run it as root (CI does)');
}

/**
 * A shell that outlives this process if it dies without its cleanups (tsx SIGKILLs a child that
 * does not acknowledge Ctrl-C within 30 ms, CI's time limit): it stops the daemons' groups and any
 * postmaster left, and removes the data directories (the logs stay in `work`). The cleanups end it
 * first when they run.
 */
function startReaper(work: string): void {
  const script = `
    while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done
    groups=$(cat "$WORK/daemon-groups" 2>/dev/null)
    for g in $groups; do kill -TERM -"$g" 2>/dev/null; done
    sleep 10
    for g in $groups; do kill -KILL -"$g" 2>/dev/null; done
    for f in "$WORK"/pg*/data/postmaster.pid; do [ -f "$f" ] && kill -QUIT "$(head -1 "$f")" 2>/dev/null; done
    sleep 2
    rm -rf "$WORK"/pg1/data "$WORK"/pg2/data "$WORK"/etcd`;
  const reaper = spawn('sh', ['-c', script], {
    detached: true,
    stdio: 'ignore',
    env: { PATH: process.env.PATH ?? '', WORK: work },
  });
  reaper.unref();
  onCleanup(async () => signalGroup(reaper, 'SIGKILL'));
}

/** Keeps a child's output in a file; stopped (SIGTERM, then SIGKILL) by the cleanups. */
function startProcess(
  name: string,
  command: string,
  args: string[],
  directory: string,
  graceMs: number,
): { child: ChildProcess; logFile: string } {
  const logFile = join(directory, `${name}.log`);
  const fd = openSync(logFile, 'w');
  // TZ: Patroni's log times are local; loggedAt reads them as UTC.
  const child = spawn(command, args, { stdio: ['ignore', fd, fd], cwd: directory, detached: true, env: { ...process.env, TZ: 'UTC' } });
  closeSync(fd);
  // The daemons' process groups (each its own), for the reaper.
  appendFileSync(join(directory, 'daemon-groups'), `${child.pid}\n`);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  onCleanup(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    // The process group: runuser's child (patroni) and what it started.
    signalGroup(child, 'SIGTERM');
    if (await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)])) return;
    signalGroup(child, 'SIGKILL');
    await Promise.race([exited, sleep(5000)]);
  });
  return { child, logFile };
}

/** The shipped file with `from` replaced by `to` exactly `times` times (a changed file fails loudly). */
function replaceIn(text: string, replacements: [string, string, number][], file: string): string {
  let result = text;
  for (const [from, to, times] of replacements) {
    const parts = result.split(from);
    if (parts.length !== times + 1) throw new Error(`${file}: expected "${from}" ${times} times, found ${parts.length - 1}`);
    result = parts.join(to);
  }
  return result;
}

/** A postmaster that outlived its Patroni (SIGKILL of Patroni, a failed cleanup) is stopped from its pid file. */
function stopPostmaster(dataDirectory: string): void {
  let pid: number;
  try {
    pid = Number.parseInt(readFileSync(join(dataDirectory, 'postmaster.pid'), 'utf8').split('\n')[0]!, 10);
  } catch {
    return;
  }
  try {
    process.kill(pid, 'SIGQUIT');
  } catch {
    /* not running */
  }
}

export async function startCluster(work: string): Promise<Cluster> {
  requirePrograms();
  // PostgreSQL and Patroni run as postgres: they must reach the work directory.
  chmodSync(work, 0o755);
  const ports = {
    etcd: await freePort(),
    etcdPeer: await freePort(),
    balancer: await freePort(),
    pg1: await freePort(),
    pg2: await freePort(),
    rest1: await freePort(),
    rest2: await freePort(),
  };
  const { uid, gid } = postgresIds();
  startReaper(work);

  const etcdDirectory = join(work, 'etcd');
  startProcess(
    'etcd',
    'etcd',
    [
      '--name',
      'etcd1',
      '--data-dir',
      etcdDirectory,
      '--listen-client-urls',
      `http://127.0.0.1:${ports.etcd}`,
      '--advertise-client-urls',
      `http://127.0.0.1:${ports.etcd}`,
      '--listen-peer-urls',
      `http://127.0.0.1:${ports.etcdPeer}`,
      '--initial-advertise-peer-urls',
      `http://127.0.0.1:${ports.etcdPeer}`,
      '--initial-cluster',
      `etcd1=http://127.0.0.1:${ports.etcdPeer}`,
      '--initial-cluster-state',
      'new',
    ],
    work,
    5000,
  );

  const shipped = readFileSync(join(REPO_ROOT, 'deploy/patroni/patroni.yml'), 'utf8');
  const nodes = ['pg1', 'pg2'] as const;
  const dataDirectories: Record<string, string> = {};
  const configFiles: Record<string, string> = {};
  for (const [index, node] of nodes.entries()) {
    const pgPort = index === 0 ? ports.pg1 : ports.pg2;
    const restPort = index === 0 ? ports.rest1 : ports.rest2;
    const nodeDirectory = join(work, node);
    mkdirSync(nodeDirectory);
    chownSync(nodeDirectory, uid, gid);
    dataDirectories[node] = join(nodeDirectory, 'data');
    const config = replaceIn(
      shipped,
      [
        ['name: pg1', `name: ${node}`, 1],
        ['0.0.0.0:8008', `127.0.0.1:${restPort}`, 1],
        ['pg1:8008', `127.0.0.1:${restPort}`, 1],
        ['etcd1:2379', `127.0.0.1:${ports.etcd}`, 1],
        ['0.0.0.0:5432', `127.0.0.1:${pgPort}`, 1],
        ['pg1:5432', `127.0.0.1:${pgPort}`, 1],
        ['/var/lib/postgresql/15/zulip', dataDirectories[node], 1],
        ['/var/run/postgresql', nodeDirectory, 1],
      ],
      'deploy/patroni/patroni.yml',
    );
    const file = join(nodeDirectory, 'patroni.yml');
    writeFileSync(file, config);
    chownSync(file, uid, gid);
    configFiles[node] = file;
    // Patroni first: when it is stopped it stops its PostgreSQL; one that outlived it is stopped after.
    onCleanup(async () => stopPostmaster(dataDirectories[node]!));
    startProcess(`patroni-${node}`, 'runuser', ['-u', 'postgres', '--', 'patroni', file], work, 15_000);
    // The first node bootstraps alone, then the second clones it.
    if (index === 0)
      await waitFor(
        async () => (await readMembers(file)).some((member) => member.role === 'leader' && member.state === 'running'),
        60_000,
        'pg1 did not become the leader',
      );
  }

  const balancerFile = join(work, 'haproxy-postgres.cfg');
  writeFileSync(
    balancerFile,
    replaceIn(
      readFileSync(join(REPO_ROOT, 'deploy/patroni/haproxy.cfg'), 'utf8'),
      [
        ['bind :5000', `bind 127.0.0.1:${ports.balancer}`, 1],
        ['pg1:5432 check port 8008', `127.0.0.1:${ports.pg1} check port ${ports.rest1}`, 1],
        ['pg2:5432 check port 8008', `127.0.0.1:${ports.pg2} check port ${ports.rest2}`, 1],
      ],
      'deploy/patroni/haproxy.cfg',
    ),
  );
  const check = spawnSync('haproxy', ['-c', '-q', '-f', balancerFile], { encoding: 'utf8' });
  if (check.status !== 0) throw new Error(`haproxy -c rejected deploy/patroni/haproxy.cfg:\n${check.stdout}${check.stderr}`);
  startProcess('haproxy-postgres', 'haproxy', ['-db', '-f', balancerFile], work, 5000);

  const url = (database: string) => `postgres://postgres:${PASSWORD}@127.0.0.1:${ports.balancer}/${database}`;
  const cluster: Cluster = {
    url,
    members: () => readMembers(configFiles.pg1!),
    async waitHealthy(timeoutMs, formerLeader) {
      let leader = '';
      await waitFor(
        async () => {
          const members = await readMembers(configFiles.pg1!);
          const found = members.find((member) => member.role === 'leader' && member.state === 'running' && member.name !== formerLeader);
          const sync = members.find((member) => member.role === 'sync_standby' && member.state === 'running');
          leader = found?.name ?? '';
          return found !== undefined && sync !== undefined;
        },
        timeoutMs,
        'the cluster did not get a running leader and synchronous standby',
      );
      // And HAProxy forwards to it.
      await waitFor(
        async () => {
          const client = new pg.Client({ connectionString: url('postgres'), connectionTimeoutMillis: 1000 });
          try {
            await client.connect();
            const { rows } = await client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery');
            return rows[0]?.recovery === false;
          } catch {
            return false;
          } finally {
            await client.end().catch(() => undefined);
          }
        },
        timeoutMs,
        'HAProxy did not forward to the primary',
      );
      return leader;
    },
    async switchover(from, to) {
      const result = await patronictl(configFiles.pg1!, ['switchover', '--leader', from, '--candidate', to, '--force'], 60_000);
      return { ok: result.ok, output: result.output.trim() };
    },
    killPostgres(node) {
      const pid = Number.parseInt(readFileSync(join(dataDirectories[node]!, 'postmaster.pid'), 'utf8').split('\n')[0]!, 10);
      process.kill(pid, 'SIGKILL');
      return pid;
    },
    loggedAt(node, text, since) {
      for (const line of readFileSync(join(work, `patroni-${node}.log`), 'utf8').split('\n')) {
        const time = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d),(\d{3}) /.exec(line);
        if (!time || !line.includes(text)) continue;
        const at = Date.parse(`${time[1]}T${time[2]}.${time[3]}Z`);
        if (at >= since) return at;
      }
      return undefined;
    },
  };
  await cluster.waitHealthy(90_000);
  const admin = new pg.Client({ connectionString: url('postgres') });
  await admin.connect();
  await admin.query('CREATE DATABASE zulip');
  await admin.end();
  return cluster;
}

function postgresIds(): { uid: number; gid: number } {
  const id = (flag: string) => Number.parseInt(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim(), 10);
  const ids = { uid: id('-u'), gid: id('-g') };
  if (Number.isNaN(ids.uid) || Number.isNaN(ids.gid)) throw new Error('no postgres user (Debian: apt-get install postgresql-15)');
  return ids;
}

/** A child's whole process group (runuser and what it runs). */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    /* gone */
  }
}

/** The patronictl commands running now; once the cleanups began, none is started. */
const commands = { running: new Set<ChildProcess>(), stopped: false };
onCleanup(async () => {
  commands.stopped = true;
  for (const child of commands.running) signalGroup(child, 'SIGKILL');
});

/** patronictl as postgres, without holding this process's event loop (the load runs in it). */
function patronictl(configFile: string, args: string[], timeoutMs: number): Promise<{ ok: boolean; output: string; stdout: string }> {
  if (commands.stopped) return Promise.resolve({ ok: false, output: 'stopped', stdout: '' });
  return new Promise((resolve) => {
    const child = spawn('runuser', ['-u', 'postgres', '--', 'patronictl', '-c', configFile, ...args], {
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('close', (code) => {
      commands.running.delete(child);
      clearTimeout(timer);
      resolve({ ok: code === 0, output: `${stdout}${stderr}`, stdout });
    });
    commands.running.add(child);
    const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), timeoutMs);
  });
}

async function readMembers(configFile: string): Promise<Member[]> {
  const result = await patronictl(configFile, ['list', '-f', 'json'], 10_000);
  if (!result.ok) return [];
  try {
    return (JSON.parse(result.stdout) as { Member: string; Role: string; State: string; TL?: number }[]).map((row) => ({
      name: row.Member,
      role: row.Role.toLowerCase().replace(' ', '_'),
      state: row.State,
      ...(row.TL !== undefined && { timeline: row.TL }),
    }));
  } catch {
    return [];
  }
}

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number, message: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await condition()) return;
    await sleep(500);
  }
  throw new Error(`${message} within ${timeoutMs / 1000} s`);
}
