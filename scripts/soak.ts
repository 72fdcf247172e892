/**
 * `npm run soak`: drives every endpoint concurrently for a bounded time against a real server
 * process on an embedded PostgreSQL (127.0.0.1 only), then checks the database against the
 * requests the server accepted:
 *
 * - no 5xx, and every answer is the one the client's own model predicts (each simulated user's
 *   requests are issued in order by one virtual client, and nobody else touches that user's data);
 * - per user and channel, the last accepted value of every setting is the stored one;
 * - every accepted navigation-view add/update/remove is reflected, in creation order;
 * - the audit log has exactly one row per accepted setting change, in order, old → new;
 * - each user's queues hold exactly the events of that user's accepted requests, complete, in
 *   order, with consecutive ids: an untouched queue (read from the database at the end), a queue
 *   long-polled throughout (heartbeats aside), and a queue registered for navigation_view only.
 *
 * With SOAK_CHAOS=1 the database misbehaves under the load: every ~0.6 s the server's connections
 * are terminated (pg_terminate_backend), and once PostgreSQL is stopped and started again. Then a
 * 503 is an acceptable answer anywhere, and so is a 504 for a write whose connection was lost
 * during its commit (a 504 may or may not have been applied: the client finds out from the
 * database, through the user's never-polled queue, before it goes on; a 503 must not have been),
 * any other 5xx or a lost connection is still a violation, the server must still be running at the
 * end, `/ready` must recover, and the database must still match the accepted requests exactly.
 *
 * Environment: SOAK_SECONDS (30), SOAK_USERS (6, plus one user of a second organization),
 * SOAK_CHAOS (unset). Prints a short report; exits 1 on any violation. Every loop is bounded by count and time, and
 * every process started here is stopped on the way out (Ctrl-C included).
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';
import pg from 'pg';
import * as ops from '../src/cli/operations.js';
import type { DatabaseHandle } from '../src/db/database.js';
import type { EmbeddedDatabase } from '../src/db/embedded.js';
import { freePort } from '../src/lib/free-port.js';
import { LISTENER_APPLICATION_NAME } from '../src/modules/events/event-listener.js';
import { onCleanup, type RunningProcess, runCleanups, startServer } from './lib/processes.js';
import { startScratchDatabase } from './lib/scratch-database.js';

const SOAK_SECONDS = positiveInteger('SOAK_SECONDS', 30);
const CHAOS = process.env.SOAK_CHAOS === '1';
/** application_name of the server's pooled and pipelined connections (the chaos loop's targets). */
const SERVER_APPLICATION_NAME = 'soak-server';
const USER_COUNT = positiveInteger('SOAK_USERS', 6);
const EXTERNAL_HOST = 'soak.test';
/** Hard limits besides the clock: requests per virtual client, and the whole run. */
const MAX_REQUESTS_PER_CLIENT = 200_000;
const WATCHDOG_MS = (SOAK_SECONDS + 240) * 1000;
const REQUEST_TIMEOUT_MS = 30_000;

function positiveInteger(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return value;
}

const log = (line: string) => console.log(`[soak] ${line}`);

// --- The server (everything started is stopped by runCleanups, in reverse order). ---

async function startSoakServer(databaseUrl: string): Promise<RunningProcess> {
  return startServer({
    name: 'the server',
    args: ['--import', 'tsx', 'src/server.ts'],
    env: {
      DATABASE_URL: databaseUrl,
      HOST: '127.0.0.1',
      EXTERNAL_HOST,
      AVATAR_SALT: 'soak',
      // The production path (every request also records its rate-limit decision), with a rule
      // no client reaches.
      RATE_LIMITING: 'true',
      RATE_LIMIT_MAX_REQUESTS: '1000000',
      LOG_LEVEL: 'warn',
      PGAPPNAME: SERVER_APPLICATION_NAME,
      // The untouched queue is never polled and must keep every event of the run.
      QUEUE_MAX_PENDING_EVENTS: '1000000000',
      // Long polls answer with a heartbeat within 3 s, so the pollers stop promptly at the end.
      HEARTBEAT_SECONDS: '2',
      HEARTBEAT_JITTER_SECONDS: '1',
      EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '10',
    },
    port: await freePort(),
    readyPath: '/ready',
    readyTimeoutMs: 90_000,
  });
}

// --- HTTP: keep-alive connections to 127.0.0.1 with an explicit Host header. ---

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
onCleanup(async () => agent.destroy());

interface Call {
  method: string;
  path: string;
  port: number;
  host?: string;
  authorization?: string;
  form?: Record<string, string>;
  timeoutMs?: number;
}

interface Answer {
  status: number;
  body: string;
  /** The parsed body; undefined when it is not JSON. */
  json: Record<string, unknown> | undefined;
}

