import http from 'node:http';
import fc from 'fast-check';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestContext, type TestContext } from './helpers/app.js';
import { apiKeys, auth, basicAuth, createQueue, emails, type FixtureUser } from './helpers/fixture.js';
import { BOOLEAN_PROPERTIES, SETTING_PROPERTIES } from '../src/modules/subscriptions/settings.js';

/**
 * Property-based fuzzing of every /api/v1 route (docs/api.md §1.1) through the real HTTP stack: arbitrary
 * bodies, content types, query strings, headers and paths never produce a 5xx, and whenever the
 * answer is a 4xx the database is exactly as it was before the request.
 *
 * One database for the whole file; successful requests change it as they go (views pile up,
 * settings flip, queues come and go), which only widens what the later runs exercise.
 */

/** Runs per route; the whole file stays well under a minute on a loaded 2-core machine. */
const RUNS_PER_ROUTE = 45;

let ctx: TestContext;
let port: number;
/** Live queues of fixture users, fed to queue_id now and then (U's is re-created when deleted). */
const queues = new Map<FixtureUser, string>();

beforeAll(async () => {
  ctx = await createTestContext({
    env: {
      // A blocking poll that slips through answers with a heartbeat after 1 s instead of 45.
      HEARTBEAT_SECONDS: '1',
      HEARTBEAT_JITTER_SECONDS: '0',
      EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5',
      // No background sweep may change the database between two snapshots.
      QUEUE_SWEEP_INTERVAL_SECONDS: '86400',
    },
  });
  for (const user of ['U', 'V', 'X'] as const) queues.set(user, await createQueue(ctx.db, user));
  await ctx.app.listen({ port: 0, host: '127.0.0.1' });
  port = (ctx.app.server.address() as { port: number }).port;
});
afterAll(() => ctx.close());

// --- Database snapshot: the rows of every table a request could touch, compared exactly. ---

const SNAPSHOT_SQL = `SELECT json_build_object(
  'users', (SELECT json_agg(t ORDER BY t.id) FROM users t),
  'custom_profile_field_values', (SELECT json_agg(t ORDER BY t.user_id, t.field_id) FROM custom_profile_field_values t),
  'subscriptions', (SELECT json_agg(t ORDER BY t.user_id, t.stream_id) FROM subscriptions t),
  'subscription_audit_log', (SELECT json_agg(t ORDER BY t.id) FROM subscription_audit_log t),
  'navigation_views', (SELECT json_agg(t ORDER BY t.id) FROM navigation_views t),
  'event_queues', (SELECT json_agg(t ORDER BY t.id) FROM event_queues t),
  'events', (SELECT json_agg(t ORDER BY t.queue_id, t.id) FROM events t)
)::text AS snapshot`;

async function snapshot(): Promise<string> {
  const { rows } = await ctx.database.pool.query<{ snapshot: string }>(SNAPSHOT_SQL);
  return rows[0]!.snapshot;
}

interface Sent {
  status: number;
  body: string;
}

/** Status counts per test, printed with FUZZ_STATS=1 (to see that the generators reach the endpoint logic). */
const statistics = new Map<string, Map<number, number>>();
afterAll(() => {
  if (!process.env.FUZZ_STATS) return;
  for (const [test, counts] of statistics) console.log(test, JSON.stringify(Object.fromEntries([...counts].sort((a, b) => a[0] - b[0]))));
});

function tally(status: number): void {
  const test = expect.getState().currentTestName ?? '?';
  const counts = statistics.get(test) ?? new Map<number, number>();
  counts.set(status, (counts.get(status) ?? 0) + 1);
  statistics.set(test, counts);
}

/** The database as the previous request left it (nothing else writes to it meanwhile). */
let current = '';

/** Sends a request; checks no 5xx and, for a 4xx, an unchanged database. One snapshot per request. */
async function checkRequest(send: () => Promise<Sent>, describeRequest: () => string): Promise<Sent> {
  const before = current || (await snapshot());
  const res = await send();
  tally(res.status);
  if (res.status < 400) await ensureQueueOfU();
  // Taken before asserting, so that the runs fast-check replays while shrinking start from the truth.
  current = await snapshot();
  expect(res.status, `${describeRequest()}\n→ ${res.status} ${res.body.slice(0, 500)}`).toBeLessThan(500);
  if (res.status >= 400) {
    expect(current === before, `${describeRequest()}\n→ ${res.status} ${res.body.slice(0, 300)} changed the database`).toBe(true);
  }
  return res;
}

/** A successful DELETE /events may have removed U's queue: U gets a new one, so writes keep producing events. */
async function ensureQueueOfU(): Promise<void> {
  const { rows } = await ctx.database.pool.query('SELECT 1 FROM event_queues WHERE id = $1', [queues.get('U')]);
  if (rows.length === 0) queues.set('U', await createQueue(ctx.db, 'U'));
}

