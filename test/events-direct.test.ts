import { randomUUID } from 'node:crypto';
import http, { type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { type Config, loadConfig } from '../src/config.js';
import { databaseOptionsOf } from '../src/db/database.js';
import { hashApiKey } from '../src/lib/api-keys.js';
import { plainPollQuery } from '../src/modules/events/direct-polls.js';
import { FIXTURE_ENV } from './helpers/app.js';
import { createFixtureDatabase, type TestDatabase } from './helpers/database.js';
import { badQueueBody, errorBody, INTERNAL_ERROR, success } from './helpers/envelope.js';
import { auth, basicAuth, emails, type FixtureUser, ids } from './helpers/fixture.js';
import { pinEvent, queueRow, registerQueue, setPinToTop, storedEventIds, waited } from './helpers/events.js';
import { eventually } from './helpers/wait.js';

/**
 * Blocking polls in the shape Zulip's clients send are served around Fastify
 * (src/modules/events/direct-polls.ts, issue 27). app.inject never reaches that path (it calls
 * Fastify's handler), so each answer of the direct path, over a real socket, is compared here with
 * the route's answer to the same request through app.inject: same status, body and headers. An
 * onRequest hook counts what reaches Fastify: a plain poll never does, any other request always.
 */

interface DirectContext {
  app: FastifyInstance;
  database: TestDatabase;
  config: Config;
  port: number;
  /** The app's log lines (pino JSON, level info). */
  lines: Record<string, unknown>[];
  /** The URLs of the requests Fastify handled. */
  reachedFastify: string[];
  close(): Promise<void>;
}

let ctx: DirectContext | undefined;
afterEach(async () => {
  await ctx?.close();
  ctx = undefined;
});

async function listening(env: Record<string, string> = {}): Promise<DirectContext> {
  const settings = loadConfig({ ...FIXTURE_ENV, LOG_LEVEL: 'info', ...env, DATABASE_URL: 'postgres://set-below' });
  const database = await createFixtureDatabase(databaseOptionsOf(settings));
  const config: Config = { ...settings, databaseUrl: database.url };
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const app = await buildApp({ config, ...database }, { stream });
  const reachedFastify: string[] = [];
  app.addHook('onRequest', (request, _reply, done) => {
    reachedFastify.push(request.url);
    done();
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  ctx = {
    app,
    database,
    config,
    port,
    lines,
    reachedFastify,
    close: async () => {
      await app.close();
      await database.drop();
    },
  };
  return ctx;
}

interface Answer {
  statusCode: number;
  headers: IncomingHttpHeaders;
  /** The body as received (gzipped when the answer is). */
  raw: Buffer;
  body: string;
  json(): Record<string, unknown>;
}

interface Sent {
  headers?: Record<string, string>;
  as?: FixtureUser;
  /** Resolves with the request once it is sent, to abort it. */
  onRequest?: (request: http.ClientRequest) => void;
  /** The connection's agent (default none: a connection of its own, closed after the answer). */
  agent?: http.Agent;
}

/** A GET over a real socket (a connection of its own), as a client sends it. */
function overSocket(path: string, sent: Sent = {}): Promise<Answer> {
  const { port } = ctx!;
  const headers: Record<string, string> = { host: 'chat.example.com', ...sent.headers };
  if (sent.as !== undefined || !('authorization' in headers)) headers.authorization = auth(sent.as ?? 'U');
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path, headers, agent: sent.agent ?? false }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => {
        const raw = Buffer.concat(chunks);
        const body = (response.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw).toString('utf8');
        resolve({
          statusCode: response.statusCode!,
          headers: response.headers,
          raw,
          body,
          json: () => JSON.parse(body) as Record<string, unknown>,
        });
      });
    });
    request.on('error', reject);
    sent.onRequest?.(request);
  });
}

/** The same GET through app.inject: Fastify's route. */
function throughRoute(path: string, sent: Sent = {}): Promise<LightMyRequestResponse> {
  const headers: Record<string, string> = { host: 'chat.example.com', ...sent.headers };
  if (sent.as !== undefined || !('authorization' in headers)) headers.authorization = auth(sent.as ?? 'U');
  return ctx!.app.inject({ method: 'GET', url: path, headers });
}