function call(request: Call): Promise<Answer> {
  const body = request.form ? new URLSearchParams(request.form).toString() : '';
  return new Promise((resolve, reject) => {
    const outgoing = http.request(
      {
        host: '127.0.0.1',
        port: request.port,
        method: request.method,
        path: request.path,
        agent,
        headers: {
          host: request.host ?? EXTERNAL_HOST,
          ...(request.authorization && { authorization: request.authorization }),
          ...(request.form && { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(Buffer.byteLength(body)) }),
        },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => {
          let json: Record<string, unknown> | undefined;
          try {
            json = JSON.parse(text) as Record<string, unknown>;
          } catch {
            json = undefined;
          }
          resolve({ status: response.statusCode ?? 0, body: text, json });
        });
        response.on('error', reject);
      },
    );
    outgoing.setTimeout(request.timeoutMs ?? REQUEST_TIMEOUT_MS, () => {
      outgoing.destroy(new Error(`${request.method} ${request.path} timed out`));
    });
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}

// --- The seed: two organizations, channels of every kind, users subscribed to some of them. ---

const COLUMNS = [
  'color',
  'is_muted',
  'pin_to_top',
  'desktop_notifications',
  'audible_notifications',
  'push_notifications',
  'email_notifications',
  'wildcard_mentions_notify',
] as const;
type Column = (typeof COLUMNS)[number];
type Settings = Record<Column, string | boolean | null>;
const BOOLEAN_PROPERTIES = [
  'is_muted',
  'in_home_view',
  'pin_to_top',
  'desktop_notifications',
  'audible_notifications',
  'push_notifications',
  'email_notifications',
  'wildcard_mentions_notify',
];
const BUILT_INS = [
  'inbox',
  'recent',
  'feed',
  'drafts',
  'narrow/has/reaction/sender/me',
  'narrow/is/mentioned',
  'narrow/is/starred',
  'scheduled',
  'reminders',
];

interface View {
  fragment: string;
  is_pinned: boolean;
  name: string | null;
}

interface ApiEvent {
  type: string;
  [key: string]: unknown;
}

interface AuditRow {
  stream_id: number;
  property: Column;
  old_value: string | boolean | null;
  new_value: string | boolean;
}

/** One simulated user: credentials, and the model of everything only this user changes. */
interface SimUser {
  label: string;
  id: number;
  email: string;
  authorization: string;
  host: string;
  /** Channels with an active subscription, by id, and their names (for list order). */
  streams: Map<number, string>;
  /** Channel ids this user may not change: unsubscribed, private, archived, unknown, foreign. */
  refusedStreams: number[];
  settings: Map<number, Settings>;
  /** The user's views in creation order. */
  views: View[];
  events: ApiEvent[];
  audit: AuditRow[];
  queues: { untouched: string; polled: string; viewsOnly: string };
  /** Events the long-poller received, in order. */
  polled: ApiEvent[];
  nextViewNumber: number;
}

async function seed(handle: DatabaseHandle): Promise<{ users: SimUser[]; realmUserIds: number[] }> {
  const { db } = handle;
  const writes = { db, transactions: handle.transactions, maxPendingEvents: 10_000 };
  await ops.createRealm(db, { subdomain: '', name: 'Soak', description: 'Soak **test**' });
  await ops.createRealm(db, { subdomain: 'other', name: 'Other' });
  const channels: Record<string, number> = {};
  for (const [name, options] of [
    ['general', {}],
    ['random', {}],
    ['design', {}],
    ['ops', {}],
    ['unjoined', {}],
    ['secret', { private: true }],
    ['old', {}],
    ['web', { webPublic: true }],
  ] as const) {
    channels[name] = (await ops.createStream(db, { realm: '', name, ...options })).stream_id;
  }
  const foreignChannel = (await ops.createStream(db, { realm: 'other', name: 'elsewhere' })).stream_id;
  const accounts: { realm: string; label: string; account: { user_id: number; email: string; api_key: string }; streams: string[] }[] = [];
  for (let i = 0; i < USER_COUNT; i++) {
    const account = await ops.createUser(db, {
      realm: '',
      email: `user${i}@soak.example`,
      fullName: `Soak User ${i}`,
      role: i === 0 ? 'owner' : 'member',
    });
    const streams = ['general', 'random', 'design', 'ops', 'old', ...(i % 2 === 0 ? ['secret'] : []), ...(i % 3 === 0 ? ['web'] : [])];
    accounts.push({ realm: '', label: `user${i}`, account, streams });
  }
  const outsider = await ops.createUser(db, { realm: 'other', email: 'outsider@soak.example', fullName: 'Other Org User' });
  accounts.push({ realm: 'other', label: 'outsider', account: outsider, streams: ['elsewhere'] });
  for (const { realm, account, streams } of accounts) {
    for (const stream of streams) await ops.subscribe(writes, { realm, email: account.email, stream });
  }
  await ops.archiveStream(db, '', 'old');
  const users: SimUser[] = [];
  for (const { realm, label, account, streams } of accounts) {
    const rows = await db.selectFrom('subscriptions').selectAll().where('user_id', '=', account.user_id).execute();
    const active = streams.filter((stream) => stream !== 'old');
    const ids = (names: string[]) => names.map((name) => (name === 'elsewhere' ? foreignChannel : channels[name]!));
    users.push({
      label,
      id: account.user_id,
      email: account.email,
      authorization: `Basic ${Buffer.from(`${account.email}:${account.api_key}`).toString('base64')}`,
      host: realm === '' ? EXTERNAL_HOST : `${realm}.${EXTERNAL_HOST}`,
      streams: new Map(active.map((name) => [name === 'elsewhere' ? foreignChannel : channels[name]!, name])),
      refusedStreams: [
        ...ids(['unjoined', 'secret', 'old', 'web', 'general', 'elsewhere'].filter((name) => !active.includes(name))),
        999_999,
        0,
      ],
      settings: new Map(rows.map((row) => [row.stream_id, Object.fromEntries(COLUMNS.map((column) => [column, row[column]])) as Settings])),
      views: [],
      events: [],
      audit: [],
      queues: { untouched: '', polled: '', viewsOnly: '' },
      polled: [],
      nextViewNumber: 0,
    });
  }
  const realmUserIds = accounts.filter((entry) => entry.realm === '').map((entry) => entry.account.user_id);
  return { users, realmUserIds };
}

// --- Statistics and violations. ---

const statusCounts = new Map<string, number>();
const operationCounts = new Map<string, number>();
const violations: string[] = [];
let requestCount = 0;
/** Set on Ctrl-C: the clients stop, and failures caused by the teardown are not reported. */
let interrupted = false;

function violation(text: string): void {
  if (interrupted) return;
  violations.push(text);
  if (violations.length <= 20) log(`VIOLATION ${text}`);
}

function count(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

/** Sends one request of a virtual client; a 5xx or a transport failure is a violation. */
async function send(port: number, user: SimUser | undefined, operation: string, request: Omit<Call, 'port'>): Promise<Answer | undefined> {
  requestCount++;
  count(operationCounts, operation);
  try {
    const answer = await call({ port, host: user?.host, authorization: user?.authorization, ...request });
    count(statusCounts, String(answer.status));
    if (answer.status >= 500 && !(CHAOS && (answer.status === 503 || answer.status === 504))) {
      violation(`${user?.label ?? '-'} ${operation}: ${request.method} ${request.path} → ${answer.status} ${answer.body.slice(0, 200)}`);
    }
    return answer;
  } catch (error) {
    count(statusCounts, 'transport error');
    violation(`${user?.label ?? '-'} ${operation}: ${request.method} ${request.path} failed: ${String(error)}`);
    return undefined;
  }
}

/**
 * A 503 or 504 while the chaos loop breaks the database: the request did not take effect (503), or
 * may or may not have (504: the connection was lost during its commit).
 */
const unavailable = (answer: Answer | undefined): boolean => CHAOS && (answer?.status === 503 || answer?.status === 504);

/** Checks the status the model predicts; returns whether the server accepted (200). */
function expectStatus(user: SimUser, operation: string, answer: Answer | undefined, expected: number, detail: string): boolean {
  if (!answer || unavailable(answer)) return false;
  if (answer.status !== expected) {
    violation(`${user.label} ${operation}: expected ${expected}, got ${answer.status} ${answer.body.slice(0, 200)} (${detail})`);
  }
  return answer.status === 200 && expected === 200;
}

let checker: DatabaseHandle['db'] | undefined;

/**
 * Whether a write answered 503 or 504 was applied, from the database: every accepted write appends its
 * events to the user's never-polled queue, so its event count tells. Retries while the database is
 * down (it is being restarted).
 */
async function appliedDespiteFailure(user: SimUser, operation: string, newEvents: number, status: number): Promise<boolean> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && !interrupted) {
    try {
      const { count: stored } = await checker!
        .selectFrom('events')
        .select((eb) => eb.fn.countAll<string>().as('count'))
        .where('queue_id', '=', user.queues.untouched)
        .executeTakeFirstOrThrow();
      const events = Number(stored);
      count(operationCounts, `${status} resolved as ${events === user.events.length ? 'not applied' : 'applied'}`);
      if (events === user.events.length + newEvents) {
        if (status === 503) violation(`${user.label} ${operation} answered 503, which promises nothing was applied, and was applied`);
        return true;
      }
      if (events !== user.events.length)
        violation(
          `${user.label} ${operation} answered ${status}: ${events} events stored, model has ${user.events.length} (+${newEvents})`,
        );
      return false;
    } catch {
      await sleep(250);
    }
  }
  violation(`${user.label} ${operation} answered ${status} and the database did not come back to tell whether it was applied`);
  return false;
}