/** Error and success bodies are the Zulip envelope: JSON starting with result then msg. */
function expectEnvelope(res: LightMyRequestResponse, method: string): void {
  if (method === 'HEAD' || res.statusCode === 204) return;
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(Object.keys(res.json<object>()).slice(0, 2)).toEqual(['result', 'msg']);
}

// --- Arbitrary text, as a client can send it. ---

const anyUnit = fc.oneof(
  fc.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)),
  fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
  fc.integer({ min: 0x10000, max: 0x10ffff }).map((code) => String.fromCodePoint(code)),
);

const SQL_META = ["'", '"', ';', '--', '\\', '%', '_', '$1', "' OR 1=1 --", '*/', '\0'];

const rawText: fc.Arbitrary<string> = fc.oneof(
  {
    arbitrary: fc.constantFrom(
      '',
      ' ',
      'true',
      'false',
      'null',
      'NaN',
      '1e400',
      '-1',
      '0',
      '5.0',
      '1.5',
      '"x"',
      '[]',
      '{}',
      '[',
      '{"a":',
      '99999999999999999999999',
      '\0',
      'a\0b',
      '"\\u0000"',
      '😀',
      '\ufeff',
      ...SQL_META,
    ),
    weight: 3,
  },
  { arbitrary: fc.string({ unit: anyUnit, maxLength: 30 }), weight: 3 },
  { arbitrary: fc.json({ maxDepth: 2 }), weight: 2 },
  { arbitrary: fc.oneof(fc.integer(), fc.double(), fc.bigInt()).map(String), weight: 1 },
  {
    arbitrary: fc.tuple(fc.constantFrom('a', ' ', '😀', '\0', '%'), fc.integer({ min: 490, max: 3000 })).map(([unit, n]) => unit.repeat(n)),
    weight: 1,
  },
);

const STREAM_IDS = [100, 101, 102, 103, 104, 200, 0, -1, 999999, 2147483648, 1e20];
const FRAGMENTS = ['inbox', 'recent', 'feed', 'narrow/is/alerted', 'narrow/x', 'Inbox', ' inbox ', "narrow/' OR 1=1 --"];

const jsonBool = fc.oneof({ arbitrary: fc.constantFrom('true', 'false'), weight: 3 }, { arbitrary: rawText, weight: 1 });

const bulkEntry = fc.oneof(
  {
    arbitrary: fc.oneof(
      fc.record({ stream_id: fc.constant(100), property: fc.constantFrom(...BOOLEAN_PROPERTIES), value: fc.boolean() }),
      fc.record({ stream_id: fc.constant(100), property: fc.constant('color'), value: fc.constantFrom('#abc', '#123456', '#ABCD') }),
    ),
    weight: 6,
  },
  {
    arbitrary: fc.record(
      {
        stream_id: fc.oneof(
          { arbitrary: fc.constantFrom(...STREAM_IDS), weight: 4 },
          { arbitrary: fc.jsonValue({ maxDepth: 0 }), weight: 1 },
        ),
        property: fc.oneof(
          { arbitrary: fc.constantFrom(...SETTING_PROPERTIES), weight: 4 },
          { arbitrary: fc.string({ maxLength: 6 }), weight: 1 },
        ),
        value: fc.oneof(fc.boolean(), fc.constantFrom('#abc', '#ABCDEF', '#fff\n', 'zzz'), fc.jsonValue({ maxDepth: 1 })),
      },
      { requiredKeys: [] },
    ),
    weight: 4,
  },
  { arbitrary: fc.jsonValue({ maxDepth: 1 }), weight: 1 },
);

/** A JSON list of strings: known event types and arbitrary text (NUL, quotes, braces, SQL metacharacters). */
const validStringList = fc
  .array(
    fc.oneof(
      fc.constantFrom('subscription', 'navigation_view', 'navigation_views', 'realm_user', 'heartbeat'),
      fc.constantFrom('\0', 'a\0b', '\0\0'),
      fc.constantFrom("' OR 1=1 --", '%', '{a,b}', '"', '\\', 'NULL', '$1'),
      fc.string({ unit: anyUnit, maxLength: 6 }),
    ),
    { minLength: 1, maxLength: 4 },
  )
  .map((items) => JSON.stringify(items));

const jsonStringList = fc.oneof({ arbitrary: validStringList, weight: 3 }, { arbitrary: rawText, weight: 1 });

