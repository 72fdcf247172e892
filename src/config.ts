import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import Type, { type Static } from 'typebox';
import Value from 'typebox/value';
import { DEFAULT_ZULIP_VERSION } from './zulip.js';

// One schema for the whole environment. Every variable is optional here; the rules that depend on
// each other (secrets required with DATABASE_URL) are applied in loadConfig.
const EnvSchema = Type.Object({
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://', description: 'a postgres:// or postgresql:// URL' })),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 9991 }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  DATA_DIR: Type.String({ minLength: 1, default: './data' }),
  // The literals one by one, not mapped from an array: a mapped array would type the level as never.
  LOG_LEVEL: Type.Union(
    [
      Type.Literal('fatal'),
      Type.Literal('error'),
      Type.Literal('warn'),
      Type.Literal('info'),
      Type.Literal('debug'),
      Type.Literal('trace'),
      Type.Literal('silent'),
    ],
    { default: 'info' },
  ),
  // Unset: see loadConfig (the spec's localhost:9991 over https://, or where the embedded default listens).
  EXTERNAL_HOST: Type.Optional(
    Type.String({ pattern: '^[A-Za-z0-9.-]+(:[0-9]+)?$', description: 'a host name with an optional :port, such as chat.example.com' }),
  ),
  EXTERNAL_URI_SCHEME: Type.Optional(Type.Union([Type.Literal('https://'), Type.Literal('http://')])),
  ROOT_SUBDOMAIN_ALIASES: Type.String({ default: 'www' }),
  FAKE_EMAIL_DOMAIN: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9.-]+$', description: 'a domain name, such as example.com' })),
  ENABLE_GRAVATAR: Type.Boolean({ default: true }),
  DEFAULT_AVATAR_URI: Type.String({ minLength: 1, default: '/static/images/default-avatar.png' }),
  AVATAR_SALT: Type.Optional(Type.String({ minLength: 1 })),
  ZULIP_VERSION: Type.String({ minLength: 1, default: DEFAULT_ZULIP_VERSION }),
  RATE_LIMITING: Type.Boolean({ default: true }),
  RATE_LIMIT_WINDOW_SECONDS: Type.Integer({ minimum: 1, default: 60 }),
  RATE_LIMIT_MAX_REQUESTS: Type.Integer({ minimum: 1, default: 200 }),
  BODY_LIMIT_BYTES: Type.Integer({ minimum: 1024, default: 1048576 }),
  // Bytes of authenticated requests' bodies this instance serves at once; beyond: 503 (src/http/request-memory.ts).
  REQUEST_BODY_MEMORY_BYTES: Type.Integer({ minimum: 1024, default: 16777216 }),
  // One user's bodies held at once on an instance, in bytes and in requests; beyond: 429.
  USER_REQUEST_BODY_BYTES: Type.Integer({ minimum: 1024, default: 2097152 }),
  USER_REQUEST_BODIES: Type.Integer({ minimum: 1, default: 32 }),
  RETRY_AFTER_SECONDS: Type.Integer({ minimum: 1, default: 5 }),
  HEARTBEAT_SECONDS: Type.Integer({ minimum: 1, default: 45 }),
  HEARTBEAT_JITTER_SECONDS: Type.Integer({ minimum: 0, default: 10 }),
  EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: Type.Integer({ minimum: 1, default: 90 }),
  QUEUE_DEFAULT_LIFESPAN_SECONDS: Type.Integer({ minimum: 1, default: 600 }),
  QUEUE_MAX_LIFESPAN_SECONDS: Type.Integer({ minimum: 1, default: 604800 }),
  // How often each instance deletes expired event queues and old audit rows.
  QUEUE_SWEEP_INTERVAL_SECONDS: Type.Integer({ minimum: 1, default: 60 }),
  // How often the instance checks all its waiting polls in one statement (src/modules/events/poll-rechecks.ts).
  // Spec §2.10: waiting polls re-check at least every 5 s. At most 20, so that a 60 s poll lease,
  // renewed once less than 35 s are left, never runs out between two checks.
  POLL_RECHECK_SECONDS: Type.Integer({ minimum: 1, maximum: 20, default: 5 }),
  // Live event queues per user; register beyond it deletes the least recently used one.
  QUEUE_MAX_PER_USER: Type.Integer({ minimum: 1, default: 20 }),
  // Pending (unacknowledged) events per queue; a write that would leave more deletes the queue, whose
  // client then registers again. 10,000: one bulk update of the most entries a request may carry.
  QUEUE_MAX_PENDING_EVENTS: Type.Integer({ minimum: 1, default: 10_000 }),
  // Subscription audit rows older than this are deleted by the sweep.
  AUDIT_LOG_RETENTION_DAYS: Type.Integer({ minimum: 1, default: 365 }),
  TRUST_PROXY: Type.Boolean({ default: false }),
  // How far V8 lets the heap grow past what its last full collection kept, in percent (0: V8's own
  // choice, up to 300). V8's own let an instance holding 10,000 long polls grow its old generation
  // to 1.8–2.6 times what lives in it (304–392 MB on Node 20); 40 kept it at 1.4 times (272 MB) for
  // CPU within the runs' spread (bench/RESULTS.md, thirteenth session).
  HEAP_GROWING_PERCENT: Type.Integer({ minimum: 0, maximum: 300, default: 40 }),
  DB_POOL_MAX: Type.Integer({ minimum: 1, default: 20 }),
  // Pipelined connections for short single statements: authentication with its rate-limit upsert,
  // one user by id, cancels (src/db/pipelined-connections.ts). Named before they carried writes.
  DB_READ_CONNECTIONS: Type.Integer({ minimum: 1, maximum: 64, default: 2 }),
  // Pipelined connections for small write transactions (src/db/user-transactions.ts).
  DB_WRITE_CONNECTIONS: Type.Integer({ minimum: 1, maximum: 64, default: 2 }),
  DB_CONNECT_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 2000 }),
  // Server-side statement_timeout of pooled connections, in ms (0: none); a cancelled statement is a 503.
  DB_STATEMENT_TIMEOUT_MS: Type.Integer({ minimum: 0, default: 5000 }),
  // statement_timeout of the short-statement connections, in ms (0: none).
  DB_READ_STATEMENT_TIMEOUT_MS: Type.Integer({ minimum: 0, default: 1000 }),
  // How long a client may take to send a whole request (headers and body).
  REQUEST_TIMEOUT_SECONDS: Type.Integer({ minimum: 1, default: 60 }),
  // How long a body of 64 KiB or more (or chunked) may take to arrive, from the request's headers.
  BODY_TIMEOUT_SECONDS: Type.Integer({ minimum: 1, default: 10 }),
  // How long a connection may stay silent in both directions, a long poll included.
  CONNECTION_TIMEOUT_SECONDS: Type.Integer({ minimum: 1, default: 120 }),
  // How long an idle keep-alive connection stays open between requests.
  KEEP_ALIVE_TIMEOUT_SECONDS: Type.Integer({ minimum: 1, default: 72 }),
  // How long /ready answers 503 after SIGTERM, while everything else is served, before closing.
  // The shipped HAProxy takes a replica out within inter 2 s + fastinter 1 s (fall 2) of /ready
  // failing: 5 s leaves a margin (deploy/haproxy.cfg).
  SHUTDOWN_DRAIN_SECONDS: Type.Integer({ minimum: 0, maximum: 3600, default: 5 }),
  // The Prometheus metrics listener (GET /metrics); unset: no metrics are collected at all.
  METRICS_PORT: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535 })),
  METRICS_HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  // JSON answers of at least this many bytes are compressed when the client accepts it.
  COMPRESSION_THRESHOLD_BYTES: Type.Integer({ minimum: 0, default: 4096 }),
});
type Env = Static<typeof EnvSchema>;