/** An accepted write (200), or one answered 503/504 that the database shows was applied. */
async function writeApplied(
  user: SimUser,
  operation: string,
  answer: Answer | undefined,
  expected: number,
  detail: string,
  newEvents: number,
): Promise<boolean> {
  if (unavailable(answer)) return expected === 200 && appliedDespiteFailure(user, operation, newEvents, answer!.status);
  return expectStatus(user, operation, answer, expected, detail);
}

// --- Random choices (Math.random: the run is a soak, not a reproducible test). ---

const randomInt = (n: number) => Math.floor(Math.random() * n);
const pickOne = <T>(items: readonly T[]): T => items[randomInt(items.length)]!;
const coin = (p = 0.5) => Math.random() < p;
const randomColor = () => `#${Array.from({ length: pickOne([3, 6]) }, () => pickOne([...'0123456789abcdefABCDEF'])).join('')}`;

// --- Settings: the change model of spec §2.8 and §3.2. ---

interface Entry {
  stream_id: number;
  property: string;
  value: string | boolean;
}

function randomEntry(user: SimUser): Entry {
  const streamId = pickOne([...user.streams.keys()]);
  return coin(0.25)
    ? { stream_id: streamId, property: 'color', value: randomColor() }
    : { stream_id: streamId, property: pickOne(BOOLEAN_PROPERTIES), value: coin() };
}