/** Values that get past parsing often enough to reach the endpoint logic, mixed with junk. */
function valueFor(name: string): fc.Arbitrary<string> {
  const queueIds = fc.constantFrom(...['U', 'V', 'X'].map((user) => () => queues.get(user as FixtureUser) ?? '')).map((read) => read());
  switch (name) {
    case 'subscription_data':
      return fc.oneof(
        { arbitrary: fc.array(bulkEntry, { maxLength: 4 }).map((entries) => JSON.stringify(entries)), weight: 4 },
        { arbitrary: rawText, weight: 1 },
      );
    case 'property':
      return fc.oneof({ arbitrary: fc.constantFrom(...SETTING_PROPERTIES), weight: 3 }, { arbitrary: rawText, weight: 1 });
    case 'value':
      return fc.oneof(
        { arbitrary: fc.constantFrom('true', 'false', '#123456', '#abc', 'True', '"true"'), weight: 3 },
        { arbitrary: rawText, weight: 1 },
      );
    case 'fragment':
      return fc.oneof(fc.constantFrom(...FRAGMENTS), rawText);
    case 'name':
      return fc.oneof(fc.constantFrom('Alerts', "Robert'); DROP TABLE navigation_views;--", '50%_off', ' x '), rawText);
    case 'client_capabilities':
      return fc.oneof(fc.constantFrom('{"notification_settings_null":true}', '{"user_list_incomplete":true}', '{"x":1}'), rawText);
    case 'event_types':
    case 'fetch_event_types':
      return jsonStringList;
    case 'user_ids':
      return fc.oneof(
        {
          arbitrary: fc
            .array(fc.oneof(fc.constantFrom(10, 13, 15, 18, 30, 0, -1, 2147483648, 1e20), fc.integer()))
            .map((ids) => JSON.stringify(ids)),
          weight: 3,
        },
        { arbitrary: rawText, weight: 1 },
      );
    case 'queue_lifespan_secs':
    case 'idle_queue_timeout':
    case 'last_event_id':
      return fc.oneof(
        { arbitrary: fc.constantFrom('-1', '0', '1'), weight: 2 },
        { arbitrary: fc.integer({ min: -3, max: 5 }).map(String), weight: 1 },
        { arbitrary: rawText, weight: 1 },
      );
    case 'queue_id':
      return fc.oneof(
        { arbitrary: queueIds, weight: 2 },
        { arbitrary: fc.uuid().map(String), weight: 1 },
        { arbitrary: rawText, weight: 1 },
      );
    case 'role':
      return fc.oneof(
        { arbitrary: fc.constantFrom('100', '200', '300', '400', '600', '1000', '"400"'), weight: 3 },
        { arbitrary: rawText, weight: 1 },
      );
    case 'full_name':
      return fc.oneof(
        { arbitrary: fc.constantFrom('New Name', '  Spaced  ', '', 'iago|72', 'Opheli*', 'x'.repeat(101)), weight: 2 },
        { arbitrary: rawText, weight: 2 },
      );
    case 'profile_data':
      return fc.oneof(
        {
          arbitrary: fc
            .array(
              fc.record(
                {
                  id: fc.oneof(fc.constantFrom(1, 2, 3, 4, 9001, 0, -1, 2147483648), fc.jsonValue({ maxDepth: 0 })),
                  value: fc.oneof(
                    fc.constantFrom(null, '', 'opt1', '2000-01-01', 'x\u0000y', '**b**'),
                    fc.array(fc.integer()),
                    fc.jsonValue({ maxDepth: 1 }),
                  ),
                },
                { requiredKeys: [] },
              ),
              { maxLength: 3 },
            )
            .map((entries) => JSON.stringify(entries)),
          weight: 3,
        },
        { arbitrary: rawText, weight: 1 },
      );
    case 'email':
      return fc.oneof(
        { arbitrary: fc.constantFrom('new@example.com', 'U@EXAMPLE.COM', 'broken', 'a b@example.com'), weight: 2 },
        { arbitrary: rawText, weight: 1 },
      );
    case 'client_gravatar':
    case 'include_subscribers':
    case 'include_custom_profile_fields':
    case 'is_pinned':
    case 'dont_block':
      return jsonBool;
    default:
      return rawText;
  }
}

// --- The routes of docs/api.md §1.1 with their declared parameters. ---

interface RouteShape {
  label: string;
  methods: string[];
  path: fc.Arbitrary<string>;
  params: string[];
  /** Field sets that make a valid request more often than independent values would. */
  valid?: fc.Arbitrary<[string, string][]>;
}

const field = (name: string, value: fc.Arbitrary<string>) => value.map((text): [string, string] => [name, text]);
const realQueueId = (user: FixtureUser) => fc.constant(null).map(() => queues.get(user) ?? '');