/** `DB_READ_CONNECTIONS` → `dbReadConnections`: a Config property is its variable, camel-cased. */
type CamelCase<Name extends string> = Name extends `${infer Head}_${infer Tail}`
  ? `${Lowercase<Head>}${Capitalize<CamelCase<Tail>>}`
  : Lowercase<Name>;

/** The values loadConfig derives instead of passing them on as parsed. */
interface Derived {
  /** Undefined: the embedded PostgreSQL (src/db/embedded.ts). */
  databaseUrl: string | undefined;
  /** EXTERNAL_HOST, lower-cased; unset: `localhost:<PORT>` on the embedded default, else `localhost:9991`. */
  externalHost: string;
  /** EXTERNAL_URI_SCHEME; unset: `http://` on the embedded default's own host, else `https://`. */
  externalUriScheme: 'https://' | 'http://';
  rootSubdomainAliases: string[];
  /** FAKE_EMAIL_DOMAIN, else EXTERNAL_HOST without its port. */
  fakeEmailDomain: string;
  /** AVATAR_SALT, else the secret kept in DATA_DIR. */
  avatarSalt: string;
}

/** The typed configuration: the schema's variables, camel-cased, with the derived values. */
export type Config = Omit<{ [Name in keyof Env as CamelCase<Name>]: Env[Name] }, keyof Derived> & Derived;

