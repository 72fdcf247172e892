import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LISTENER_APPLICATION_NAME } from '../src/db/event-listener.js';
import { createFixtureDatabase, type TestDatabase } from './helpers/database.js';
import { OK, success, UNAVAILABLE } from './helpers/envelope.js';
import { auth } from './helpers/fixture.js';
import { baseEnvironment, exitWithin, logLines, type ServerProcess, spawnServer } from '../scripts/lib/processes.js';

// Real processes (`node --import tsx src/server.ts`) stopped with SIGTERM, as a container runtime does.
// tsx compiles the server as it starts: over a minute on a loaded machine.
const START_TIMEOUT_MS = 180_000;
vi.setConfig({ testTimeout: 420_000 });

const APP_NAME = 'zulip-shutdown-test';
const headers = { host: 'chat.example.com', authorization: auth('U') };

let server: ServerProcess | undefined;
let database: TestDatabase | undefined;
let dataDir: string | undefined;
afterEach(async () => {
  if (server && server.child.exitCode === null && server.child.signalCode === null) server.child.kill('SIGKILL');
  server = undefined;
  await database?.drop();
  database = undefined;
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  dataDir = undefined;
});

/** A request on a fresh connection (no keep-alive reuse): tells whether the port still accepts. */
function freshRequest(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(`${url}/health`, { agent: false }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      })
      .on('error', reject);
  });
}

/** Waits for `check`; `ms` only turns a condition never reached into a message (room for a loaded machine). */
async function eventually(check: () => Promise<boolean>, what: string, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Whether a long poll waits on the queue (it holds the queue's poll_id). */
const pollWaiting = (queueId: string) => async () =>
  (await database!.db.selectFrom('event_queues').select('poll_id').where('id', '=', queueId).executeTakeFirst())?.poll_id != null;

describe('graceful shutdown on SIGTERM', () => {
  it('with DATABASE_URL: stops accepting, finishes the in-flight request, ends long polls, closes the pool, exits 0', async () => {
    database = await createFixtureDatabase();
    const dbName = new URL(database.url).pathname.slice(1);
    server = await spawnServer({
      args: ['--import', 'tsx', 'src/server.ts'],
      env: {
        ...baseEnvironment(),
        DATABASE_URL: database.url,
        AVATAR_SALT: 'test-salt',
        EXTERNAL_HOST: 'chat.example.com',
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
        RATE_LIMITING: 'false',
        PGAPPNAME: APP_NAME,
        // The close itself; the drain before it has its own tests below.
        SHUTDOWN_DRAIN_SECONDS: '0',
      },
      startTimeoutMs: START_TIMEOUT_MS,
    });
    expect((await fetch(`${server.url}/ready`)).status).toBe(200);

    // A long poll waiting for events.
    const registered = await fetch(`${server.url}/api/v1/register`, {
      method: 'POST',
      headers,
      body: new URLSearchParams({ event_types: '["subscription"]' }),
    });
    const { queue_id: queueId } = (await registered.json()) as { queue_id: string };
    const poll = fetch(`${server.url}/api/v1/events?queue_id=${queueId}&last_event_id=-1`, { headers });
    await eventually(pollWaiting(queueId), 'the poll to wait');

    // A write held in flight: the test holds the row lock its UPDATE needs.
    const blocker = new pg.Client({ connectionString: database.url });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('SELECT 1 FROM subscriptions WHERE user_id = 13 AND stream_id = 100 FOR UPDATE');
    const write = fetch(`${server.url}/api/v1/users/me/subscriptions/properties`, {
      method: 'POST',
      headers,
      body: new URLSearchParams({ subscription_data: '[{"stream_id":100,"property":"pin_to_top","value":true}]' }),
    });
    const waitingOnLock = async () => {
      // The blocker is inside a transaction, where pg_stat_activity is read once and kept.
      await blocker.query('SELECT pg_stat_clear_snapshot()');
      const { rows } = await blocker.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = $2 AND wait_event_type = 'Lock'",
        [dbName, APP_NAME],
      );
      return rows[0].n === 1;
    };
    await eventually(waitingOnLock, 'the write to wait on the row lock');

    server.child.kill('SIGTERM');

    // The waiting poll answers with what is pending (nothing), as a waited answer, while the write
    // is still held: at the start of the close, not at its end.
    const polled = await poll;
    expect(polled.status).toBe(200);
    expect(await polled.text()).toBe(success({ events: [], queue_id: queueId }));

    // No new connections, but the process waits for the in-flight write.
    const url = server.url;
    const refused = () =>
      freshRequest(url).then(
        () => false,
        (error: NodeJS.ErrnoException) => error.code === 'ECONNREFUSED',
      );
    await eventually(refused, 'the port to refuse new connections');
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(server.child.exitCode).toBeNull();

    await blocker.query('COMMIT');
    await blocker.end();
    const written = await write;
    expect(written.status).toBe(200);
    expect(await written.text()).toBe(OK);
    const row = await database.db
      .selectFrom('subscriptions')
      .select('pin_to_top')
      .where('user_id', '=', 13)
      .where('stream_id', '=', 100)
      .executeTakeFirstOrThrow();
    expect(row.pin_to_top).toBe(true);

    // Exit code 0: the close ended before its own deadline (CLOSE_GRACE_MS), which exits 1.
    const exit = await exitWithin(server, 60_000);
    expect(exit, [...server.stdout, ...server.stderr].join('\n')).toEqual({ code: 0, signal: null });
    expect(logLines(server)).toContainEqual(expect.objectContaining({ msg: 'shutting down', signal: 'SIGTERM' }));
    expect(server.stderr.join('\n')).toBe('');

    // The pool and the LISTEN connection are closed: no session of the server is left.
    const sessions = async () =>
      Number(
        (
          await database!.pool.query('SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name IN ($2, $3)', [
            dbName,
            APP_NAME,
            LISTENER_APPLICATION_NAME,
          ])
        ).rows[0].n,
      );
    await eventually(async () => (await sessions()) === 0, 'the server sessions to end');
  });

  it('embedded default (no DATABASE_URL): stops its PostgreSQL and exits 0', async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'zulip-shutdown-'));
    server = await spawnServer({
      args: ['--import', 'tsx', 'src/server.ts'],
      env: {
        ...baseEnvironment(),
        DATA_DIR: dataDir,
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
        EXTERNAL_HOST: 'chat.example.com',
        SHUTDOWN_DRAIN_SECONDS: '0',
      },
      startTimeoutMs: START_TIMEOUT_MS,
    });
    expect((await fetch(`${server.url}/ready`)).status).toBe(200);
    const clusterDir = join(dataDir, 'postgres');
    const postmasterPid = Number(readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    expect(processExists(postmasterPid)).toBe(true);
    expect(existsSync(join(dataDir, 'embedded-server.json'))).toBe(true);

    server.child.kill('SIGTERM');
    const exit = await exitWithin(server, 60_000);
    expect(exit, [...server.stdout, ...server.stderr].join('\n')).toEqual({ code: 0, signal: null });

    expect(processExists(postmasterPid)).toBe(false);
    expect(existsSync(join(clusterDir, 'postmaster.pid'))).toBe(false);
    expect(processesMentioning(clusterDir)).toEqual([]);
    // The admin command line no longer finds a running server on this DATA_DIR.
    expect(existsSync(join(dataDir, 'embedded-server.json'))).toBe(false);
  });
});