/** A path segment: plain, percent-encoded (valid or not), with NUL, slashes, dots, or very long. */
const segment: fc.Arbitrary<string> = fc.oneof(
  fc.string({ unit: anyUnit, maxLength: 20 }).map((text) => encodeBytes(text, 'path')),
  fc
    .array(
      fc.oneof(
        fc.constantFrom(
          '%00',
          '%2F',
          '%2f',
          '%25',
          '%',
          '%zz',
          '%E0%A4',
          '%FF',
          '%C0%AF',
          '..',
          '.',
          '/',
          '//',
          '%2E%2E',
          '+',
          '%20',
          '@',
          ';',
          "'",
          '%27',
          '$1',
        ),
        fc.integer({ min: 0, max: 255 }).map((byte) => `%${byte.toString(16).padStart(2, '0')}`),
        fc.stringMatching(/^[a-z0-9._@-]{1,8}$/),
      ),
      { minLength: 1, maxLength: 8 },
    )
    .map((pieces) => pieces.join('')),
  fc.tuple(fc.constantFrom('a', '%41', '/', '9'), fc.integer({ min: 100, max: 9000 })).map(([unit, n]) => unit.repeat(n)),
);

const pick = <T>(...values: T[]) => fc.constantFrom(...values);

const ROUTES: RouteShape[] = [
  { label: '/server_settings', methods: ['GET'], path: pick('/api/v1/server_settings'), params: [] },
  { label: '/users/me/subscriptions', methods: ['GET'], path: pick('/api/v1/users/me/subscriptions'), params: ['include_subscribers'] },
  {
    label: '/users/me/subscriptions/properties',
    methods: ['POST'],
    path: pick('/api/v1/users/me/subscriptions/properties'),
    params: ['subscription_data'],
  },
  {
    label: '/users/me/subscriptions/{stream_id}',
    methods: ['PATCH', 'POST'],
    path: fc
      .oneof(
        { arbitrary: pick('100'), weight: 4 },
        { arbitrary: pick(...STREAM_IDS.map(String), '007', '99999999999999999999'), weight: 2 },
        { arbitrary: segment, weight: 1 },
      )
      .map((id) => `/api/v1/users/me/subscriptions/${id}`),
    params: ['property', 'value'],
    valid: fc.oneof(
      fc.tuple(field('property', fc.constantFrom(...BOOLEAN_PROPERTIES)), field('value', fc.constantFrom('true', 'false'))),
      fc.tuple(field('property', fc.constant('color')), field('value', fc.constantFrom('#abc', '#12345f'))),
    ),
  },
  {
    label: '/users/me/subscriptions (membership)',
    methods: ['POST', 'DELETE'],
    path: pick('/api/v1/users/me/subscriptions'),
    params: ['subscriptions', 'principals', 'authorization_errors_fatal', 'invite_only'],
    valid: fc.oneof(
      fc.tuple(
        field(
          'subscriptions',
          fc.constantFrom('[{"name":"P"}]', '[{"name":"fuzz"},{"name":"Q"}]', '[{"name":"S"}]', '["P","Q"]', '["fuzz"]'),
        ),
      ),
      fc.tuple(
        field('subscriptions', fc.constantFrom('[{"name":"Q"}]', '["Q"]', '[{"name":"W","color":"#abc"}]', '["W"]')),
        field('principals', fc.constantFrom('[13]', '[14,16]', '["v@example.com"]', '[18]', '[30]', '[]')),
      ),
    ),
  },
  {
    label: '/users/{user_id}/subscriptions/{stream_id}',
    methods: ['GET'],
    path: fc
      .tuple(
        fc.oneof({ arbitrary: pick('13', '14', '16', '18', '30', '0', '99999999999999'), weight: 3 }, { arbitrary: segment, weight: 1 }),
        fc.oneof({ arbitrary: pick(...STREAM_IDS.map(String), '0', '99999999999999999999'), weight: 3 }, { arbitrary: segment, weight: 1 }),
      )
      .map(([user, stream]) => `/api/v1/users/${user}/subscriptions/${stream}`),
    params: [],
  },
  {
    label: '/streams/{stream_id}/members',
    methods: ['GET'],
    path: fc
      .oneof({ arbitrary: pick(...STREAM_IDS.map(String), '0', '99999999999999999999'), weight: 3 }, { arbitrary: segment, weight: 1 })
      .map((stream) => `/api/v1/streams/${stream}/members`),
    params: [],
  },
  {
    label: '/streams',
    methods: ['GET'],
    path: pick('/api/v1/streams'),
    params: [
      'include_public',
      'include_subscribed',
      'include_all',
      'include_owner_subscribed',
      'include_can_access_content',
      'exclude_archived',
    ],
  },
  {
    label: '/streams/{stream_id}',
    methods: ['GET'],
    path: fc
      .oneof({ arbitrary: pick(...STREAM_IDS.map(String), '0', '99999999999999999999'), weight: 3 }, { arbitrary: segment, weight: 1 })
      .map((stream) => `/api/v1/streams/${stream}`),
    params: [],
  },
  {
    label: '/get_stream_id',
    methods: ['GET'],
    path: pick('/api/v1/get_stream_id'),
    params: ['stream'],
    valid: fc.tuple(field('stream', fc.constantFrom('P', ' q ', 'S', 'Z', 'C2', "P' OR '1'='1", '%', '_'))),
  },
  {
    label: '/users',
    methods: ['GET'],
    path: pick('/api/v1/users'),
    params: ['client_gravatar', 'include_custom_profile_fields', 'user_ids'],
  },
  {
    label: '/users/{user_id|email}',
    methods: ['GET'],
    path: fc
      .oneof(
        { arbitrary: pick('13', '14', '16', '18', 'u@example.com', 'V@EXAMPLE.COM', 'user13@chat.example.com'), weight: 3 },
        {
          arbitrary: pick(
            '30',
            '0',
            '99999999999999',
            '%25@example.com',
            '_@example.com',
            "u@example.com'%20OR%20'1'='1",
            'x@example.com',
            'me',
          ),
          weight: 2,
        },
        { arbitrary: segment, weight: 1 },
      )
      .map((user) => `/api/v1/users/${user}`),
    params: ['client_gravatar', 'include_custom_profile_fields'],
  },
  { label: '/users/me', methods: ['GET'], path: pick('/api/v1/users/me'), params: [] },
  {
    label: '/users (create)',
    methods: ['POST'],
    path: pick('/api/v1/users'),
    params: ['email', 'password', 'full_name'],
    valid: fc.tuple(
      field('email', fc.constantFrom('new@example.com', 'fresh@example.org')),
      field('password', fc.constantFrom('secret-enough', '')),
      field('full_name', fc.constantFrom('New Person', 'a|1')),
    ),
  },
  {
    label: '/users/{user_id|email} (update)',
    methods: ['PATCH'],
    path: fc
      .oneof(
        { arbitrary: pick('16', '13', '14', '18', 'b-bot@chat.example.com', 'u@example.com'), weight: 3 },
        { arbitrary: pick('30', '0', '99999999999999', 'me', "u@example.com'%20OR%20'1'='1"), weight: 1 },
        { arbitrary: segment, weight: 1 },
      )
      .map((user) => `/api/v1/users/${user}`),
    params: ['full_name', 'role', 'profile_data', 'new_email'],
    valid: fc
      .tuple(
        field('full_name', fc.constantFrom('Robo', 'Bot B')),
        field('profile_data', fc.constantFrom('[{"id":1,"value":"x"}]', '[{"id":1,"value":null}]')),
      )
      .chain((fields) => fc.subarray(fields)),
  },
  {
    label: '/users/{user_id} (deactivate)',
    methods: ['DELETE'],
    path: fc
      .oneof({ arbitrary: pick('14', '16', '18', '30', '10', '0', '99999999999999999999'), weight: 3 }, { arbitrary: segment, weight: 1 })
      .map((user) => `/api/v1/users/${user}`),
    params: ['deactivation_notification_comment'],
  },
  {
    label: '/users/{user_id}/reactivate',
    methods: ['POST'],
    path: fc
      .oneof({ arbitrary: pick('16', '18', '14', '30', '0', '99999999999999999999'), weight: 3 }, { arbitrary: segment, weight: 1 })
      .map((user) => `/api/v1/users/${user}/reactivate`),
    params: [],
  },
  {
    label: '/navigation_views',
    methods: ['GET', 'POST'],
    path: pick('/api/v1/navigation_views'),
    params: ['fragment', 'is_pinned', 'name'],
    valid: fc.oneof(
      fc.tuple(field('fragment', fc.constantFrom('inbox', 'recent', 'feed')), field('is_pinned', fc.constantFrom('true', 'false'))),
      fc.tuple(field('fragment', rawText), field('is_pinned', fc.constantFrom('true', 'false')), field('name', rawText)),
    ),
  },
  {
    label: '/navigation_views/{fragment}',
    methods: ['PATCH', 'DELETE'],
    path: fc
      .oneof(
        { arbitrary: pick(...FRAGMENTS.map((fragment) => encodeBytes(fragment, 'path'))), weight: 3 },
        { arbitrary: segment, weight: 1 },
      )
      .map((fragment) => `/api/v1/navigation_views/${fragment}`),
    params: ['is_pinned', 'name'],
    valid: fc.subarray([
      ['is_pinned', 'false'],
      ['name', 'Renamed'],
    ]),
  },
  {
    label: '/register',
    methods: ['POST'],
    path: pick('/api/v1/register'),
    params: [
      'client_gravatar',
      'include_subscribers',
      'client_capabilities',
      'event_types',
      'fetch_event_types',
      'queue_lifespan_secs',
      'idle_queue_timeout',
    ],
    valid: fc
      .tuple(
        field('event_types', validStringList),
        field('fetch_event_types', validStringList),
        field('queue_lifespan_secs', fc.oneof(fc.integer().map(String), fc.constantFrom('1e300', '-1e300', '5.0'))),
        field('idle_queue_timeout', fc.oneof(fc.integer({ min: 1 }).map(String), fc.constantFrom('"mobile"', '1e300', '5.0'))),
      )
      .chain((fields) => fc.subarray(fields)),
  },
  {
    label: '/events',
    methods: ['GET', 'DELETE'],
    path: pick('/api/v1/events'),
    params: ['last_event_id', 'queue_id', 'dont_block'],
    valid: fc.tuple(field('queue_id', fc.oneof(realQueueId('U'), realQueueId('V'))), field('last_event_id', fc.constantFrom('-1', '0'))),
  },
];

