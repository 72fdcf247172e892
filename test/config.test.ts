import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';
import { checkReachableByPostgresUser } from '../src/db/embedded.js';
import { freePort } from '../src/lib/free-port.js';
import { baseEnvironment, REPO_ROOT } from '../scripts/lib/processes.js';

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'config-'));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('configuration from the environment', () => {
  it('has the docs/api.md defaults', () => {
    const config = loadConfig({ DATABASE_URL: 'postgres://db/x', AVATAR_SALT: 's' });
    expect(config).toMatchObject({
      port: 9991,
      externalHost: 'localhost:9991',
      externalUriScheme: 'https://',
      rootSubdomainAliases: ['www'],
      fakeEmailDomain: 'localhost',
      enableGravatar: true,
      defaultAvatarUri: '/static/images/default-avatar.png',
      zulipVersion: '12.0-dev',
      rateLimiting: true,
      rateLimitWindowSeconds: 60,
      rateLimitMaxRequests: 200,
      bodyLimitBytes: 1048576,
      retryAfterSeconds: 5,
      heartbeatSeconds: 45,
      heartbeatJitterSeconds: 10,
      eventQueueLongpollTimeoutSeconds: 90,
      queueDefaultLifespanSeconds: 600,
      queueMaxLifespanSeconds: 604800,
      trustProxy: false,
      dbPoolMax: 20,
      dbReadConnections: 2,
      dbWriteConnections: 2,
      dbConnectTimeoutMs: 2000,
      shutdownDrainSeconds: 5,
      pollRecheckSeconds: 5,
      requestBodyMemoryBytes: 16777216,
      userRequestBodyBytes: 2097152,
      userRequestBodies: 32,
      bodyTimeoutSeconds: 10,
      metricsPort: undefined,
      metricsHost: '127.0.0.1',
      compressionThresholdBytes: 4096,
      heapGrowingPercent: 40,
    });
  });

  it('with the embedded database and no EXTERNAL_HOST, names the organizations where the server listens, over http', () => {
    expect(loadConfig({ DATA_DIR: tempDir() })).toMatchObject({
      databaseUrl: undefined,
      externalHost: 'localhost:9991',
      externalUriScheme: 'http://',
      fakeEmailDomain: 'localhost',
    });
    expect(loadConfig({ DATA_DIR: tempDir(), PORT: '33001' })).toMatchObject({
      externalHost: 'localhost:33001',
      externalUriScheme: 'http://',
    });
    // PORT=0: the port is known only once listening.
    expect(loadConfig({ DATA_DIR: tempDir(), PORT: '0' })).toMatchObject({ externalHost: 'localhost', externalUriScheme: 'http://' });
    // Either one set: the other keeps docs/api.md's default.
    expect(loadConfig({ DATA_DIR: tempDir(), PORT: '33001', EXTERNAL_HOST: 'chat.example.com' })).toMatchObject({
      externalHost: 'chat.example.com',
      externalUriScheme: 'https://',
    });
    expect(loadConfig({ DATA_DIR: tempDir(), PORT: '33001', EXTERNAL_URI_SCHEME: 'https://' })).toMatchObject({
      externalHost: 'localhost:33001',
      externalUriScheme: 'https://',
    });
  });

  it('parses typed values', () => {
    const config = loadConfig({
      DATABASE_URL: 'postgres://db/x',
      AVATAR_SALT: 's',
      PORT: '8080',
      ENABLE_GRAVATAR: 'false',
      TRUST_PROXY: '1',
      EXTERNAL_HOST: 'Chat.Example.com:8443',
      ROOT_SUBDOMAIN_ALIASES: 'www, app',
      DB_READ_CONNECTIONS: '4',
      SHUTDOWN_DRAIN_SECONDS: '0',
      POLL_RECHECK_SECONDS: '20',
      METRICS_PORT: '9464',
      METRICS_HOST: '0.0.0.0',
      COMPRESSION_THRESHOLD_BYTES: '0',
      HEAP_GROWING_PERCENT: '30',
    });
    expect(config).toMatchObject({
      port: 8080,
      enableGravatar: false,
      trustProxy: true,
      heapGrowingPercent: 30,
      externalHost: 'chat.example.com:8443',
      fakeEmailDomain: 'chat.example.com',
      rootSubdomainAliases: ['www', 'app'],
      avatarSalt: 's',
      dbReadConnections: 4,
      shutdownDrainSeconds: 0,
      pollRecheckSeconds: 20,
      metricsPort: 9464,
      metricsHost: '0.0.0.0',
      compressionThresholdBytes: 0,
    });
  });

  it.each([
    [{ PORT: 'abc' }, /^Invalid environment variable PORT="abc"/],
    [{ PORT: '70000' }, /^Invalid environment variable PORT="70000"/],
    [{ METRICS_PORT: '70000' }, /^Invalid environment variable METRICS_PORT="70000"/],
    [{ ENABLE_GRAVATAR: 'yes' }, /^Invalid environment variable ENABLE_GRAVATAR="yes"/],
    [{ LOG_LEVEL: 'loud' }, /^Invalid environment variable LOG_LEVEL="loud"/],
    [{ EXTERNAL_HOST: 'bad host/' }, /^Invalid environment variable EXTERNAL_HOST="bad host\/"/],
    [{ DATABASE_URL: 'not-a-url', AVATAR_SALT: 's' }, /^Invalid environment variable DATABASE_URL="not-a-url"/],
    [{ DB_READ_CONNECTIONS: '0' }, /^Invalid environment variable DB_READ_CONNECTIONS="0"/],
    [{ SHUTDOWN_DRAIN_SECONDS: '-1' }, /^Invalid environment variable SHUTDOWN_DRAIN_SECONDS="-1"/],
    // A longer interval would let the 60 s poll leases run out between two renewals.
    [{ POLL_RECHECK_SECONDS: '21' }, /^Invalid environment variable POLL_RECHECK_SECONDS="21"/],
    [{ HEAP_GROWING_PERCENT: '301' }, /^Invalid environment variable HEAP_GROWING_PERCENT="301"/],
    [{ HEARTBEAT_SECONDS: '100' }, /^EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS must exceed/],
    // No body of the largest size could ever be admitted.
    [{ REQUEST_BODY_MEMORY_BYTES: '4096', BODY_LIMIT_BYTES: '8192' }, /^REQUEST_BODY_MEMORY_BYTES must be at least BODY_LIMIT_BYTES/],
  ])('a bad value fails naming the variable: %o', (env, message) => {
    expect(() => loadConfig({ DATA_DIR: tempDir(), ...env })).toThrow(ConfigError);
    expect(() => loadConfig({ DATA_DIR: tempDir(), ...env })).toThrow(message);
  });

  it.each([
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL="loud": must be one of fatal, error, warn, info, debug, trace, silent'],
    [{ EXTERNAL_URI_SCHEME: 'ftp://' }, 'EXTERNAL_URI_SCHEME="ftp://": must be one of https://, http://'],
    [{ ENABLE_GRAVATAR: 'yes' }, 'ENABLE_GRAVATAR="yes": must be one of true, false, 1, 0'],
    [{ PORT: '70000' }, 'PORT="70000": must be an integer from 0 to 65535'],
    [{ RATE_LIMIT_MAX_REQUESTS: '0' }, 'RATE_LIMIT_MAX_REQUESTS="0": must be an integer of at least 1'],
    [{ EXTERNAL_HOST: 'bad host/' }, 'EXTERNAL_HOST="bad host/": must be a host name with an optional :port, such as chat.example.com'],
    // Another database's URL is refused here, before any connection; its password is not shown.
    [
      { DATABASE_URL: 'mysql://root:secret@db:3306/zulip', AVATAR_SALT: 's' },
      'DATABASE_URL="mysql://root:***@db:3306/zulip": must be a postgres:// or postgresql:// URL',
    ],
  ])('the message names the allowed values: %o', (env, message) => {
    expect(() => loadConfig({ DATA_DIR: tempDir(), ...env })).toThrow(new ConfigError(`Invalid environment variable ${message}`));
  });

  it('takes postgresql:// as well as postgres://', () => {
    const config = loadConfig({ DATABASE_URL: 'postgresql://u:p@db/x', AVATAR_SALT: 's' });
    expect(config.databaseUrl).toBe('postgresql://u:p@db/x');
  });

  it('HEAP_GROWING_PERCENT=0 leaves the heap growth to V8 (the default is 40)', () => {
    expect(loadConfig({ DATA_DIR: tempDir(), HEAP_GROWING_PERCENT: '0' }).heapGrowingPercent).toBe(0);
  });

  it('requires AVATAR_SALT with DATABASE_URL', () => {
    expect(() => loadConfig({ DATABASE_URL: 'postgres://db/x' })).toThrow('AVATAR_SALT is required when DATABASE_URL is set');
  });

  it('generates the salt once in DATA_DIR for the embedded default, and keeps it private', () => {
    const dataDir = tempDir();
    const first = loadConfig({ DATA_DIR: dataDir }).avatarSalt;
    expect(first).toMatch(/^[0-9a-f]{64}$/);
    expect(loadConfig({ DATA_DIR: dataDir }).avatarSalt).toBe(first);
    const file = join(dataDir, 'secrets', 'avatar_salt');
    expect(readFileSync(file, 'utf8').trim()).toBe(first);
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });
});