/** How many events an accepted entry appends (spec §3.2 event table). */
const eventsOf = (entry: Entry): number => (entry.property === 'is_muted' || entry.property === 'in_home_view' ? 2 : 1);

/** Applies an accepted entry to the model: settings, audit row, events (spec §3.2 event table). */
function applyEntry(user: SimUser, entry: Entry): void {
  const settings = user.settings.get(entry.stream_id)!;
  const column = (entry.property === 'in_home_view' ? 'is_muted' : entry.property) as Column;
  const stored = entry.property === 'in_home_view' ? !entry.value : entry.value;
  user.audit.push({ stream_id: entry.stream_id, property: column, old_value: settings[column], new_value: stored });
  settings[column] = stored;
  const event = (property: string, value: string | boolean): ApiEvent => ({
    type: 'subscription',
    op: 'update',
    property,
    value,
    stream_id: entry.stream_id,
  });
  if (entry.property === 'is_muted') user.events.push(event('in_home_view', !entry.value), event('is_muted', entry.value));
  else if (entry.property === 'in_home_view') user.events.push(event('in_home_view', entry.value), event('is_muted', !entry.value));
  else user.events.push(event(entry.property, entry.value));
}

/** An entry that must be refused, with the reason for the report. */
function refusedEntry(user: SimUser): Entry {
  switch (randomInt(4)) {
    case 0:
      return { stream_id: pickOne(user.refusedStreams), property: 'pin_to_top', value: true };
    case 1:
      return { stream_id: pickOne([...user.streams.keys()]), property: 'color', value: pickOne(['red', '#12345g', '#1234567', '#fff\n']) };
    case 2:
      return { stream_id: pickOne([...user.streams.keys()]), property: 'is_muted', value: pickOne(['true', 'yes']) };
    default:
      return { stream_id: pickOne([...user.streams.keys()]), property: pickOne(['muted', "' OR 1=1 --", 'color%']), value: true };
  }
}

async function bulkUpdate(port: number, user: SimUser): Promise<void> {
  const entries = Array.from({ length: 1 + randomInt(4) }, () => randomEntry(user));
  const refused = coin(0.2);
  if (refused) entries.splice(randomInt(entries.length + 1), 0, refusedEntry(user));
  const answer = await send(port, user, 'bulk update', {
    method: 'POST',
    path: '/api/v1/users/me/subscriptions/properties',
    form: { subscription_data: JSON.stringify(entries) },
  });
  const newEvents = entries.reduce((sum, entry) => sum + eventsOf(entry), 0);
  if (await writeApplied(user, 'bulk update', answer, refused ? 400 : 200, JSON.stringify(entries), newEvents)) {
    for (const entry of entries) applyEntry(user, entry);
  }
}

async function singleUpdate(port: number, user: SimUser): Promise<void> {
  const refused = coin(0.15);
  const entry = refused ? refusedEntry(user) : randomEntry(user);
  const answer = await send(port, user, 'single update', {
    method: pickOne(['PATCH', 'POST']),
    path: `/api/v1/users/me/subscriptions/${entry.stream_id}`,
    form: { property: entry.property, value: typeof entry.value === 'string' ? entry.value : String(entry.value) },
  });
  // A string value "true"/"yes" for is_muted is sent as the raw text: "true" is then the boolean true.
  const accepted = !refused || (entry.property === 'is_muted' && entry.value === 'true');
  if (refused && accepted) entry.value = true;
  if (await writeApplied(user, 'single update', answer, accepted ? 200 : 400, JSON.stringify(entry), eventsOf(entry)))
    applyEntry(user, entry);
}

// --- Navigation views: the rules of spec §3.9–§3.11. ---

async function addView(port: number, user: SimUser): Promise<void> {
  let fragment: string;
  let name: string | undefined;
  switch (randomInt(5)) {
    case 0:
      fragment = pickOne(BUILT_INS);
      break;
    case 1:
      fragment = pickOne(BUILT_INS);
      name = 'Named built-in';
      break;
    case 2:
      fragment = user.views.length > 0 ? pickOne(user.views).fragment : 'narrow/none';
      name = `Copy ${user.nextViewNumber++}`;
      break;
    case 3:
      fragment = `narrow/soak/${user.label}/${user.nextViewNumber++}`;
      name = user.views.find((view) => view.name)?.name ?? `Same ${user.nextViewNumber}`;
      break;
    default:
      fragment = `narrow/soak/${user.label}/${user.nextViewNumber}`;
      name = `View ${user.nextViewNumber++} '%_`;
      break;
  }
  const isPinned = coin();
  const builtIn = BUILT_INS.includes(fragment);
  const clash = user.views.some((view) => view.fragment === fragment || (name !== undefined && view.name === name));
  const accepted = !(builtIn && name !== undefined) && !(!builtIn && name === undefined) && !clash;
  const answer = await send(port, user, 'add view', {
    method: 'POST',
    path: '/api/v1/navigation_views',
    // Surrounding spaces are trimmed by the server.
    form: { fragment: ` ${fragment} `, is_pinned: String(isPinned), ...(name !== undefined && { name: `${name}  ` }) },
  });
  if (await writeApplied(user, 'add view', answer, accepted ? 200 : 400, `${fragment} / ${name}`, 1)) {
    const view = { fragment, is_pinned: isPinned, name: name ?? null };
    user.views.push(view);
    user.events.push({ type: 'navigation_view', op: 'add', navigation_view: { ...view } });
  }
}