describe('Ctrl-C in the terminal of `npm start` (the embedded default)', () => {
  it('reaches the server alone: it closes, then stops its PostgreSQL; no lost connection, no timeout', async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'zulip-ctrl-c-'));
    // A terminal signals its whole foreground process group: the server runs as one.
    server = await spawnServer({
      args: ['--import', 'tsx', 'src/server.ts'],
      env: { ...baseEnvironment(), DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' },
      startTimeoutMs: START_TIMEOUT_MS,
      detached: true,
    });
    const demo = /email=member@example.com {2}api_key=(\w+)/.exec(server.stdout.join('\n'))!;
    const authorization = `Basic ${Buffer.from(`member@example.com:${demo[1]}`).toString('base64')}`;
    expect((await fetch(`${server.url}/api/v1/users/me`, { headers: { authorization } })).status).toBe(200);
    const clusterDir = join(dataDir, 'postgres');
    const postmasterPid = Number(readFileSync(join(clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    // PostgreSQL runs in a process group of its own, out of the terminal's reach.
    const processGroup = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[2]);
    expect(processGroup(server.child.pid!)).toBe(server.child.pid);
    expect(processGroup(postmasterPid)).not.toBe(server.child.pid);

    process.kill(-server.child.pid!, 'SIGINT');
    const exit = await exitWithin(server, 60_000);
    const output = [...server.stdout, ...server.stderr].join('\n');
    expect(exit, output).toEqual({ code: 0, signal: null });
    expect(output).not.toMatch(/connection lost|killed by timeout|"level":50/);
    expect(logLines(server).map((line) => line.msg)).toContain('shutting down');
    expect(processExists(postmasterPid)).toBe(false);
    expect(existsSync(join(clusterDir, 'postmaster.pid'))).toBe(false);
  });
});

