import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The repository root (tests spawn the server from here unless told otherwise). */
export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

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
}

/** Environment of a spawned server: PATH and HOME only, so the developer's variables do not leak in. */
export function baseEnvironment(): Record<string, string> {
  return { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp' };
}

/** Spawns `node <args>` and waits until Fastify logs where it listens (PORT=0 picks a free port). */
export function spawnServer(options: SpawnOptions): Promise<ServerProcess> {
  const child = spawn(process.execPath, options.args, {
    cwd: options.cwd ?? REPO_ROOT,
    env: options.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stdout: string[] = [];
  const stderr: string[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
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
export async function exitWithin(server: ServerProcess, ms: number) {
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