describe('DATA_DIR of a start as root', () => {
  // As root the embedded PostgreSQL runs as the OS user "postgres" (src/db/embedded.ts).
  it('under a private folder (mode 700) is refused before initdb, naming DATA_DIR, why and what to do', async () => {
    const home = tempDir(); // mkdtemp makes it 700, as a home folder is
    const dataDir = join(home, 'clone', 'data');
    mkdirSync(dataDir, { recursive: true });
    await expect(checkReachableByPostgresUser(join(dataDir, 'postgres'))).rejects.toThrow(
      new ConfigError(
        `DATA_DIR (${dataDir}): started as root, the embedded PostgreSQL runs as the OS user "postgres", which cannot enter ${home} (mode 700).\n` +
          'Set DATA_DIR to a folder outside it (e.g. DATA_DIR=/var/lib/zulip-compat), start as another user, or set DATABASE_URL.',
      ),
    );
    chmodSync(home, 0o711);
    await expect(checkReachableByPostgresUser(join(dataDir, 'postgres'))).resolves.toBeUndefined();
  });
});

describe('a server process that cannot start', () => {
  /** Runs `node --import tsx src/server.ts` with `env` to its exit. */
  async function start(env: Record<string, string>): Promise<{ code: unknown; stdout: string; stderr: string }> {
    const run = promisify(execFile)(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
      cwd: REPO_ROOT,
      env: { ...baseEnvironment(), DATA_DIR: tempDir(), AVATAR_SALT: 's', PORT: '0', ...env },
      timeout: 120_000,
    });
    return run.then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (error: { code: unknown; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
    );
  }

  it(
    'exits 1 with one line naming DATABASE_URL and the cause, no stack: a refused port, a mysql:// URL',
    { timeout: 240_000 },
    async () => {
      const port = await freePort(); // closed again: nothing listens there
      expect(await start({ DATABASE_URL: `postgres://postgres:secret@127.0.0.1:${port}/zulip` })).toEqual({
        code: 1,
        stdout: '',
        stderr: `DATABASE_URL (postgres://postgres:***@127.0.0.1:${port}/zulip): connection refused\n`,
      });
      expect(await start({ DATABASE_URL: 'mysql://root:secret@127.0.0.1:3306/zulip' })).toEqual({
        code: 1,
        stdout: '',
        stderr:
          'Invalid environment variable DATABASE_URL="mysql://root:***@127.0.0.1:3306/zulip": must be a postgres:// or postgresql:// URL\n',
      });
    },
  );
});

describe('a start on the embedded database that fails after PostgreSQL started', () => {
  it('names PORT and HOST and the cause, and stops the PostgreSQL it started', { timeout: 240_000 }, async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as AddressInfo).port;
    const dataDir = tempDir();
    try {
      const run = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
        cwd: REPO_ROOT,
        env: { ...baseEnvironment(), DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: 'silent' },
        timeout: 180_000,
      }).then(
        () => ({ code: 0, stderr: '' }),
        (error: { code: unknown; stderr: string }) => ({ code: error.code, stderr: error.stderr }),
      );
      expect(run).toEqual({ code: 1, stderr: `PORT (${port}) on HOST (127.0.0.1): address already in use\n` });
    } finally {
      taken.close();
    }
    // The embedded PostgreSQL runs detached: the failed start stopped it rather than leave it behind.
    const running = readdirSync('/proc')
      .filter((entry) => /^\d+$/.test(entry))
      .filter((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(dataDir);
        } catch {
          return false;
        }
      });
    expect(running).toEqual([]);
    expect(existsSync(join(dataDir, 'postgres', 'postmaster.pid'))).toBe(false);
  });
});