const poll = (queueId: string, lastEventId: number | string) => `/api/v1/events?queue_id=${queueId}&last_event_id=${lastEventId}`;

/** What differs between any two answers: the date, the request id, the connection's own headers, the rate limit's clock. */
const PER_ANSWER = new Set(['date', 'x-request-id', 'connection', 'keep-alive', 'x-ratelimit-reset', 'retry-after']);
const comparable = (headers: IncomingHttpHeaders | LightMyRequestResponse['headers']) =>
  Object.fromEntries(
    Object.entries(headers)
      .filter(([name]) => !PER_ANSWER.has(name))
      .sort(([a], [b]) => a.localeCompare(b)),
  );

/** The direct answer equals the route's: status, body, headers; and only the route's request reached Fastify. */
async function expectSameAnswer(path: string, sent: Sent = {}): Promise<Answer> {
  const before = ctx!.reachedFastify.length;
  const direct = await overSocket(path, sent);
  expect(ctx!.reachedFastify.length, 'the plain poll reached Fastify').toBe(before);
  const route = await throughRoute(path, sent);
  expect(ctx!.reachedFastify.length).toBe(before + 1);
  expect(direct.statusCode).toBe(route.statusCode);
  const routeBody = route.headers['content-encoding'] === 'gzip' ? gunzipSync(route.rawPayload).toString('utf8') : route.body;
  expect(direct.body).toBe(routeBody);
  // With rate limiting on, the route's request came one later: one fewer left.
  const { 'x-ratelimit-remaining': directLeft, ...directHeaders } = comparable(direct.headers);
  const { 'x-ratelimit-remaining': routeLeft, ...routeHeaders } = comparable(route.headers);
  expect(directHeaders).toEqual(routeHeaders);
  if (directLeft === undefined || routeLeft === undefined) expect([directLeft, routeLeft]).toEqual([undefined, undefined]);
  else expect(Number(directLeft)).toBe(Number(routeLeft) + 1);
  // The balancer's id when it sent one, else one of ours.
  const sentId = sent.headers?.['x-request-id'];
  if (sentId !== undefined) expect(direct.headers['x-request-id']).toBe(sentId);
  else expect(direct.headers['x-request-id']).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  return direct;
}

describe('the plain shape', () => {
  const queueId = randomUUID();

  it('is queue_id and last_event_id, and maybe dont_block=false, each once, in any order, with values any decoding reads alike', () => {
    expect(plainPollQuery(`/api/v1/events?queue_id=${queueId}&last_event_id=-1`)).toEqual({ queueId, lastEventId: -1 });
    expect(plainPollQuery(`/api/v1/events?last_event_id=0&queue_id=${queueId}`)).toEqual({ queueId, lastEventId: 0 });
    expect(plainPollQuery(`/api/v1/events?dont_block=false&last_event_id=7&queue_id=${queueId}`)).toEqual({ queueId, lastEventId: 7 });
    expect(plainPollQuery(`/api/v1/events?queue_id=${queueId}&dont_block=false&last_event_id=7`)).toEqual({ queueId, lastEventId: 7 });
    expect(plainPollQuery(`/api/v1/events?queue_id=${queueId}&last_event_id=123456789012345`)).toEqual({
      queueId,
      lastEventId: 123456789012345,
    });
  });

  it.each([
    ['another path', `/api/v1/events/?queue_id=${queueId}&last_event_id=1`],
    ['no query', '/api/v1/events'],
    ['dont_block=true', `/api/v1/events?queue_id=${queueId}&last_event_id=1&dont_block=true`],
    ['dont_block twice', `/api/v1/events?queue_id=${queueId}&last_event_id=1&dont_block=false&dont_block=false`],
    ['dont_block spelled otherwise', `/api/v1/events?queue_id=${queueId}&last_event_id=1&dont_block=False`],
    ['an unknown parameter', `/api/v1/events?queue_id=${queueId}&last_event_id=1&narrow=x`],
    ['a parameter twice', `/api/v1/events?queue_id=${queueId}&queue_id=${queueId}`],
    ['a missing parameter', `/api/v1/events?queue_id=${queueId}`],
    ['an empty pair', `/api/v1/events?queue_id=${queueId}&last_event_id=1&`],
    ['an upper-case queue id', `/api/v1/events?queue_id=${queueId.toUpperCase()}&last_event_id=1`],
    ['a percent-encoded queue id', `/api/v1/events?queue_id=${queueId.replace('-', '%2D')}&last_event_id=1`],
    ['a leading zero', `/api/v1/events?queue_id=${queueId}&last_event_id=01`],
    ['a plus sign', `/api/v1/events?queue_id=${queueId}&last_event_id=%2B1`],
    ['a fraction', `/api/v1/events?queue_id=${queueId}&last_event_id=1.0`],
    ['sixteen digits', `/api/v1/events?queue_id=${queueId}&last_event_id=1234567890123456`],
    ['an empty value', `/api/v1/events?queue_id=${queueId}&last_event_id=`],
  ])('is not %s', (_case, url) => {
    expect(plainPollQuery(url)).toBeUndefined();
  });
});