export class ConfigError extends Error {}

const BOOLEAN_WORDS: Record<string, boolean> = { true: true, false: false, '1': true, '0': false };

/** Reads the environment into a typed Config; a bad value throws a ConfigError naming the variable. */
export function loadConfig(environment: NodeJS.ProcessEnv = process.env): Config {
  const raw: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(EnvSchema.properties)) {
    const text = environment[name];
    if (text === undefined || text === '') continue;
    const isBoolean = 'type' in schema && schema.type === 'boolean';
    // Only exact words: TypeBox's Convert would also take "yes"-like text silently.
    raw[name] = isBoolean ? (BOOLEAN_WORDS[text.toLowerCase()] ?? text) : text;
  }
  // Default and Convert work in place, on a copy.
  const env = Value.Convert(EnvSchema, Value.Default(EnvSchema, { ...raw })) as Env;
  const firstError = [...Value.Errors(EnvSchema, env)][0];
  if (firstError) {
    const name = firstError.instancePath.replace(/^\//, '') as keyof Env;
    const text = environment[name] ?? '';
    const shown = name === 'DATABASE_URL' ? redactedUrl(text) : text;
    throw new ConfigError(`Invalid environment variable ${name}=${JSON.stringify(shown)}: ${accepted(EnvSchema.properties[name])}`);
  }
  const dataDir = resolve(env.DATA_DIR);
  // The embedded default with no EXTERNAL_HOST serves this machine: its organizations are where it
  // listens, over http (acme.localhost:<PORT> reaches "acme"; PORT=0 picks the port later, so no port).
  const local = env.DATABASE_URL === undefined && env.EXTERNAL_HOST === undefined;
  const externalHost = (
    env.EXTERNAL_HOST ?? (!local ? 'localhost:9991' : env.PORT === 0 ? 'localhost' : `localhost:${env.PORT}`)
  ).toLowerCase();
  let avatarSalt = env.AVATAR_SALT;
  if (avatarSalt === undefined) {
    if (env.DATABASE_URL !== undefined) {
      throw new ConfigError('AVATAR_SALT is required when DATABASE_URL is set');
    }
    avatarSalt = readOrCreateSecret(dataDir, 'avatar_salt');
  }
  if (env.EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS <= env.HEARTBEAT_SECONDS + env.HEARTBEAT_JITTER_SECONDS) {
    throw new ConfigError('EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS must exceed HEARTBEAT_SECONDS + HEARTBEAT_JITTER_SECONDS');
  }
  // Otherwise a body of the largest size could never be admitted.
  if (env.REQUEST_BODY_MEMORY_BYTES < env.BODY_LIMIT_BYTES) {
    throw new ConfigError('REQUEST_BODY_MEMORY_BYTES must be at least BODY_LIMIT_BYTES');
  }
  // A long poll's connection is silent until its answer; the idle timeout must not cut it.
  if (env.CONNECTION_TIMEOUT_SECONDS <= env.EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS) {
    throw new ConfigError('CONNECTION_TIMEOUT_SECONDS must exceed EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS');
  }
  return {
    databaseUrl: env.DATABASE_URL,
    port: env.PORT,
    host: env.HOST,
    dataDir,
    logLevel: env.LOG_LEVEL,
    externalHost,
    externalUriScheme: env.EXTERNAL_URI_SCHEME ?? (local ? 'http://' : 'https://'),
    rootSubdomainAliases: env.ROOT_SUBDOMAIN_ALIASES.split(',')
      .map((alias) => alias.trim().toLowerCase())
      .filter((alias) => alias !== ''),
    fakeEmailDomain: (env.FAKE_EMAIL_DOMAIN ?? externalHost.replace(/:\d+$/, '')).toLowerCase(),
    enableGravatar: env.ENABLE_GRAVATAR,
    defaultAvatarUri: env.DEFAULT_AVATAR_URI,
    avatarSalt,
    zulipVersion: env.ZULIP_VERSION,
    rateLimiting: env.RATE_LIMITING,
    rateLimitWindowSeconds: env.RATE_LIMIT_WINDOW_SECONDS,
    rateLimitMaxRequests: env.RATE_LIMIT_MAX_REQUESTS,
    bodyLimitBytes: env.BODY_LIMIT_BYTES,
    requestBodyMemoryBytes: env.REQUEST_BODY_MEMORY_BYTES,
    userRequestBodyBytes: env.USER_REQUEST_BODY_BYTES,
    userRequestBodies: env.USER_REQUEST_BODIES,
    retryAfterSeconds: env.RETRY_AFTER_SECONDS,
    heartbeatSeconds: env.HEARTBEAT_SECONDS,
    heartbeatJitterSeconds: env.HEARTBEAT_JITTER_SECONDS,
    eventQueueLongpollTimeoutSeconds: env.EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS,
    queueDefaultLifespanSeconds: env.QUEUE_DEFAULT_LIFESPAN_SECONDS,
    queueMaxLifespanSeconds: env.QUEUE_MAX_LIFESPAN_SECONDS,
    queueSweepIntervalSeconds: env.QUEUE_SWEEP_INTERVAL_SECONDS,
    pollRecheckSeconds: env.POLL_RECHECK_SECONDS,
    queueMaxPerUser: env.QUEUE_MAX_PER_USER,
    queueMaxPendingEvents: env.QUEUE_MAX_PENDING_EVENTS,
    auditLogRetentionDays: env.AUDIT_LOG_RETENTION_DAYS,
    trustProxy: env.TRUST_PROXY,
    heapGrowingPercent: env.HEAP_GROWING_PERCENT,
    dbPoolMax: env.DB_POOL_MAX,
    dbReadConnections: env.DB_READ_CONNECTIONS,
    dbWriteConnections: env.DB_WRITE_CONNECTIONS,
    dbConnectTimeoutMs: env.DB_CONNECT_TIMEOUT_MS,
    dbStatementTimeoutMs: env.DB_STATEMENT_TIMEOUT_MS,
    dbReadStatementTimeoutMs: env.DB_READ_STATEMENT_TIMEOUT_MS,
    requestTimeoutSeconds: env.REQUEST_TIMEOUT_SECONDS,
    bodyTimeoutSeconds: env.BODY_TIMEOUT_SECONDS,
    connectionTimeoutSeconds: env.CONNECTION_TIMEOUT_SECONDS,
    keepAliveTimeoutSeconds: env.KEEP_ALIVE_TIMEOUT_SECONDS,
    shutdownDrainSeconds: env.SHUTDOWN_DRAIN_SECONDS,
    metricsPort: env.METRICS_PORT,
    metricsHost: env.METRICS_HOST,
    compressionThresholdBytes: env.COMPRESSION_THRESHOLD_BYTES,
  };
}