// QUERY: a body method Fastify refuses without a Content-Type before routing.
const ALL_METHODS = ['GET', 'HEAD', 'POST', 'PATCH', 'DELETE', 'PUT', 'OPTIONS', 'QUERY'];

/** Percent-encodes the UTF-8 bytes of text (lone surrogates become U+FFFD), keeping some characters. */
function encodeBytes(text: string, where: 'path' | 'form'): string {
  const keep = where === 'path' ? /[A-Za-z0-9._~!$&'()*+,;=:@-]/ : /[A-Za-z0-9._~*-]/;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    const char = String.fromCharCode(byte);
    out += byte < 0x80 && keep.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

// --- Parameters and their encodings. ---

const extraName = fc.oneof(
  fc.constantFrom('client', 'method', '__proto__', 'constructor', 'toString', 'stream_id', 'foo', "a'b", 'a[]', 'a[0]', ''),
  fc.string({ unit: anyUnit, maxLength: 8 }),
);

/**
 * Some of the declared parameters with plausible values (often enough a valid request), plus junk
 * pairs (undeclared names, or declared names with arbitrary values), in any order, repeats allowed.
 */
function fieldsFor(route: Pick<RouteShape, 'params' | 'valid'>): fc.Arbitrary<[string, string][]> {
  const { params } = route;
  const independent = fc.subarray(params).chain((names) => fc.tuple(...names.map((name) => field(name, valueFor(name)))));
  const declared = route.valid ? fc.oneof(route.valid, independent) : independent;
  const junkName = params.length === 0 ? extraName : fc.oneof(extraName, fc.constantFrom(...params));
  const junk = fc.array(fc.tuple(junkName, rawText), { maxLength: 3 });
  return fc.tuple(declared, junk, fc.nat(3)).map(([good, bad, order]) => {
    if (order === 0) return [...bad, ...good];
    if (order === 1) return [...good, ...bad];
    return good; // half the time nothing but declared parameters
  });
}

/** urlencoded text: proper encoding, or raw characters that change how the text splits. */
function formText(fields: [string, string][], raw: boolean): string {
  return fields.map(([name, value]) => (raw ? `${name}=${value}` : `${encodeBytes(name, 'form')}=${encodeBytes(value, 'form')}`)).join('&');
}

interface Body {
  contentType?: string;
  payload?: string | Buffer;
}

const BOUNDARY = 'fuzzBoundary9Xq';

function multipartText(fields: [string, string][], withFile: boolean, jsonParts: boolean): string {
  let text = '';
  for (const [name, value] of fields) {
    // A part may declare its own type; @fastify/multipart parses application/json parts.
    const partType = jsonParts ? 'Content-Type: application/json\r\n' : '';
    text += `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name.replace(/["\r\n]/g, '')}"\r\n${partType}\r\n${value}\r\n`;
  }
  if (withFile) {
    text += `--${BOUNDARY}\r\nContent-Disposition: form-data; name="f"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nfile\0data\r\n`;
  }
  return `${text}--${BOUNDARY}--\r\n`;
}

const CONTENT_TYPES = [
  'application/x-www-form-urlencoded',
  'APPLICATION/X-WWW-FORM-URLENCODED; charset=UTF-8',
  'application/x-www-form-urlencoded; charset=latin1',
  'multipart/form-data',
  `multipart/form-data; boundary=${BOUNDARY}`,
  'multipart/form-data; boundary=',
  'multipart/mixed',
  'application/json',
  'text/plain',
  'application/octet-stream',
  '*/*',
  'x',
  ';',
  'application/x-www-form-urlencoded;;',
  'text/html; charset=utf-8',
  'multipart/form-data; boundary="q"',
];

function bodyFor(route: RouteShape): fc.Arbitrary<Body> {
  const fields = fieldsFor(route);
  const form = fc
    .tuple(
      fields,
      fc.nat(3).map((n) => n === 0),
      fc.constantFrom(...CONTENT_TYPES.slice(0, 3)),
    )
    .map(([pairs, raw, contentType]): Body => ({ contentType, payload: formText(pairs, raw) }));
  const multipart = fc
    .tuple(
      fields,
      fc.boolean(),
      fc.oneof({ arbitrary: fc.constant(-1), weight: 2 }, { arbitrary: fc.nat(400), weight: 1 }),
      fc.nat(3).map((n) => n > 0),
      fc.nat(3).map((n) => n === 0),
    )
    .map(([pairs, withFile, cut, rightBoundary, jsonParts]): Body => {
      const text = multipartText(pairs, withFile, jsonParts);
      return {
        contentType: rightBoundary ? `multipart/form-data; boundary=${BOUNDARY}` : 'multipart/form-data; boundary=other',
        payload: cut < 0 ? text : text.slice(0, cut),
      };
    });
  const json = fc.tuple(fields, fc.boolean()).map(([pairs, fragment]): Body => {
    const text = JSON.stringify(Object.fromEntries(pairs));
    return { contentType: 'application/json', payload: fragment ? text.slice(0, Math.floor(text.length / 2)) : text };
  });
  const other = fc
    .tuple(fc.constantFrom(...CONTENT_TYPES), fc.string({ unit: 'binary-ascii', maxLength: 12 }), fields, fc.boolean())
    .map(([contentType, randomType, pairs, useRandomType]): Body => ({
      contentType: useRandomType ? randomType.replace(/[^\x20-\x7e]/g, '') : contentType,
      payload: formText(pairs, false),
    }));
  const bytes = fc
    .tuple(fc.constantFrom(...CONTENT_TYPES), fc.uint8Array({ maxLength: 64 }))
    .map(([contentType, data]): Body => ({ contentType, payload: Buffer.from(data) }));
  return fc.oneof(
    { arbitrary: form, weight: 5 },
    { arbitrary: multipart, weight: 2 },
    { arbitrary: json, weight: 1 },
    { arbitrary: other, weight: 1 },
    { arbitrary: bytes, weight: 1 },
    { arbitrary: fc.constant<Body>({}), weight: 1 },
  );
}

/** A query string with declared and undeclared parameters, properly or raggedly encoded. */
const queryFor = (route: RouteShape) => fc.tuple(fieldsFor(route), fc.boolean()).map(([pairs, raw]) => formText(pairs, raw));

// --- Headers. ---

const FIXTURE_USERS: FixtureUser[] = ['O', 'A', 'M', 'U', 'V', 'G', 'B', 'H', 'D', 'X'];

const authorization: fc.Arbitrary<string | undefined> = fc.oneof(
  { arbitrary: fc.constantFrom(...FIXTURE_USERS).map((user) => auth(user)), weight: 6 },
  { arbitrary: fc.constant(undefined), weight: 1 },
  {
    arbitrary: fc.constantFrom(
      '',
      'Basic',
      'Bearer abc',
      'Basic !!!!',
      'Basic Zm9v',
      'basic  ',
      'Basic a b',
      'Digest x=y',
      'Basic ====',
      basicAuth("' OR 1=1 --", apiKeys.U),
      basicAuth('%@example.com', apiKeys.U),
      basicAuth(emails.U, "' OR 1=1 --".padEnd(32, 'x')),
      basicAuth(emails.U, apiKeys.U.toLowerCase()),
      `Basic ${Buffer.from(`${emails.U}:${apiKeys.U}\0`).toString('base64')}`,
    ),
    weight: 2,
  },
  {
    arbitrary: fc
      .tuple(fc.string({ unit: anyUnit, maxLength: 20 }), fc.string({ unit: anyUnit, maxLength: 40 }))
      .map(([email, key]) => basicAuth(email, key)),
    weight: 2,
  },
  { arbitrary: fc.string({ unit: 'binary-ascii', maxLength: 60 }).map((text) => text.replace(/[\0\r\n]/g, ' ')), weight: 1 },
  { arbitrary: fc.uint8Array({ maxLength: 48 }).map((bytes) => `Basic ${Buffer.from(bytes).toString('base64')}`), weight: 1 },
);

const host: fc.Arbitrary<string | undefined> = fc.oneof(
  { arbitrary: fc.constant('chat.example.com'), weight: 6 },
  {
    arbitrary: fc.constantFrom(
      'other.chat.example.com',
      'www.chat.example.com',
      'CHAT.EXAMPLE.COM:443',
      'nosuch.chat.example.com',
      '10.0.0.5:8080',
      'chat.example.com:99999999999',
      '.chat.example.com',
      "x'.chat.example.com",
      '%.chat.example.com',
      '[::1]:80',
      'a.b.c.chat.example.com',
    ),
    weight: 2,
  },
  { arbitrary: fc.string({ unit: 'binary-ascii', maxLength: 30 }).map((text) => text.replace(/[^\x21-\x7e]/g, '')), weight: 1 },
);

// --- The properties. ---

interface FuzzRequest {
  method: string;
  path: string;
  query: string;
  body: Body;
  authorization: string | undefined;
  host: string | undefined;
}

function describeRequest(request: FuzzRequest): string {
  const payload = request.body.payload === undefined ? '' : String(request.body.payload).slice(0, 400);
  return (
    `${request.method} ${request.path.slice(0, 300)}?${request.query.slice(0, 300)} [${request.body.contentType ?? '-'}] ${payload}` +
    ` host=${request.host} auth=${request.authorization?.slice(0, 60)}`
  );
}

async function inject(request: FuzzRequest): Promise<Sent> {
  let query = request.query;
  // A GET of a real queue would otherwise wait for events; the last occurrence wins.
  if (request.path === '/api/v1/events') query += '&dont_block=true';
  const headers: Record<string, string> = {};
  if (request.host !== undefined) headers.host = request.host;
  if (request.authorization !== undefined) headers.authorization = request.authorization;
  if (request.body.contentType !== undefined) headers['content-type'] = request.body.contentType;
  const res = await ctx.app.inject({
    method: request.method as 'GET',
    url: `${request.path}?${query}`,
    headers,
    ...(request.body.payload !== undefined && request.method !== 'GET' && request.method !== 'HEAD' && { payload: request.body.payload }),
  });
  expectEnvelope(res, request.method);
  return { status: res.statusCode, body: res.body };
}

interface RequestOptions {
  methods: string[];
  authorization: fc.Arbitrary<string | undefined>;
  host: fc.Arbitrary<string | undefined>;
}

function requestsFor(route: RouteShape, options: RequestOptions) {
  return fc.record({
    method: fc.constantFrom(...options.methods),
    path: route.path,
    query: queryFor(route),
    body: bodyFor(route),
    authorization: options.authorization,
    host: options.host,
  });
}

const mostlyValid = {
  authorization: fc.oneof(
    { arbitrary: fc.constant(auth('U')), weight: 8 },
    { arbitrary: fc.constantFrom(auth('V'), auth('G'), auth('X')), weight: 1 },
  ),
  host: fc.constant('chat.example.com'),
};

describe('fuzz: every endpoint with arbitrary bodies and query strings', () => {
  for (const route of ROUTES) {
    it(`${route.methods.join('/')} /api/v1${route.label}`, async () => {
      await fc.assert(
        fc.asyncProperty(requestsFor(route, { methods: route.methods, ...mostlyValid }), async (request) => {
          await checkRequest(
            () => inject(request),
            () => describeRequest(request),
          );
        }),
        { numRuns: RUNS_PER_ROUTE },
      );
    });
  }
});

describe('fuzz: wrong methods, headers and hosts on every route', () => {
  it('any method, any Authorization, any Host', async () => {
    const anyRoute = fc.constantFrom(...ROUTES).chain((route) => requestsFor(route, { methods: ALL_METHODS, authorization, host }));
    await fc.assert(
      fc.asyncProperty(anyRoute, async (request) => {
        await checkRequest(
          () => inject(request),
          () => describeRequest(request),
        );
      }),
      { numRuns: 150 },
    );
  });
});

/** Sends the path as raw bytes (no URL normalization: dots, backslashes and escapes arrive as typed). */
function sendRaw(method: string, path: string, body: string): Promise<Sent> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        headers: {
          host: 'chat.example.com',
          authorization: auth('U'),
          'content-type': 'application/x-www-form-urlencoded',
          'content-length': String(Buffer.byteLength(body)),
          connection: 'close',
        },
        insecureHTTPParser: true,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    request.on('error', reject);
    request.setTimeout(10_000, () => request.destroy(new Error('timed out')));
    request.end(body);
  });
}

