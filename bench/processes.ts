import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** Child processes of the benchmark: the build, the two servers. Every wait is bounded. */

const ROOT = new URL('..', import.meta.url).pathname;

function newestMtime(directory: string): number {
  let newest = 0;
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs);
  }
  return newest;
}

/** Runs `npm run build` when dist/ is missing or older than any source file. */
export function ensureBuilt(log: (line: string) => void): void {
  const entry = join(ROOT, 'dist', 'server.js');
  const stale = !existsSync(entry) || statSync(entry).mtimeMs < newestMtime(join(ROOT, 'src'));
  if (!stale) return log('dist/ is up to date');
  log('building dist/ (npm run build)');
  const result = spawnSync('npm', ['run', 'build'], { cwd: ROOT, encoding: 'utf8', timeout: 300_000 });
  // tsc emits despite type errors; a half-finished file of someone else must not stop the run.
  if (result.status !== 0) log(`npm run build reported errors:\n${(result.stdout + result.stderr).trim().slice(-2000)}`);
  if (!existsSync(entry)) throw new Error('dist/server.js was not produced');
}

export interface RunningProcess {
  name: string;
  url: string;
  pid: number;
  /** SIGTERM, then SIGKILL after the grace period; resolves when the process has exited. */
  stop(): Promise<void>;
}

/**
 * Spawns a server listening on 127.0.0.1:port and waits (at most `readyTimeoutMs`) until
 * `readyPath` answers 200. Output is kept (tail) for the error message if it dies.
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
    cwd: ROOT,
    env: { ...process.env, ...options.env, PORT: String(options.port) },
    stdio: ['ignore', logFd ?? 'pipe', 'pipe'],
  });
  if (logFd !== undefined) closeSync(logFd); // the child has its own copy
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let alive = true;
  void exited.then(() => {
    alive = false;
  });
  const url = `http://127.0.0.1:${options.port}`;
  const stop = async () => {
    if (!alive) return;
    child.kill('SIGTERM');
    const graceful = await Promise.race([exited.then(() => true), sleep(15_000).then(() => false)]);
    if (!graceful) {
      child.kill('SIGKILL');
      await Promise.race([exited, sleep(5_000)]);
    }
  };
  const deadline = Date.now() + (options.readyTimeoutMs ?? 30_000);
  while (Date.now() < deadline) {
    if (!alive) throw new Error(`${options.name} exited during startup:\n${output}`);
    try {
      const response = await fetch(url + options.readyPath, { signal: AbortSignal.timeout(1000) });
      if (response.status === 200) return { name: options.name, url, pid: child.pid!, stop };
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  await stop();
  throw new Error(`${options.name} did not become ready within ${options.readyTimeoutMs ?? 30_000} ms:\n${output}`);
}