describe('a plain poll is answered around Fastify, exactly as the route answers it', () => {
  it('pending events at once; the caller, queue and acknowledgement errors; refused credentials', async () => {
    // Rate limiting on: every answer after the credentials carries its headers.
    await listening({ RATE_LIMITING: 'true', RATE_LIMIT_MAX_REQUESTS: '1000' });
    const queueId = await registerQueue(ctx!.app);
    expect((await setPinToTop(ctx!.app, true)).statusCode).toBe(200);
    const pending = await expectSameAnswer(poll(queueId, -1));
    expect(pending.body).toBe(success({ events: [pinEvent(true, 0)] }));
    // As zulip-js sends it.
    expect((await expectSameAnswer(`${poll(queueId, -1)}&dont_block=false`)).body).toBe(pending.body);
    expect(pending.headers['content-type']).toBe('application/json; charset=utf-8');

    const unknown = randomUUID();
    expect((await expectSameAnswer(poll(unknown, -1))).body).toBe(badQueueBody(unknown));
    // Another user's queue is unknown to this one.
    expect((await expectSameAnswer(poll(queueId, -1), { as: 'V' })).body).toBe(badQueueBody(queueId));
    expect((await expectSameAnswer(poll(queueId, 5))).body).toBe(errorBody('Event 5 was not in this queue'));
    // Acknowledged through 0 by a poll of its own, the queue then refuses -1.
    expect((await overSocket(poll(queueId, 0).replace('last_event_id=0', 'last_event_id=0&dont_block=true'))).statusCode).toBe(200);
    expect((await expectSameAnswer(poll(queueId, -1))).body).toBe(errorBody('An event newer than -1 has already been pruned!'));

    const wrongKey = await expectSameAnswer(poll(queueId, 0), { headers: { authorization: basicAuth(emails.U, 'wrong'.padEnd(32, '0')) } });
    expect([wrongKey.statusCode, wrongKey.body]).toEqual([401, errorBody('Invalid API key', 'UNAUTHORIZED')]);
    expect(wrongKey.headers['www-authenticate']).toBe('Basic realm="zulip"');
    const otherOrganization = { headers: { host: 'other.chat.example.com' } };
    expect((await expectSameAnswer(poll(queueId, 0), otherOrganization)).body).toBe(
      errorBody('Account is not associated with this subdomain', 'UNAUTHORIZED'),
    );
    // The refused and failed polls changed nothing: no poll holds the queue, nothing more was acknowledged.
    const row = (await queueRow(ctx!.database.db, queueId))!;
    expect([row.poll_id, row.last_acked_id]).toEqual([null, 0]);
    expect(await storedEventIds(ctx!.database.db, queueId)).toEqual([]);
  });

  it('behind a trusted proxy, the organization is the one X-Forwarded-Host names, as for the route', async () => {
    await listening({ TRUST_PROXY: 'true' });
    const queueId = await registerQueue(ctx!.app);
    // An event pending: the polls answer at once.
    expect((await setPinToTop(ctx!.app, true)).statusCode).toBe(200);
    const forwarded = (host: string) => ({ headers: { host: 'internal:9991', 'x-forwarded-host': host } });
    const ours = await expectSameAnswer(poll(queueId, -1), forwarded('chat.example.com'));
    expect([ours.statusCode, ours.body]).toEqual([200, success({ events: [pinEvent(true, 0)] })]);
    expect((await expectSameAnswer(poll(queueId, -1), forwarded('other.chat.example.com'))).body).toBe(
      errorBody('Account is not associated with this subdomain', 'UNAUTHORIZED'),
    );
  });

  it('a waiting poll: answered by a write with queue_id, then by its heartbeat, as the route', async () => {
    await listening({ HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '0', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' });
    const queueId = await registerQueue(ctx!.app);
    const waiting = overSocket(poll(queueId, -1));
    await eventually(async () => (await queueRow(ctx!.database.db, queueId))?.poll_id != null);
    expect((await setPinToTop(ctx!.app, true)).statusCode).toBe(200);
    const delivered = await waiting;
    expect(delivered.statusCode).toBe(200);
    expect(delivered.body).toBe(waited(queueId, [pinEvent(true, 0)]));

    const heartbeat = await overSocket(poll(queueId, 0));
    expect(heartbeat.body).toBe(waited(queueId, [{ type: 'heartbeat', id: 1 }]));
    const route = await throughRoute(poll(queueId, 1));
    expect(route.body).toBe(waited(queueId, [{ type: 'heartbeat', id: 2 }]));
    expect(comparable(heartbeat.headers)).toEqual(comparable(route.headers));
    expect(ctx!.reachedFastify.filter((url) => url.startsWith('/api/v1/events'))).toEqual([poll(queueId, 1)]);
    const row = (await queueRow(ctx!.database.db, queueId))!;
    expect([row.last_acked_id, row.poll_id]).toEqual([1, null]);
  });

  it('an answer above the compression threshold is gzipped for a client that accepts it, as @fastify/compress does', async () => {
    await listening({ COMPRESSION_THRESHOLD_BYTES: '200' });
    const queueId = await registerQueue(ctx!.app);
    for (const value of [true, false, true]) expect((await setPinToTop(ctx!.app, value)).statusCode).toBe(200);
    const events = [pinEvent(true, 0), pinEvent(false, 1), pinEvent(true, 2)];
    for (const accepted of ['gzip, deflate', 'br;q=1, gzip;q=0.5', '*', 'x-gzip']) {
      const gzipped = await expectSameAnswer(poll(queueId, -1), { headers: { 'accept-encoding': accepted } });
      expect(gzipped.headers['content-encoding']).toBe('gzip');
      expect(gzipped.headers.vary).toBe('accept-encoding');
      // Chunked, as the app's compression sends every compressed answer.
      expect([gzipped.headers['content-length'], gzipped.headers['transfer-encoding']]).toEqual([undefined, 'chunked']);
      expect(gzipped.body).toBe(success({ events }));
    }
    const plainHeaders: Record<string, string>[] = [
      {},
      { 'accept-encoding': 'identity' },
      { 'accept-encoding': 'br' },
      { 'accept-encoding': 'gzip', 'x-no-compression': '1' },
    ];
    for (const headers of plainHeaders) {
      const plain = await expectSameAnswer(poll(queueId, -1), { headers });
      expect(plain.headers['content-encoding']).toBeUndefined();
      expect(plain.body).toBe(success({ events }));
    }
  });
});

describe('a plain poll that fails unexpectedly', () => {
  it("gets the route's masked 500, and its error is logged under its request id", async () => {
    await listening();
    const queueId = await registerQueue(ctx!.app);
    // The poll's start reads the queue's events: a failure of no client's making.
    await sql`DROP TABLE events CASCADE`.execute(ctx!.database.db);
    const failed = await expectSameAnswer(poll(queueId, -1), { headers: { 'x-request-id': 'direct-fault' } });
    expect([failed.statusCode, failed.body]).toEqual([500, INTERNAL_ERROR]);
    // The direct poll's two lines, then the route's (the same request id was sent to both).
    const lines = ctx!.lines.filter((line) => line.reqId === 'direct-fault');
    expect(lines.map((line) => line.msg)).toEqual(['unhandled error', 'request completed', 'unhandled error', 'request completed']);
    expect(lines[0]).toMatchObject({ level: 50, err: { message: expect.stringContaining('events') } });
    expect(Object.keys(lines[0]!)).toEqual(Object.keys(lines[2]!));
    expect(lines[1]).toMatchObject({ statusCode: 500, userId: ids.U });
    expect(Object.keys(lines[1]!)).toEqual(Object.keys(lines[3]!));
    // The instance still serves: another request of any kind is answered.
    expect((await overSocket('/api/v1/users/me')).statusCode).toBe(200);
  });
});

describe('what a plain poll leaves to Fastify', () => {
  it('any other shape, a malformed or missing Authorization header, a body', async () => {
    await listening();
    const queueId = await registerQueue(ctx!.app);
    const reached = () => ctx!.reachedFastify.filter((url) => url.startsWith('/api/v1/events'));
    const dontBlock = await overSocket(`/api/v1/events?queue_id=${queueId}&last_event_id=-1&dont_block=true`);
    expect(dontBlock.body).toBe(success({ events: [] }));
    const ignored = await overSocket(`/api/v1/events?queue_id=${queueId}&last_event_id=-1&dont_block=true&narrow=x`);
    expect(ignored.body).toBe(success({ events: [], ignored_parameters_unsupported: ['narrow'] }));
    const malformed = await overSocket(poll(queueId, -1), { headers: { authorization: 'Basic !!!' } });
    expect(malformed.body).toBe(errorBody('Invalid authorization header for basic auth', 'UNAUTHORIZED'));
    const missing = await overSocket(poll(queueId, -1), { headers: { authorization: '' } });
    expect(missing.statusCode).toBe(401);
    expect(reached()).toHaveLength(4);
    // No poll of these holds the queue, and a plain one still does not reach Fastify.
    expect((await queueRow(ctx!.database.db, queueId))!.poll_id).toBeNull();
    expect((await overSocket(poll(queueId, -1).replace('&', '&dont_block=true&'))).statusCode).toBe(200);
    expect(reached()).toHaveLength(5);
  });
});

describe('a plain poll is a request like any other', () => {
  it("a deactivated user's or a rotated key's next poll is refused at once", async () => {
    await listening({ HEARTBEAT_SECONDS: '1', HEARTBEAT_JITTER_SECONDS: '0', EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5' });
    const { db } = ctx!.database;
    const queueId = await registerQueue(ctx!.app);
    expect((await overSocket(poll(queueId, -1))).json().events).toEqual([{ type: 'heartbeat', id: 0 }]);
    await db.updateTable('users').set({ is_active: false }).where('id', '=', ids.U).execute();
    const deactivated = await overSocket(poll(queueId, 0));
    expect([deactivated.statusCode, deactivated.body]).toEqual([401, errorBody('Account is deactivated', 'UNAUTHORIZED')]);
    await db
      .updateTable('users')
      .set({ is_active: true, api_key_hash: hashApiKey('rotated'.padEnd(32, '0')) })
      .where('id', '=', ids.U)
      .execute();
    const rotated = await overSocket(poll(queueId, 0));
    expect([rotated.statusCode, rotated.body]).toEqual([401, errorBody('Invalid API key', 'UNAUTHORIZED')]);
    const row = (await queueRow(db, queueId))!;
    expect([row.last_acked_id, row.poll_id]).toEqual([-1, null]);
  });

  it('counts once towards the rate limit; refused, it answers as the route and starts nothing', async () => {
    await listening({
      HEARTBEAT_SECONDS: '1',
      HEARTBEAT_JITTER_SECONDS: '0',
      EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '5',
      RATE_LIMITING: 'true',
      RATE_LIMIT_MAX_REQUESTS: '4',
      RATE_LIMIT_WINDOW_SECONDS: '60',
    });
    const queueId = await registerQueue(ctx!.app);
    const sentAt = Date.now() / 1000;
    const first = await overSocket(poll(queueId, -1));
    const answeredAt = Date.now() / 1000;
    expect(first.json().events).toEqual([{ type: 'heartbeat', id: 0 }]);
    expect([first.headers['x-ratelimit-limit'], first.headers['x-ratelimit-remaining']]).toEqual(['4', '2']);
    // The window's end: 60 s after the first request counted, which was while the poll was in flight.
    const reset = Number(first.headers['x-ratelimit-reset']);
    expect(reset).toBeGreaterThanOrEqual(Math.floor(sentAt) + 60);
    expect(reset).toBeLessThanOrEqual(Math.ceil(answeredAt) + 60);
    // A plain poll that Fastify serves (a malformed header is refused before it counts) and one it does.
    expect((await overSocket(poll(queueId, 0), { headers: { authorization: 'Basic !!!' } })).statusCode).toBe(401);
    const second = await overSocket(poll(queueId, 0).replace('&', '&dont_block=true&'));
    expect(second.headers['x-ratelimit-remaining']).toBe('1');
    const third = await overSocket(poll(queueId, 0));
    expect([third.body, third.headers['x-ratelimit-remaining']]).toEqual([waited(queueId, [{ type: 'heartbeat', id: 1 }]), '0']);
    const before = ctx!.reachedFastify.length;
    const refusedAt = Date.now();
    const refused = await overSocket(poll(queueId, 1));
    expect(ctx!.reachedFastify.length).toBe(before);
    const route = await throughRoute(poll(queueId, 1));
    const apart = (Date.now() - refusedAt) / 1000;
    // The same answer but for the time left, which the two answers were refused a moment apart.
    expect(refused.statusCode).toBe(route.statusCode);
    const { 'retry-after': directWait, ...directRest } = refused.json();
    const { 'retry-after': routeWait, ...routeRest } = route.json<Record<string, unknown>>();
    expect(Object.keys(refused.json())).toEqual(Object.keys(route.json<object>()));
    expect(directRest).toEqual({ result: 'error', msg: 'API usage exceeded rate limit', code: 'RATE_LIMIT_HIT' });
    expect(routeRest).toEqual(directRest);
    expect(Math.abs((directWait as number) - (routeWait as number))).toBeLessThanOrEqual(Math.ceil(apart) + 1);
    expect(Number(refused.headers['retry-after'])).toBe(directWait);
    // Its length too: the digits of the time left.
    const { 'content-length': directLength, ...directHeaders } = comparable(refused.headers);
    const { 'content-length': _length, ...routeHeaders } = comparable(route.headers);
    expect(directHeaders).toEqual(routeHeaders);
    expect(Number(directLength)).toBe(Buffer.byteLength(refused.body));
    const row = (await queueRow(ctx!.database.db, queueId))!;
    expect([row.last_acked_id, row.poll_id]).toEqual([0, null]);
  });
});

describe("a plain poll's line, metrics, client leaving and shutdown", () => {
  it("writes the route's line: the same fields in the same order", async () => {
    await listening({ METRICS_PORT: '0' });
    const queueId = await registerQueue(ctx!.app);
    expect((await setPinToTop(ctx!.app, true)).statusCode).toBe(200);
    const direct = await overSocket(poll(queueId, -1));
    const route = await throughRoute(poll(queueId, -1));
    const lineOf = async (reqId: string) => {
      await eventually(() => ctx!.lines.some((line) => line.reqId === reqId && line.msg === 'request completed'));
      const found = ctx!.lines.filter((line) => line.reqId === reqId);
      expect(found).toHaveLength(1);
      return found[0]!;
    };
    const directLine = await lineOf(direct.headers['x-request-id'] as string);
    const routeLine = await lineOf(route.headers['x-request-id'] as string);
    expect(Object.keys(directLine)).toEqual(Object.keys(routeLine));
    const { time: _t1, reqId: _r1, responseTimeMs: directTime, ...directRest } = directLine;
    const { time: _t2, reqId: _r2, responseTimeMs: _d2, ...routeRest } = routeLine;
    expect(directRest).toEqual(routeRest);
    expect(directRest).toMatchObject({ method: 'GET', path: '/api/v1/events', userId: ids.U, statusCode: 200, msg: 'request completed' });
    expect(typeof directTime).toBe('number');
    // A load balancer's request id is kept, as the route keeps it.
    const tagged = await overSocket(poll(queueId, -1), { headers: { 'x-request-id': 'lb-1234' } });
    expect(tagged.headers['x-request-id']).toBe('lb-1234');
    expect((await lineOf('lb-1234')).statusCode).toBe(200);

    const text = await ctx!.app.metrics!.registry.metrics();
    const counted = /zulip_http_requests_total\{method="GET",route="\/api\/v1\/events",status_code="200"\} (\d+)/.exec(text);
    expect(Number(counted?.[1])).toBe(3);
  });

  it('a client that leaves ends its poll (the queue is free again) and gets its line, status 499', async () => {
    await listening();
    const queueId = await registerQueue(ctx!.app);
    let sent: http.ClientRequest | undefined;
    const leaving = overSocket(poll(queueId, -1), { onRequest: (request) => (sent = request) }).catch((error: Error) => error);
    await eventually(async () => (await queueRow(ctx!.database.db, queueId))?.poll_id != null);
    sent!.destroy();
    expect(await leaving).toBeInstanceOf(Error);
    await eventually(async () => (await queueRow(ctx!.database.db, queueId))?.poll_id == null);
    await eventually(() => ctx!.lines.some((line) => line.statusCode === 499));
    const line = ctx!.lines.find((entry) => entry.statusCode === 499)!;
    expect(line).toMatchObject({ method: 'GET', path: '/api/v1/events', userId: ids.U, clientLeft: true, msg: 'request completed' });
    expect(Object.keys(line)).toEqual([
      'level',
      'time',
      'pid',
      'hostname',
      'reqId',
      'method',
      'path',
      'userId',
      'statusCode',
      'clientLeft',
      'responseTimeMs',
      'msg',
    ]);
  });

  it('a client that leaves while its poll gathers or authenticates: the poll ends, on either path', async () => {
    await listening();
    const queueIds = [await registerQueue(ctx!.app), await registerQueue(ctx!.app)];
    // The first is plain (direct), the second has a parameter more (Fastify's route); each leaves
    // within the 50 ms its poll waits for others before its authentication.
    const paths = [poll(queueIds[0]!, -1), `${poll(queueIds[1]!, -1)}&narrow=x`];
    const ids = ['left-direct', 'left-route'];
    // The server has the request (its own 'request' listener, which runs first, has taken it).
    const received = new Set<unknown>();
    ctx!.app.server.on('request', (request: http.IncomingMessage) => received.add(request.headers['x-request-id']));
    await Promise.all(
      paths.map(async (path, index) => {
        let sent: http.ClientRequest | undefined;
        const leaving = overSocket(path, { headers: { 'x-request-id': ids[index]! }, onRequest: (request) => (sent = request) });
        void leaving.catch(() => undefined);
        await eventually(() => received.has(ids[index]));
        sent!.destroy();
      }),
    );
    // Each request arrived (its 499 line) ...
    await eventually(() => ids.every((id) => ctx!.lines.some((line) => line.reqId === id && line.statusCode === 499)));
    // ... and no poll holds its queue once the polls have had time to start.
    await new Promise((resolve) => setTimeout(resolve, 500));
    for (const queueId of queueIds) expect((await queueRow(ctx!.database.db, queueId))!.poll_id).toBeNull();
  });

  it('a waiting poll answers when the app closes, with what is pending, closing its connection', async () => {
    await listening();
    const queueId = await registerQueue(ctx!.app);
    // Kept alive: the connection is closed by the server's answer, not by the client's request.
    const agent = new http.Agent({ keepAlive: true });
    const before = await overSocket(poll(queueId, -1).replace('&', '&dont_block=true&'), { agent });
    expect(before.headers.connection).toBe('keep-alive');
    const waiting = overSocket(poll(queueId, -1), { agent });
    await eventually(async () => (await queueRow(ctx!.database.db, queueId))?.poll_id != null);
    const closing = ctx!.app.close();
    const answer = await waiting;
    await closing;
    agent.destroy();
    expect([answer.statusCode, answer.body]).toEqual([200, waited(queueId, [])]);
    expect(answer.headers.connection).toBe('close');
    // Only the dont_block poll went through Fastify.
    expect(ctx!.reachedFastify.filter((url) => url.startsWith('/api/v1/events'))).toEqual([
      poll(queueId, -1).replace('&', '&dont_block=true&'),
    ]);
    await ctx!.database.drop();
    ctx = undefined;
  });
});
