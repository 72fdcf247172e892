import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

/**
 * The one launcher of child processes for the tests, the benchmark, the soak and the balancer and
 * failover tests: servers (`node …`), their output, their readiness, their stop, and the cleanups
 * that stop everything a script started. Every wait is bounded.
 */

/** The repository root (servers are spawned from here unless told otherwise). */
export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Environment of a spawned server: PATH and HOME only, so the developer's variables do not leak in. */
export function baseEnvironment(): Record<string, string> {
  return { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp' };
}

/** Appends each complete line of `stream` to `lines` (and hands it to `onLine`) as it arrives. */
export function collectLines(stream: NodeJS.ReadableStream, lines: string[], onLine?: (line: string) => void): void {
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    const parts = (rest + chunk).split('\n');
    rest = parts.pop() ?? '';
    for (const line of parts) {
      lines.push(line);
      onLine?.(line);
    }
  });
}

const running = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/** SIGTERM to a child that is still running, SIGKILL after `graceMs`; resolves once it has exited (or 5 s after the SIGKILL). */
export async function stopProcess(child: ChildProcess, exited: Promise<unknown>, graceMs: number): Promise<void> {
  if (!running(child)) return;
  child.kill('SIGTERM');
  if (await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)])) return;
  child.kill('SIGKILL');
  await Promise.race([exited, sleep(5000)]);
}

// --- Cleanups: everything a script starts is stopped by runCleanups, in reverse order. ---

const cleanups: (() => Promise<unknown>)[] = [];
export const onCleanup = (cleanup: () => Promise<unknown>): void => void cleanups.push(cleanup);
export async function runCleanups(log: (line: string) => void = console.log): Promise<void> {
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
  const cleanUp = () => runCleanups(say);
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
      void cleanUp().finally(() => process.exit(code));
    });
  }
  const watchdog = setTimeout(() => {
    finished = true;
    say(`still running after ${watchdogMs / 1000} s: giving up`);
    void keepLogs()
      .then(cleanUp)
      .finally(() => process.exit(1));
  }, watchdogMs);
  main().then(
    async (problems) => {
      // Interrupted: the signal handler is already stopping everything.
      if (finished) return;
      finished = true;
      clearTimeout(watchdog);
      if (problems.length > 0) await keepLogs();
      await cleanUp();
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
      await cleanUp();
      process.exit(1);
    },
  );
}

// --- Building dist/. ---

/** Builds dist/ when it is missing or older than src/ (scripts/build.mjs --if-stale). */
export function ensureBuilt(log: (line: string) => void): void {
  const result = spawnSync(process.execPath, ['scripts/build.mjs', '--if-stale'], { cwd: REPO_ROOT, encoding: 'utf8', timeout: 300_000 });
  if (result.status !== 0) throw new Error(`scripts/build.mjs failed:\n${(result.stdout + result.stderr).trim().slice(-2000)}`);
  log('dist/ is up to date');
}

// --- Servers. ---

/** A server started by spawnServer (ready once it logged where it listens). */
export interface ServerProcess {
  child: ChildProcess;
  /** Base URL from the "Server listening at" log line. */
  url: string;
  /** Every stdout line so far (JSON log lines and, for the embedded default, the demo text). */
  stdout: string[];
  stderr: string[];
  /** Resolves when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface SpawnOptions {
  args: string[];
  env: Record<string, string>;
  cwd?: string;
  /** How long to wait for the listening line. */
  startTimeoutMs?: number;
  /** In a process group of its own, as a terminal's foreground job (Ctrl-C: `process.kill(-pid, 'SIGINT')`). */
  detached?: boolean;
}

/** Spawns `node <args>` and waits until Fastify logs where it listens (PORT=0 picks a free port). */
export function spawnServer(options: SpawnOptions): Promise<ServerProcess> {
  const child = spawn(process.execPath, options.args, {
    cwd: options.cwd ?? REPO_ROOT,
    env: options.env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached ?? false,
  });
  const stdout: string[] = [];
  const stderr: string[] = [];
  const exited = exitOf(child);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not start:\n${stdout.join('\n')}\n${stderr.join('\n')}`));
    }, options.startTimeoutMs ?? 60_000);
    collectLines(child.stdout, stdout, (line) => {
      const listening = /"msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/.exec(line);
      if (!listening) return;
      clearTimeout(timer);
      resolve({ child, url: listening[1]!, stdout, stderr, exited });
    });
    collectLines(child.stderr, stderr);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code ?? signal}) before listening:\n${stdout.join('\n')}\n${stderr.join('\n')}`));
    });
  });
}

const exitOf = (child: ChildProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );

/** A server started by startServer (ready once `readyPath` answered 200). */
export interface RunningProcess {
  name: string;
  url: string;
  port: number;
  pid: number;
  /** The tail of its output (stdout unless it goes to a log file, and stderr), for error messages. */
  output(): string;
  alive(): boolean;
  /** SIGTERM, then SIGKILL after the grace period; resolves when the process has exited. */
  stop(): Promise<void>;
}

/**
 * Spawns a server listening on 127.0.0.1:port, with this process's environment and `env`, and waits
 * (at most `readyTimeoutMs`) until `readyPath` answers 200. Output is kept (tail) for the error
 * message if it dies.
 */
export async function startServer(options: {
  name: string;
  args: string[];
  env: Record<string, string>;
  port: number;
  readyPath: string;
  readyTimeoutMs?: number;
  /** Where its standard output (the JSON log) goes, as a production log would; else it is kept in memory. */
  logFile?: string;
}): Promise<RunningProcess> {
  const logFd = options.logFile === undefined ? undefined : openSync(options.logFile, 'a');
  const child: ChildProcess = spawn(process.execPath, options.args, {
    cwd: REPO_ROOT,
    env: { ...process.env, ...options.env, PORT: String(options.port) },
    stdio: ['ignore', logFd ?? 'pipe', 'pipe'],
  });
  if (logFd !== undefined) closeSync(logFd); // the child has its own copy
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-6000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = exitOf(child);
  const url = `http://127.0.0.1:${options.port}`;
  const stop = () => stopProcess(child, exited, 15_000);
  const server: RunningProcess = {
    name: options.name,
    url,
    port: options.port,
    pid: child.pid!,
    output: () => output,
    alive: () => running(child),
    stop,
  };
  const timeoutMs = options.readyTimeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!running(child)) throw new Error(`${options.name} exited during startup:\n${output}`);
    try {
      const response = await fetch(url + options.readyPath, { signal: AbortSignal.timeout(1000) });
      if (response.status === 200) return server;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  await stop();
  throw new Error(`${options.name} did not become ready within ${timeoutMs} ms:\n${output}`);
}

/** Parsed JSON log lines (other stdout lines skipped). */
export function logLines(server: Pick<ServerProcess, 'stdout'>): Array<Record<string, unknown>> {
  return server.stdout.flatMap((line) => {
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

/** Resolves with the exit, or rejects when the process is still running after `ms`. */
export async function exitWithin(server: Pick<ServerProcess, 'exited'>, ms: number) {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still running ${ms} ms later`)), ms);
  });
  try {
    return await Promise.race([server.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