describe('draining before the close (SIGTERM)', () => {
  /** A server on a fixture database, draining `drainSeconds` on SIGTERM. */
  async function drainingServer(drainSeconds: number): Promise<ServerProcess> {
    database = await createFixtureDatabase();
    return spawnServer({
      args: ['--import', 'tsx', 'src/server.ts'],
      env: {
        ...baseEnvironment(),
        DATABASE_URL: database.url,
        AVATAR_SALT: 'test-salt',
        EXTERNAL_HOST: 'chat.example.com',
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
        RATE_LIMITING: 'false',
        SHUTDOWN_DRAIN_SECONDS: String(drainSeconds),
      },
      startTimeoutMs: START_TIMEOUT_MS,
    });
  }
  const get = (path: string) => fetch(`${server!.url}${path}`, { headers });
  const isNotReady = async () => {
    const ready = await fetch(`${server!.url}/ready`);
    const body = await ready.text();
    return ready.status === 503 && ready.headers.get('retry-after') === '5' && body === UNAVAILABLE;
  };

  it('/ready answers 503 while requests, writes and long polls are still served; then it closes and exits 0', async () => {
    // Longer than the close's own 10 s deadline, which must not cut the drain short.
    server = await drainingServer(11);
    expect((await fetch(`${server.url}/ready`)).status).toBe(200);
    const registered = await fetch(`${server.url}/api/v1/register`, {
      method: 'POST',
      headers,
      body: new URLSearchParams({ event_types: '["subscription"]' }),
    });
    const { queue_id: queueId } = (await registered.json()) as { queue_id: string };
    const poll = (lastEventId: number) =>
      fetch(`${server!.url}/api/v1/events?queue_id=${queueId}&last_event_id=${lastEventId}`, { headers });
    const firstPoll = poll(-1);

    const signalledAt = Date.now();
    server.child.kill('SIGTERM');
    await eventually(isNotReady, '/ready to answer 503');

    // Everything else is served, on new connections too.
    expect(await freshRequest(server.url)).toBe(200);
    expect((await get('/api/v1/users/13')).status).toBe(200);
    const write = await fetch(`${server.url}/api/v1/users/me/subscriptions/properties`, {
      method: 'POST',
      headers,
      body: new URLSearchParams({ subscription_data: '[{"stream_id":100,"property":"pin_to_top","value":true}]' }),
    });
    expect(write.status).toBe(200);
    // The waiting poll is woken by the write's event, as on any other day.
    const polled = (await (await firstPoll).json()) as { events: { id: number; type: string; property: string }[] };
    expect(polled.events).toEqual([expect.objectContaining({ id: 0, type: 'subscription', property: 'pin_to_top' })]);
    // A poll that starts during the drain waits until the close answers it with nothing.
    let secondPollAnswered = false;
    const secondPoll = poll(0).then(async (response) => {
      secondPollAnswered = true;
      return { status: response.status, body: await response.text() };
    });
    await eventually(pollWaiting(queueId), 'the second poll to wait');
    expect(secondPollAnswered).toBe(false);
    expect(await isNotReady()).toBe(true);
    expect(server.child.exitCode).toBeNull();

    expect(await secondPoll).toEqual({ status: 200, body: success({ events: [], queue_id: queueId }) });
    const exit = await exitWithin(server, 60_000);
    expect(exit, [...server.stdout, ...server.stderr].join('\n')).toEqual({ code: 0, signal: null });
    expect(Date.now() - signalledAt).toBeGreaterThanOrEqual(11_000);
    const messages = logLines(server).map((line) => line.msg);
    expect(messages.indexOf('draining')).toBeGreaterThanOrEqual(0);
    expect(messages.indexOf('shutting down')).toBeGreaterThan(messages.indexOf('draining'));
    expect(logLines(server)).toContainEqual(expect.objectContaining({ msg: 'draining', signal: 'SIGTERM', drainSeconds: 11 }));
    expect(server.stderr.join('\n')).toBe('');
  });

  it('a second SIGTERM ends the drain early and the close runs as usual', async () => {
    server = await drainingServer(120);
    server.child.kill('SIGTERM');
    await eventually(isNotReady, '/ready to answer 503');
    expect((await get('/api/v1/users/13')).status).toBe(200);
    server.child.kill('SIGTERM');
    // Well before the 120 s drain would end.
    expect(await exitWithin(server, 60_000)).toEqual({ code: 0, signal: null });
    expect(logLines(server).map((line) => line.msg)).toEqual(
      expect.arrayContaining(['draining', 'second signal, ending the drain', 'shutting down']),
    );
  });

  it('SIGINT (Ctrl-C) does not drain: the server closes at once', async () => {
    server = await drainingServer(120);
    server.child.kill('SIGINT');
    // Well before the 120 s drain would end.
    expect(await exitWithin(server, 60_000)).toEqual({ code: 0, signal: null });
    const messages = logLines(server).map((line) => line.msg);
    expect(messages).toContain('shutting down');
    expect(messages).not.toContain('draining');
  });
});

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Command lines of running processes that name this directory (e.g. `postgres -D <dir>`). */
function processesMentioning(directory: string): string[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .flatMap((pid) => {
      try {
        const commandLine = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
        return commandLine.includes(directory) ? [commandLine] : [];
      } catch {
        return [];
      }
    });
}