describe('fuzz: raw paths over a real socket', () => {
  const rawPath = fc
    .tuple(
      fc.constantFrom('/api/v1/users/', '/api/v1/users/me/subscriptions/', '/api/v1/navigation_views/', '/api/v1/', '/api/v1/events/', '/'),
      fc.array(fc.oneof(segment, fc.constantFrom('..', '.', '\\', '\\..\\', '//', '%00', 'me', 'properties', '?', '#', 'a?b=%zz')), {
        minLength: 1,
        maxLength: 4,
      }),
    )
    .map(([prefix, pieces]) => `${prefix}${pieces.join('/')}`.replace(/[^\x21-\xff]/g, (char) => encodeBytes(char, 'path')))
    // Request lines beyond Node's 16 KiB header limit never reach the application.
    .filter((path) => path.length < 12_000);

  it('never a 5xx, never a change on 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        rawPath,
        fc.constantFrom(...ALL_METHODS),
        fc.constantFrom('', 'is_pinned=true&name=x', 'property=pin_to_top&value=true'),
        async (path, method, form) => {
          const body = method === 'GET' || method === 'HEAD' ? '' : form;
          await checkRequest(
            () => sendRaw(method, path, body),
            () => `${method} ${path} ${body}`,
          );
        },
      ),
      { numRuns: 100 },
    );
  });
});
