import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import Type, { type Static } from 'typebox';
import Value from 'typebox/value';
import { DEFAULT_ZULIP_VERSION } from './zulip.js';

// One schema for the whole environment, and the one home of each variable's description
// (docs/configuration.md is generated from it: npm run config:doc). Every variable is optional here;
// the rules that depend on each other (secrets required with DATABASE_URL) are applied in loadConfig.
export const EnvSchema = Type.Object({
  DATABASE_URL: Type.Optional(
    Type.String({
      pattern: '^postgres(ql)?://',
      accepts: 'a postgres:// or postgresql:// URL',
      description:
        'PostgreSQL (15 or later) connection URL (`postgres://` or `postgresql://`); migrations are applied at start. Unset: an embedded PostgreSQL in `DATA_DIR`, ' +
        'with a demo organization created on its first start.',
    }),
  ),
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 9991, description: 'The port the API listens on.' }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1', description: 'The address the API listens on; `0.0.0.0` in a container.' }),
  DATA_DIR: Type.String({
    minLength: 1,
    default: './data',
    description: "The embedded PostgreSQL's files and the secrets generated for it (`DATA_DIR/secrets/`).",
  }),
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
    {
      default: 'info',
      description:
        'The least severe level logged. Logs are JSON lines on stdout, written in blocks of at least 4 KB and at least once a ' +
        'second, and flushed on shutdown and after a fatal error.',
    },
  ),
  EXTERNAL_HOST: Type.Optional(
    Type.String({
      pattern: '^[A-Za-z0-9.-]+(:[0-9]+)?$',
      accepts: 'a host name with an optional :port, such as chat.example.com',
      description:
        'Host name (with an optional `:port`) of the root organization; `<subdomain>.EXTERNAL_HOST` names the other ' +
        'organizations (docs/api.md §1.4). Unset: `localhost:<PORT>` with the embedded PostgreSQL (where it listens, ' +
        'so `<subdomain>.localhost:<PORT>` reaches an organization), else `localhost:9991`.',
    }),
  ),
  EXTERNAL_URI_SCHEME: Type.Optional(
    Type.Union([Type.Literal('https://'), Type.Literal('http://')], {
      description:
        "The scheme of `realm_url` and of the OpenAPI document's server. Unset: `http://` with the embedded PostgreSQL " +
        'and no `EXTERNAL_HOST`, else `https://`.',
    }),
  ),
  ROOT_SUBDOMAIN_ALIASES: Type.String({ default: 'www', description: 'Comma-separated subdomains that mean the root organization.' }),
  FAKE_EMAIL_DOMAIN: Type.Optional(
    Type.String({
      pattern: '^[A-Za-z0-9.-]+$',
      accepts: 'a domain name, such as example.com',
      description:
        'Domain of the dummy addresses shown when the organization host cannot serve as one (docs/api.md §2.3). ' +
        'Unset: `EXTERNAL_HOST` without its port.',
    }),
  ),
  ENABLE_GRAVATAR: Type.Boolean({ default: true, description: 'Gravatar avatar URLs (docs/api.md §2.5).' }),
  DEFAULT_AVATAR_URI: Type.String({
    minLength: 1,
    default: '/static/images/default-avatar.png',
    description: 'The avatar URL of users without an uploaded avatar when Gravatar is off.',
  }),
  AVATAR_SALT: Type.Optional(
    Type.String({
      minLength: 1,
      description:
        'Secret salt of uploaded-avatar paths. Required with `DATABASE_URL`; for the embedded database it is generated once ' +
        'into `DATA_DIR/secrets/`.',
    }),
  ),
  ZULIP_VERSION: Type.String({
    minLength: 1,
    default: DEFAULT_ZULIP_VERSION,
    description: 'The `zulip_version` and `zulip_merge_base` reported to clients (the feature level is fixed by the code).',
  }),
  RATE_LIMITING: Type.Boolean({
    default: true,
    description:
      'The per-user rate limit (docs/api.md §1.10): at most `RATE_LIMIT_MAX_REQUESTS` accepted requests in any ' +
      '`RATE_LIMIT_WINDOW_SECONDS`, shared by all instances through PostgreSQL. Over it: 429 `RATE_LIMIT_HIT` with a ' +
      'fractional `retry-after`; `X-RateLimit-*` headers on every authenticated answer; `server_settings` is exempt. ' +
      'The log is an unlogged table: a PostgreSQL crash or failover starts every user on a fresh window.',
  }),
  RATE_LIMIT_WINDOW_SECONDS: Type.Integer({ minimum: 1, default: 60, description: "The rate limit's window." }),
  RATE_LIMIT_MAX_REQUESTS: Type.Integer({ minimum: 1, default: 200, description: 'Requests a user may make in one window.' }),
  BODY_LIMIT_BYTES: Type.Integer({
    minimum: 1024,
    default: 1048576,
    description:
      'Larger request bodies get 413, chunked ones and multipart ones of small parts too. 10,000 `subscription_data` entries ' +
      'of any shape fit as multipart; urlencoded escaping adds about 40 % (docs/limits.md).',
  }),
  REQUEST_BODY_MEMORY_BYTES: Type.Integer({
    minimum: 1024,
    default: 16777216,
    description:
      "Bytes of authenticated requests' bodies (POST, PATCH, DELETE) one instance serves at once, from authentication to " +
      'the answer, by their declared lengths. Beyond it: 503 `SERVER_NOT_READY` with `Retry-After`. At least ' +
      '`BODY_LIMIT_BYTES`. Unauthenticated requests never count.',
  }),
  USER_REQUEST_BODY_BYTES: Type.Integer({
    minimum: 1024,
    default: 2097152,
    description:
      "Bytes of one user's requests with a body held at once on one instance. Beyond it: 429 `RATE_LIMIT_HIT` with " +
      "`retry-after` 1, which the official clients wait out and retry. A user's first body is always admitted.",
  }),
  USER_REQUEST_BODIES: Type.Integer({
    minimum: 1,
    default: 32,
    description: 'Requests with a body of one user held at once on one instance; beyond it, the same 429.',
  }),
  RETRY_AFTER_SECONDS: Type.Integer({
    minimum: 1,
    default: 5,
    description: 'The `Retry-After` of 503 answers while the database is unreachable.',
  }),
  HEARTBEAT_SECONDS: Type.Integer({
    minimum: 1,
    default: 45,
    description:
      'An idle long poll gets a heartbeat event after this plus a random jitter (whole 0.25 s steps), answered together ' +
      'with the others due in the same 0.25 s.',
  }),
  HEARTBEAT_JITTER_SECONDS: Type.Integer({ minimum: 0, default: 10, description: "The heartbeat's random jitter, at most." }),
  EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: Type.Integer({
    minimum: 1,
    default: 90,
    description: 'Reported by register to clients; must exceed `HEARTBEAT_SECONDS` + `HEARTBEAT_JITTER_SECONDS`.',
  }),
  QUEUE_DEFAULT_LIFESPAN_SECONDS: Type.Integer({
    minimum: 1,
    default: 600,
    description: "An event queue's idle lifetime when register does not ask for one (docs/api.md §3.12).",
  }),
  QUEUE_MAX_LIFESPAN_SECONDS: Type.Integer({ minimum: 1, default: 604800, description: 'The longest idle lifetime register grants.' }),
  QUEUE_SWEEP_INTERVAL_SECONDS: Type.Integer({
    minimum: 1,
    default: 60,
    description: 'How often each instance deletes the queues idle past their lifespan and the audit rows past their retention.',
  }),
  POLL_RECHECK_SECONDS: Type.Integer({
    minimum: 1,
    maximum: 20,
    default: 5,
    description:
      'How often each instance checks all its waiting long polls in one statement: it wakes those a missed notification ' +
      'concerned and renews the leases about to run out (docs/api.md §2.10 asks for at least every 5 s). At most 20, so ' +
      'that a 60 s poll lease, renewed once less than 35 s are left, never runs out between two checks.',
  }),
  QUEUE_MAX_PER_USER: Type.Integer({
    minimum: 1,
    default: 20,
    description:
      "Live event queues per user; a register beyond it first deletes the user's least recently used queue (by last poll " +
      'or creation), whose waiting poll, if any, answers `BAD_EVENT_QUEUE_ID`.',
  }),
  QUEUE_MAX_PENDING_EVENTS: Type.Integer({
    minimum: 1,
    default: 10_000,
    description:
      'Events a queue may hold until its client acknowledges them. A write that would leave more deletes the queue ' +
      "instead; its client's next poll answers `BAD_EVENT_QUEUE_ID` and Zulip's clients register again. 10,000: one bulk " +
      'update of the most entries a request may carry.',
  }),
  AUDIT_LOG_RETENTION_DAYS: Type.Integer({
    minimum: 1,
    default: 365,
    description: 'Subscription audit rows older than this are deleted by the sweep, in batches of 5,000.',
  }),
  TRUST_PROXY: Type.Boolean({
    default: false,
    description: 'Trust `X-Forwarded-*` from the balancer: the organization is named by `X-Forwarded-Host`.',
  }),
  HEAP_GROWING_PERCENT: Type.Integer({
    minimum: 0,
    maximum: 300,
    default: 40,
    description:
      "How far V8 lets the heap grow past what its last full collection kept, in percent (0: V8's own choice). V8's own " +
      'let an instance holding 10,000 long polls grow its old generation to 1.8–2.6 times what lives in it; 40 keeps it ' +
      'near 1.4 times at no measurable CPU cost (bench/RESULTS.md). Lower it for tighter containers.',
  }),
  DB_POOL_MAX: Type.Integer({ minimum: 1, default: 20, description: 'Size of the PostgreSQL connection pool.' }),
  DB_READ_CONNECTIONS: Type.Integer({
    minimum: 1,
    maximum: 64,
    default: 2,
    description:
      "Pipelined connections for short single statements: authentication with its rate-limit upsert, `GET /users/{id}`'s " +
      'lookup, the cancel of a pooled transaction whose client left (src/db/pipelined-connections.ts).',
  }),
  DB_WRITE_CONNECTIONS: Type.Integer({
    minimum: 1,
    maximum: 64,
    default: 2,
    description:
      'Pipelined connections for the small write transactions (settings updates of up to 100 changes, navigation views), ' +
      'those of one turn of the event loop committed together (src/db/transactions.ts).',
  }),
  DB_CONNECT_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    default: 2000,
    description: 'How long a request waits for a database connection before answering 503.',
  }),
  DB_STATEMENT_TIMEOUT_MS: Type.Integer({
    minimum: 0,
    default: 5000,
    description:
      "PostgreSQL's `statement_timeout` on the pooled connections (0: none); a statement cut off by it answers 503 " +
      '`SERVER_NOT_READY`. Migrations run without it.',
  }),
  DB_READ_STATEMENT_TIMEOUT_MS: Type.Integer({
    minimum: 0,
    default: 1000,
    description: '`statement_timeout` of the `DB_READ_CONNECTIONS` connections (0: none).',
  }),
  REQUEST_TIMEOUT_SECONDS: Type.Integer({
    minimum: 1,
    default: 60,
    description:
      "How long a client has to send a whole request (headers and body), a large body's wait for its turn included (docs/limits.md); " +
      'then 408 and the connection closes. It does not limit the time to answer (long polls).',
  }),
  BODY_TIMEOUT_SECONDS: Type.Integer({
    minimum: 1,
    default: 10,
    description:
      'How long a body of 64 KiB or more (or chunked) may take to arrive whole, from its turn to be read (docs/limits.md); then 408 and ' +
      'the connection closes. Bodies are read before the credentials are checked (docs/api.md §1.1).',
  }),
  CONNECTION_TIMEOUT_SECONDS: Type.Integer({
    minimum: 1,
    default: 120,
    description:
      'A connection silent this long in both directions is closed. Must exceed `EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS`: a ' +
      'long poll is silent until its answer.',
  }),
  KEEP_ALIVE_TIMEOUT_SECONDS: Type.Integer({
    minimum: 1,
    default: 72,
    description: "How long an idle keep-alive connection stays open between requests; keep it above the balancer's idle timeout.",
  }),
  SHUTDOWN_DRAIN_SECONDS: Type.Integer({
    minimum: 0,
    maximum: 3600,
    default: 5,
    description:
      'On SIGTERM, how long `/ready` answers 503 while every other request is still served, before the server closes: at ' +
      "least the balancer's check interval times the failures that mark a replica down, plus a margin (the shipped " +
      'deploy/haproxy.cfg takes a replica out within 3 s). 0 closes at once.',
  }),
  METRICS_PORT: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: 65535,
      description:
        'The Prometheus metrics listener (`GET /metrics`), a port the balancer never forwards. Unset: no metrics are ' +
        'collected at all. The image and the compose stack set 9464.',
    }),
  ),
  METRICS_HOST: Type.String({
    minLength: 1,
    default: '127.0.0.1',
    description: 'The address of the metrics listener (the image sets `0.0.0.0`).',
  }),
  COMPRESSION_THRESHOLD_BYTES: Type.Integer({
    minimum: 0,
    default: 4096,
    description: 'JSON answers of at least this many bytes are gzip-compressed for clients that accept it.',
  }),
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
    if (env.DATABASE_URL !== undefined) throw new ConfigError('AVATAR_SALT is required when DATABASE_URL is set');
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
  const derived: Derived & Pick<Config, 'dataDir'> = {
    databaseUrl: env.DATABASE_URL,
    dataDir,
    externalHost,
    externalUriScheme: env.EXTERNAL_URI_SCHEME ?? (local ? 'http://' : 'https://'),
    rootSubdomainAliases: env.ROOT_SUBDOMAIN_ALIASES.split(',')
      .map((alias) => alias.trim().toLowerCase())
      .filter((alias) => alias !== ''),
    fakeEmailDomain: (env.FAKE_EMAIL_DOMAIN ?? externalHost.replace(/:\d+$/, '')).toLowerCase(),
    avatarSalt,
  };
  const parsed = Object.keys(EnvSchema.properties).map((name) => [camelCase(name), env[name as keyof Env]]);
  return { ...(Object.fromEntries(parsed) as Config), ...derived };
}

/** The runtime side of CamelCase. */
const camelCase = (name: string): string => name.toLowerCase().replace(/_([a-z])/g, (_, letter: string) => letter.toUpperCase());

/** What a variable accepts, in words (TypeBox's own messages, "must be equal to constant", name no values). */
function accepted(schema: { type?: unknown; anyOf?: unknown; accepts?: string; minimum?: number; maximum?: number }): string {
  if (Array.isArray(schema.anyOf)) return `must be one of ${schema.anyOf.map((choice: { const: string }) => choice.const).join(', ')}`;
  if (schema.type === 'boolean') return 'must be one of true, false, 1, 0';
  if (schema.type === 'integer') {
    const { minimum, maximum } = schema;
    if (minimum !== undefined && maximum !== undefined) return `must be an integer from ${minimum} to ${maximum}`;
    return minimum === undefined ? 'must be an integer' : `must be an integer of at least ${minimum}`;
  }
  return `must be ${schema.accepts ?? 'a non-empty text'}`;
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