async function updateView(port: number, user: SimUser): Promise<void> {
  const target = user.views.length > 0 && coin(0.85) ? pickOne(user.views).fragment : `narrow/missing/${randomInt(1000)}`;
  const isPinned = coin(0.7) ? coin() : undefined;
  let name: string | undefined;
  if (coin(0.4)) name = coin(0.7) ? `Renamed ${user.nextViewNumber++}` : (user.views.find((view) => view.name)?.name ?? 'Unused');
  const existing = user.views.find((view) => view.fragment === target);
  const expected =
    BUILT_INS.includes(target) && name !== undefined
      ? 400
      : name !== undefined && user.views.some((view) => view.name === name)
        ? 400
        : existing === undefined
          ? 404
          : 200;
  const answer = await send(port, user, 'update view', {
    method: 'PATCH',
    path: `/api/v1/navigation_views/${coin() ? encodeURIComponent(target) : target}`,
    form: { ...(isPinned !== undefined && { is_pinned: String(isPinned) }), ...(name !== undefined && { name }) },
  });
  if (await writeApplied(user, 'update view', answer, expected, `${target} / ${name} / ${isPinned}`, 1)) {
    const data: Partial<View> = { ...(name !== undefined && { name }), ...(isPinned !== undefined && { is_pinned: isPinned }) };
    Object.assign(existing!, data);
    user.events.push({ type: 'navigation_view', op: 'update', fragment: target, data });
  }
}

async function removeView(port: number, user: SimUser): Promise<void> {
  const target = user.views.length > 0 && coin(0.85) ? pickOne(user.views).fragment : `narrow/missing/${randomInt(1000)}`;
  const index = user.views.findIndex((view) => view.fragment === target);
  const answer = await send(port, user, 'remove view', {
    method: 'DELETE',
    path: `/api/v1/navigation_views/${encodeURIComponent(target)}`,
  });
  if (await writeApplied(user, 'remove view', answer, index >= 0 ? 200 : 404, target, 1)) {
    user.views.splice(index, 1);
    user.events.push({ type: 'navigation_view', op: 'remove', fragment: target });
  }
}

// --- Reads, checked against the model (read-your-writes: only this user changes this data). ---

function modelSubscriptions(user: SimUser) {
  return [...user.streams]
    .sort((a, b) => (a[1] < b[1] ? -1 : 1))
    .map(([streamId]) => {
      const settings = user.settings.get(streamId)!;
      return { stream_id: streamId, ...settings, in_home_view: !settings.is_muted };
    });
}

function servedSubscriptions(list: unknown): unknown {
  return (list as Record<string, unknown>[]).map((sub) => ({
    stream_id: sub.stream_id,
    ...Object.fromEntries(COLUMNS.map((column) => [column, sub[column]])),
    in_home_view: sub.in_home_view,
  }));
}

async function readSubscriptions(port: number, user: SimUser): Promise<void> {
  const answer = await send(port, user, 'get subscriptions', { method: 'GET', path: '/api/v1/users/me/subscriptions' });
  if (!expectStatus(user, 'get subscriptions', answer, 200, '')) return;
  const served = servedSubscriptions(answer!.json!.subscriptions);
  const model = modelSubscriptions(user);
  if (!isDeepStrictEqual(served, model))
    violation(`${user.label} get subscriptions: ${JSON.stringify(served)} ≠ model ${JSON.stringify(model)}`);
}

async function readViews(port: number, user: SimUser): Promise<void> {
  const answer = await send(port, user, 'get views', { method: 'GET', path: '/api/v1/navigation_views' });
  if (!expectStatus(user, 'get views', answer, 200, '')) return;
  if (JSON.stringify(answer!.json!.navigation_views) !== JSON.stringify(user.views)) {
    violation(`${user.label} get views: ${JSON.stringify(answer!.json!.navigation_views)} ≠ model ${JSON.stringify(user.views)}`);
  }
}

/** A register's state matches the model; its queue is then deleted again. */
async function registerAndDelete(port: number, user: SimUser): Promise<void> {
  const answer = await send(port, user, 'register', {
    method: 'POST',
    path: '/api/v1/register',
    form: { fetch_event_types: '["subscription","navigation_views"]', client_capabilities: '{"notification_settings_null":true}' },
  });
  if (unavailable(answer)) return forgetOrphanQueues(user);
  if (!expectStatus(user, 'register', answer, 200, '')) return;
  const body = answer!.json!;
  const sameSubscriptions = isDeepStrictEqual(servedSubscriptions(body.subscriptions), modelSubscriptions(user));
  if (!sameSubscriptions || JSON.stringify(body.navigation_views) !== JSON.stringify(user.views)) {
    violation(`${user.label} register state differs from the model: ${answer!.body.slice(0, 300)}`);
  }
  const removed = await send(port, user, 'delete queue', {
    method: 'DELETE',
    path: '/api/v1/events',
    form: { queue_id: String(body.queue_id) },
  });
  if (unavailable(removed)) return forgetOrphanQueues(user);
  expectStatus(user, 'delete queue', removed, 200, '');
}

