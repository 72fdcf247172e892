import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';

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
    const config = loadConfig({ DATA_DIR: tempDir() });
    expect(config).toMatchObject({
      databaseUrl: undefined,
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
