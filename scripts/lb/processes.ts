import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { collectLines, type ServerProcess, spawnServer, REPO_ROOT } from '../../test/helpers/server-process.js';

/** Processes of the load-balancer test: the app instances and HAProxy. Every wait is bounded. */

const log = (line: string) => console.log(`[test:lb] ${line}`);
export { log };

/** Everything started is stopped by runCleanups, in reverse order, on success, failure or Ctrl-C. */
const cleanups: (() => Promise<void>)[] = [];
export const onCleanup = (cleanup: () => Promise<void>): void => void cleanups.push(cleanup);
export async function runCleanups(): Promise<void> {
  while (cleanups.length > 0) {
    await cleanups.pop()!().catch((error: unknown) => log(`cleanup failed: ${String(error)}`));
  }
}

/**
 * Runs a test script's `main` (which resolves to the problems it found) to its end: on problems or
 * a throw, `keepLogs` then the cleanups and exit 1; on success the cleanups and exit 0; on Ctrl-C
 * or SIGTERM the cleanups; after `watchdogMs` it gives up (exit 1). `log` prints the outcome.
 */
export function runScript(
  main: () => Promise<string[]>,
  options: { watchdogMs: number; keepLogs: () => Promise<void>; log: (line: string) => void; passed: string },
): void {
  const { watchdogMs, keepLogs, log: say } = options;
  let finished = false;
  // `on`, not `once`: Ctrl-C reaches this process twice (from the terminal and relayed by tsx), and
  // a second signal with no handler left would end it before its cleanups.
  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const) {
    process.on(signal, () => {
      if (finished) return;
      finished = true;
      say(`${signal}: stopping everything`);
      void runCleanups().finally(() => process.exit(code));
    });
  }
  const watchdog = setTimeout(() => {
    finished = true;
    say(`still running after ${watchdogMs / 1000} s: giving up`);
    void keepLogs()
      .then(runCleanups)
      .finally(() => process.exit(1));
  }, watchdogMs);
  main().then(
    async (problems) => {
      // Interrupted: the signal handler is already stopping everything.
      if (finished) return;
      finished = true;
      clearTimeout(watchdog);
      if (problems.length > 0) await keepLogs();
      await runCleanups();
      if (problems.length > 0) {
        say(`FAILED:\n  ${problems.join('\n  ')}`);
        process.exit(1);
      }
      say(options.passed);
      process.exit(0);
    },
    async (error: unknown) => {
      if (finished) return;
      finished = true;
      clearTimeout(watchdog);
      say(`FAILED: ${(error as Error).stack ?? String(error)}`);
      await keepLogs();
      await runCleanups();
      process.exit(1);
    },
  );
}

const running = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/** Kills a child that is still running (SIGKILL after `graceMs`) and waits for its exit. */
async function kill(child: ChildProcess, exited: Promise<unknown>, graceMs: number): Promise<void> {
  if (!running(child)) return;
  child.kill('SIGTERM');
  if (await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)])) return;
  child.kill('SIGKILL');
  await Promise.race([exited, sleep(5000)]);
}

export interface Instance extends ServerProcess {
  name: string;
  port: number;
}

/** `node dist/server.js` on 127.0.0.1:port, with the header observer loaded (observe-headers.mjs). */
export async function startInstance(name: string, port: number, env: Record<string, string>): Promise<Instance> {
  const server = await spawnServer({
    args: ['--import', join(REPO_ROOT, 'scripts/lb/observe-headers.mjs'), 'dist/server.js'],
    env: { ...env, PORT: String(port) },
    startTimeoutMs: 60_000,
  });
  // Ctrl-C or a failure: no drain needed, SIGKILL after 2 s.
  onCleanup(() => kill(server.child, server.exited, 2000));
  return { ...server, name, port };
}

/** The shipped deploy/haproxy.cfg with only the replicas' host names and the bind port mapped. */
export function balancerConfig(ports: { lb: number; app1: number; app2: number }): string {
  const shipped = readFileSync(join(REPO_ROOT, 'deploy/haproxy.cfg'), 'utf8');
  const replace = (text: string, from: string, to: string, times: number) => {
    const parts = text.split(from);
    if (parts.length !== times + 1) throw new Error(`deploy/haproxy.cfg: expected "${from}" ${times} times, found ${parts.length - 1}`);
    return parts.join(to);
  };
  let config = replace(shipped, ' app1:9991', ` 127.0.0.1:${ports.app1}`, 2);
  config = replace(config, ' app2:9991', ` 127.0.0.1:${ports.app2}`, 2);
  config = replace(config, 'bind :9991', `bind 127.0.0.1:${ports.lb}`, 1);
  return config;
}

export interface Balancer {
  url: string;
  /** The lines of the JSON access log (stdout) so far. */
  accessLog(): string[];
  /** HAProxy's own messages (stderr) with the time each arrived. */
  messages: { at: number; text: string }[];
  /** Waits for a message matching `pattern` that arrived at or after `since`. */
  waitForMessage(pattern: RegExp, since: number, timeoutMs: number): Promise<number>;
  stop(): Promise<void>;
}

export function haproxyVersion(): string | undefined {
  const result = spawnSync('haproxy', ['-v'], { encoding: 'utf8' });
  return result.status === 0 ? /version (\S+)/.exec(result.stdout)?.[1] : undefined;
}

export async function startBalancer(config: string, port: number, directory: string): Promise<Balancer> {
  const file = join(directory, 'haproxy.cfg');
  writeFileSync(file, config);
  const check = spawnSync('haproxy', ['-c', '-q', '-f', file], { encoding: 'utf8' });
  if (check.status !== 0) throw new Error(`haproxy -c rejected the configuration:\n${check.stdout}${check.stderr}`);
  // The access log goes to a file: HAProxy drops log lines rather than wait for a full pipe, and
  // this process, busy with the load, may not read one fast enough.
  const accessLogFile = join(directory, 'haproxy-access.log');
  const accessLogFd = openSync(accessLogFile, 'w');
  const child = spawn('haproxy', ['-db', '-f', file], { stdio: ['ignore', accessLogFd, 'pipe'] });
  closeSync(accessLogFd);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  onCleanup(() => kill(child, exited, 5000));
  const messages: { at: number; text: string }[] = [];
  collectLines(child.stderr!, [], (text) => messages.push({ at: Date.now(), text }));
  const url = `http://127.0.0.1:${port}`;
  const balancer: Balancer = {
    url,
    accessLog: () =>
      readFileSync(accessLogFile, 'utf8')
        .split('\n')
        .filter((line) => line !== ''),
    messages,
    async waitForMessage(pattern, since, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const found = messages.find((message) => message.at >= since && pattern.test(message.text));
        if (found) return found.at;
        if (!running(child)) break;
        await sleep(20);
      }
      throw new Error(`HAProxy did not report ${pattern} within ${timeoutMs} ms:\n${messages.map((m) => m.text).join('\n')}`);
    },
    stop: () => kill(child, exited, 5000),
  };
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (!running(child)) throw new Error(`HAProxy exited:\n${messages.map((m) => m.text).join('\n')}`);
    const health = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) }).catch(() => undefined);
    if (health?.status === 200) return balancer;
    await sleep(100);
  }
  throw new Error('HAProxy did not serve /health within 10 s');
}