/**
 * A register or queue deletion answered 503 may have left a queue nobody knows: deleted here, so
 * that orphans never push the user's three soak queues out (QUEUE_MAX_PER_USER). Only this user's
 * client creates queues for the user, and it waits for this.
 */
async function forgetOrphanQueues(user: SimUser): Promise<void> {
  const known = Object.values(user.queues);
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && !interrupted) {
    try {
      await checker!.deleteFrom('event_queues').where('user_id', '=', user.id).where('id', 'not in', known).execute();
      return;
    } catch {
      await sleep(250);
    }
  }
}

async function readOthers(port: number, user: SimUser, realmUserIds: number[]): Promise<void> {
  const sameRealm = user.host === EXTERNAL_HOST;
  switch (randomInt(6)) {
    case 0: {
      const answer = await send(port, user, 'get users', { method: 'GET', path: '/api/v1/users' });
      if (expectStatus(user, 'get users', answer, 200, '')) {
        const ids = (answer!.json!.members as { user_id: number }[]).map((member) => member.user_id);
        const expected = sameRealm ? realmUserIds : [user.id];
        if (!isDeepStrictEqual(ids, expected)) violation(`${user.label} get users: ${JSON.stringify(ids)} ≠ ${JSON.stringify(expected)}`);
      }
      return;
    }
    case 1: {
      const target = pickOne(realmUserIds);
      const answer = await send(port, user, 'get user', { method: 'GET', path: `/api/v1/users/${target}` });
      expectStatus(user, 'get user', answer, sameRealm ? 200 : 400, String(target));
      return;
    }
    case 2: {
      const target = `user${randomInt(USER_COUNT)}@soak.example`;
      const answer = await send(port, user, 'get user by email', { method: 'GET', path: `/api/v1/users/${encodeURIComponent(target)}` });
      expectStatus(user, 'get user by email', answer, sameRealm ? 200 : 400, target);
      return;
    }
    case 3: {
      const answer = await send(port, undefined, 'server settings', { method: 'GET', path: '/api/v1/server_settings', host: user.host });
      if (answer?.status !== 200 && !unavailable(answer)) violation(`${user.label} server settings → ${answer?.status}`);
      return;
    }
    case 4: {
      const answer = await send(port, user, 'poll unknown queue', {
        method: 'GET',
        path: `/api/v1/events?queue_id=${randomUUID()}&last_event_id=-1&dont_block=true`,
      });
      expectStatus(user, 'poll unknown queue', answer, 400, '');
      return;
    }
    default: {
      const answer = await send(port, undefined, 'bad credentials', {
        method: 'GET',
        path: '/api/v1/users',
        host: user.host,
        authorization: `Basic ${Buffer.from(`${user.email}:${'x'.repeat(32)}`).toString('base64')}`,
      });
      if (answer?.status !== 401 && !unavailable(answer)) violation(`${user.label} bad credentials → ${answer?.status}`);
    }
  }
}

// --- The virtual clients. ---

const OPERATIONS: [number, (port: number, user: SimUser, realmUserIds: number[]) => Promise<void>][] = [
  [20, bulkUpdate],
  [10, singleUpdate],
  [8, addView],
  [7, updateView],
  [4, removeView],
  [4, readSubscriptions],
  [4, readViews],
  [2, registerAndDelete],
  [6, readOthers],
];
const TOTAL_WEIGHT = OPERATIONS.reduce((sum, [weight]) => sum + weight, 0);

function pickOperation() {
  let roll = Math.random() * TOTAL_WEIGHT;
  for (const [weight, operation] of OPERATIONS) {
    roll -= weight;
    if (roll < 0) return operation;
  }
  return OPERATIONS[0]![1];
}

async function runClient(port: number, user: SimUser, realmUserIds: number[], deadline: number): Promise<void> {
  for (let i = 0; i < MAX_REQUESTS_PER_CLIENT && Date.now() < deadline && violations.length < 200 && !interrupted; i++) {
    await pickOperation()(port, user, realmUserIds);
  }
}

/** Long-polls the user's polled queue until told to stop; ids must be consecutive. */
async function runPoller(port: number, user: SimUser, stop: () => boolean): Promise<number> {
  let last = -1;
  const until = Date.now() + WATCHDOG_MS;
  while (Date.now() < until && !interrupted) {
    const done = stop();
    const answer = await send(port, user, done ? 'final poll' : 'long poll', {
      method: 'GET',
      path: `/api/v1/events?queue_id=${user.queues.polled}&last_event_id=${last}${done ? '&dont_block=true' : ''}`,
      timeoutMs: 20_000,
    });
    if (unavailable(answer)) {
      await sleep(200); // the same poll again, as a client does after a 503
      continue;
    }
    if (!answer || answer.status !== 200) {
      violation(`${user.label} poll → ${answer?.status} ${answer?.body.slice(0, 200)}`);
      return last;
    }
    for (const event of answer.json!.events as ApiEvent[]) {
      if (event.id !== last + 1) violation(`${user.label} poll: event id ${String(event.id)} after ${last}`);
      last = Number(event.id);
      user.polled.push(event);
    }
    if (done) return last;
  }
  return last;
}