/** What a variable accepts, in words (TypeBox's own messages, "must be equal to constant", name no values). */
function accepted(schema: { type?: unknown; anyOf?: unknown; description?: string; minimum?: number; maximum?: number }): string {
  if (Array.isArray(schema.anyOf)) return `must be one of ${schema.anyOf.map((choice: { const: string }) => choice.const).join(', ')}`;
  if (schema.type === 'boolean') return 'must be one of true, false, 1, 0';
  if (schema.type === 'integer') {
    const { minimum, maximum } = schema;
    if (minimum !== undefined && maximum !== undefined) return `must be an integer from ${minimum} to ${maximum}`;
    return minimum === undefined ? 'must be an integer' : `must be an integer of at least ${minimum}`;
  }
  return `must be ${schema.description ?? 'a non-empty text'}`;
}

/** A connection URL as it may be shown: its password replaced by `***`. */
export function redactedUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@]*):[^@/]*@/i, '$1:***@');
}

/** A secret generated on first use and kept in DATA_DIR, so the embedded default needs no setup. */
export function readOrCreateSecret(dataDir: string, name: string): string {
  const path = join(dataDir, 'secrets', name);
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  // DATA_DIR and the folders to it with the usual mode (the embedded PostgreSQL's OS user may need
  // to enter them, src/db/embedded.ts), the secrets' folder private.
  mkdirSync(dataDir, { recursive: true });
  mkdirSync(join(dataDir, 'secrets'), { recursive: true, mode: 0o700 });
  const secret = randomBytes(32).toString('hex');
  writeFileSync(path, `${secret}\n`, { mode: 0o600 });
  return secret;
}