async function registerQueues(port: number, user: SimUser): Promise<void> {
  const register = async (form: Record<string, string>) => {
    const answer = await send(port, user, 'register', {
      method: 'POST',
      path: '/api/v1/register',
      form: { queue_lifespan_secs: '604800', fetch_event_types: '[]', ...form },
    });
    if (answer?.status !== 200) throw new Error(`${user.label} could not register: ${answer?.status} ${answer?.body}`);
    return String(answer.json!.queue_id);
  };
  user.queues = {
    untouched: await register({}),
    polled: await register({}),
    viewsOnly: await register({ event_types: '["navigation_view"]' }),
  };
}

// --- Final checks: the database against the model. ---

async function verify(db: DatabaseHandle['db'], users: SimUser[]): Promise<number> {
  let eventsChecked = 0;
  for (const user of users) {
    const subscriptions = await db.selectFrom('subscriptions').selectAll().where('user_id', '=', user.id).execute();
    for (const row of subscriptions) {
      const expected = user.settings.get(row.stream_id)!;
      const stored = Object.fromEntries(COLUMNS.map((column) => [column, row[column]]));
      if (!isDeepStrictEqual(stored, expected)) {
        violation(`${user.label} channel ${row.stream_id}: stored ${JSON.stringify(stored)} ≠ last accepted ${JSON.stringify(expected)}`);
      }
    }
    const views = await db
      .selectFrom('navigation_views')
      .select(['fragment', 'is_pinned', 'name'])
      .where('user_id', '=', user.id)
      .orderBy('id')
      .execute();
    if (JSON.stringify(views) !== JSON.stringify(user.views)) {
      violation(`${user.label} views: stored ${JSON.stringify(views)} ≠ ${JSON.stringify(user.views)}`);
    }
    const audit = await db
      .selectFrom('subscription_audit_log')
      .select(['stream_id', 'property', 'old_value', 'new_value'])
      .where('acting_user_id', '=', user.id)
      .orderBy('id')
      .execute();
    if (audit.length !== user.audit.length)
      violation(`${user.label} audit log: ${audit.length} rows for ${user.audit.length} accepted changes`);
    else if (!isDeepStrictEqual(audit, user.audit)) violation(`${user.label} audit log differs from the accepted changes in order`);

    const expectQueue = async (queueId: string, expected: ApiEvent[], what: string) => {
      const rows = await db.selectFrom('events').select(['id', 'payload']).where('queue_id', '=', queueId).orderBy('id').execute();
      const queue = await db.selectFrom('event_queues').select('next_event_id').where('id', '=', queueId).executeTakeFirst();
      eventsChecked += rows.length;
      if (rows.some((row, index) => row.id !== index) || queue?.next_event_id !== rows.length) {
        violation(
          `${user.label} ${what} queue: ids ${rows
            .map((row) => row.id)
            .join(',')
            .slice(0, 100)}, next ${queue?.next_event_id}`,
        );
      }
      const stored = rows.map((row) => JSON.stringify(row.payload));
      const wanted = expected.map((event) => JSON.stringify(event));
      if (stored.length !== wanted.length) violation(`${user.label} ${what} queue: ${stored.length} events for ${wanted.length} expected`);
      const firstDiff = stored.findIndex((text, index) => text !== wanted[index]);
      if (firstDiff >= 0)
        violation(`${user.label} ${what} queue: event ${firstDiff} is ${stored[firstDiff]}, expected ${wanted[firstDiff]}`);
    };
    await expectQueue(user.queues.untouched, user.events, 'untouched');
    await expectQueue(
      user.queues.viewsOnly,
      user.events.filter((event) => event.type === 'navigation_view'),
      'navigation_view-only',
    );

    const polled = user.polled.filter((event) => event.type !== 'heartbeat').map(({ id: _id, ...event }) => JSON.stringify(event));
    const wanted = user.events.map((event) => JSON.stringify(event));
    eventsChecked += polled.length;
    if (polled.length !== wanted.length || polled.some((text, index) => text !== wanted[index])) {
      violation(`${user.label} long-polled queue: ${polled.length} events received for ${wanted.length} expected, or out of order`);
    }
  }
  return eventsChecked;
}

// --- Chaos: the server's connections terminated again and again, PostgreSQL restarted once. ---

interface ChaosReport {
  terminations: number;
  backendsTerminated: number;
  restarts: number;
}

/**
 * Until `until`: every 300–900 ms terminates every backend of the server (its pool, its pipelined
 * reads, its LISTEN connection), and once, a third of the way in, stops PostgreSQL for a second
 * and starts it again on the same port and files. `restart` swaps the running database in.
 */
async function runChaos(database: () => EmbeddedDatabase, restart: () => Promise<void>, until: number): Promise<ChaosReport> {
  const report: ChaosReport = { terminations: 0, backendsTerminated: 0, restarts: 0 };
  const restartAt = Date.now() + (until - Date.now()) / 3;
  while (Date.now() < until && !interrupted) {
    await sleep(300 + randomInt(600));
    if (report.restarts === 0 && Date.now() >= restartAt) {
      log('chaos: restarting PostgreSQL');
      await restart();
      report.restarts++;
      continue;
    }
    const client = new pg.Client({ connectionString: database().url });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const { rows } = await client.query<{ terminated: number }>(
        `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS terminated FROM pg_stat_activity
         WHERE pid <> pg_backend_pid() AND application_name IN ($1, $2)`,
        [SERVER_APPLICATION_NAME, LISTENER_APPLICATION_NAME],
      );
      report.terminations++;
      report.backendsTerminated += rows[0]!.terminated;
    } catch {
      // PostgreSQL is on its way back up: try again next round.
    } finally {
      await client.end().catch(() => undefined);
    }
  }
  return report;
}

/** After the chaos: the server answers /ready again within 30 s. */
async function waitUntilReady(port: number): Promise<boolean> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const ready = await call({ method: 'GET', path: '/ready', port, timeoutMs: 2000 }).catch(() => undefined);
    if (ready?.status === 200) return true;
    await sleep(250);
  }
  return false;
}

// --- Main. ---

async function main(): Promise<number> {
  const started = Date.now();
  log(
    `${SOAK_SECONDS} s, ${USER_COUNT} users (+1 in a second organization)${CHAOS ? ', chaos: backends terminated, PostgreSQL restarted' : ''}`,
  );
  // Kept on disk (the work directory goes at the end) so that the chaos run can restart it.
  const scratch = await startScratchDatabase({
    prefix: 'zulip-soak-',
    persistent: true,
    applicationName: 'soak-checker',
    handle: { poolMax: 4, onConnectionError: () => undefined },
    onCleanup,
  });
  const { handle } = scratch;
  checker = handle.db;
  const { users, realmUserIds } = await seed(handle);
  const server = await startSoakServer(scratch.url);
  onCleanup(() => server.stop());
  log(`PostgreSQL and the server (port ${server.port}) are up after ${((Date.now() - started) / 1000).toFixed(1)} s`);

  for (const user of users) await registerQueues(server.port, user);
  let stopPolling = false;
  const pollers = users.map((user) => runPoller(server.port, user, () => stopPolling));
  const loadStart = Date.now();
  const loadEnd = loadStart + SOAK_SECONDS * 1000;
  const chaos = CHAOS ? runChaos(scratch.postgres, scratch.restart, loadEnd - 2000) : undefined;
  await Promise.all(users.map((user) => runClient(server.port, user, realmUserIds, loadEnd)));
  const loadSeconds = (Date.now() - loadStart) / 1000;
  if (chaos) {
    const report = await chaos;
    log(
      `chaos: ${report.terminations} rounds terminated ${report.backendsTerminated} backends; ${report.restarts} restart(s) of PostgreSQL`,
    );
    if (report.restarts !== 1 || report.backendsTerminated === 0)
      violation('the chaos did not happen as planned (run longer: SOAK_SECONDS)');
    if (!(await waitUntilReady(server.port))) violation('/ready did not answer 200 within 30 s after the chaos');
  }
  const requestsDone = requestCount;
  stopPolling = true;
  await Promise.all(pollers);
  if (!server.alive()) violation(`the server died:\n${server.output()}`);

  const eventsChecked = await verify(handle.db, users);
  const accepted = users.reduce((sum, user) => sum + user.audit.length, 0);
  const viewCount = users.reduce((sum, user) => sum + user.views.length, 0);
  const rate = (requestsDone / loadSeconds).toFixed(0);
  log(`${requestsDone} requests in ${loadSeconds.toFixed(1)} s (${rate}/s) by ${users.length} clients + ${users.length} long-pollers`);
  log(`statuses ${JSON.stringify(Object.fromEntries([...statusCounts].sort()))}`);
  log(`operations ${JSON.stringify(Object.fromEntries([...operationCounts].sort()))}`);
  log(`checked: ${accepted} accepted setting changes (audit rows), ${viewCount} surviving views, ${eventsChecked} queued/polled events`);
  if (violations.length > 0) {
    log(`FAILED: ${violations.length} violation(s)${violations.length > 20 ? ' (first 20 shown above)' : ''}`);
    return 1;
  }
  log(`OK: no 5xx${CHAOS ? ' but 503 and 504' : ''}, every answer as predicted, database and queues match the accepted requests`);
  return 0;
}

const watchdog = setTimeout(() => {
  log(`watchdog: still running after ${WATCHDOG_MS / 1000} s, stopping`);
  void runCleanups(log).finally(() => process.exit(1));
}, WATCHDOG_MS);
watchdog.unref();

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true;
    log(`${signal}: stopping`);
    void runCleanups(log).finally(() => process.exit(130));
  });
}

void main()
  .catch((error: unknown) => {
    if (!interrupted) log(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return 1;
  })
  .then(async (code) => {
    await runCleanups(log);
    process.exit(code);
  });
