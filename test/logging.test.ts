import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import pg from 'pg';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { buildApp } from '../src/app.js';
import { RequestLogger } from '../src/http/request-log.js';
import { loadConfig } from '../src/config.js';
import { USER_EVENT_LOCK_NAMESPACE } from '../src/db/transactions.js';
import { hashApiKey } from '../src/lib/api-keys.js';
import { api, FIXTURE_ENV, multipart } from './helpers/app.js';
import { createFixtureDatabase, type TestDatabase, userLockWaiters } from './helpers/database.js';
import { errorBody, INTERNAL_ERROR, methodNotAllowed } from './helpers/envelope.js';
import { apiKeys, auth, basicAuth, emails, ids } from './helpers/fixture.js';
import { eventually } from './helpers/wait.js';

// The app's real logger (pino, JSON, level info) writing into memory instead of stdout.
const lines: string[] = [];
const stream = new Writable({
  write(chunk: Buffer, _encoding, done) {
    lines.push(
      ...chunk
        .toString('utf8')
        .split('\n')
        .filter((line) => line !== ''),
    );
    done();
  },
});

let database: TestDatabase;
let app: FastifyInstance;
beforeAll(async () => {
  database = await createFixtureDatabase();
  const config = loadConfig({ ...FIXTURE_ENV, LOG_LEVEL: 'info', DATABASE_URL: database.url });
  app = await buildApp({ config, ...database }, { stream });
  await app.ready();
});
afterAll(async () => {
  await app.close();
  await database.drop();
});

type LogLine = Record<string, unknown>;
const parsed = (): LogLine[] => lines.map((line) => JSON.parse(line) as LogLine);
const linesOf = (reqId: string): LogLine[] => parsed().filter((line) => line.reqId === reqId);
const COMPLETED_KEYS = ['level', 'time', 'pid', 'hostname', 'reqId', 'method', 'path', 'userId', 'statusCode', 'responseTimeMs', 'msg'];

/** onResponse runs once the response is finished: give it a moment to write. */
async function completedLine(reqId: string): Promise<LogLine> {
  const completed = () => linesOf(reqId).filter((line) => line.msg === 'request completed');
  await eventually(() => completed().length > 0);
  expect(completed()).toHaveLength(1);
  return completed()[0]!;
}

describe('request logs', () => {
  it('one JSON line per request: method, path without query, status, time, request id, caller', async () => {
    lines.length = 0;
    const res = await api(app, { url: '/api/v1/users/14?client_gravatar=false', as: 'U', headers: { 'x-request-id': 'lb-req-0001' } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-request-id']).toBe('lb-req-0001');
    const line = await completedLine('lb-req-0001');
    expect(line).toMatchObject({
      level: 30,
      reqId: 'lb-req-0001',
      method: 'GET',
      path: '/api/v1/users/14',
      statusCode: 200,
      userId: 13,
      msg: 'request completed',
    });
    expect(line.responseTimeMs).toEqual(expect.any(Number));
    // Written by the root logger with the request id first (no child logger was made for it):
    // the same line, key for key, as a request's child logger writes (the 500 below).
    expect(Object.keys(line)).toEqual(COMPLETED_KEYS);
    expect(JSON.stringify(line)).not.toContain('client_gravatar');
    // Fastify's own "incoming request" / "request completed" pair is off: this is the only line.
    expect(linesOf('lb-req-0001')).toHaveLength(1);
    expect(lines).toHaveLength(1);
  });

  it('generates a UUID when the load balancer sent no usable request id, and echoes it', async () => {
    lines.length = 0;
    const none = await api(app, { url: '/api/v1/server_settings' });
    const odd = await api(app, { url: '/health', headers: { 'x-request-id': `bad id ${'x'.repeat(200)}` } });
    for (const res of [none, odd]) {
      const id = res.headers['x-request-id'] as string;
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      const line = await completedLine(id);
      expect(line).not.toHaveProperty('userId');
    }
    expect(none.headers['x-request-id']).not.toBe(odd.headers['x-request-id']);
    expect((await completedLine(odd.headers['x-request-id'] as string)).path).toBe('/health');
  });

  it('errors keep the id too: 404 and 405 answers carry it and are logged once', async () => {
    lines.length = 0;
    const missing = await api(app, { url: '/api/v1/nope', headers: { 'x-request-id': 'lb-404' } });
    expect(missing.statusCode).toBe(404);
    expect(missing.headers['x-request-id']).toBe('lb-404');
    expect(await completedLine('lb-404')).toMatchObject({ statusCode: 404, path: '/api/v1/nope' });
    const wrongMethod = await api(app, { method: 'PUT', url: '/api/v1/users/14', headers: { 'x-request-id': 'lb-405' } });
    expect(wrongMethod.statusCode).toBe(405);
    expect(wrongMethod.headers['x-request-id']).toBe('lb-405');
    expect(await completedLine('lb-405')).toMatchObject({ statusCode: 405 });
  });

  it('a body method without Content-Type, on any path and unauthenticated, is a 4xx logged at info, never an error', async () => {
    lines.length = 0;
    const cases: Array<[string, string, number, string]> = [
      // QUERY: Fastify refuses it without a Content-Type (RFC 10008) before any route's handler.
      ['QUERY', '/api/v1/users', 405, methodNotAllowed(['GET', 'HEAD', 'POST'])],
      ['QUERY', '/api/v1/nope', 404, errorBody('Not Found')],
      ['QUERY', '/health', 405, methodNotAllowed(['GET', 'HEAD'])],
      ['QUERY', '/', 404, errorBody('Not Found')],
      ['POST', '/api/v1/users', 401, errorBody('Not logged in: API authentication or user session required', 'UNAUTHORIZED')],
      ['PATCH', '/api/v1/nope', 404, errorBody('Not Found')],
      ['PROPFIND', '/api/v1/users/me', 405, methodNotAllowed(['DELETE', 'GET', 'HEAD'])],
    ];
    for (const [index, [method, url, status, body]] of cases.entries()) {
      const id = `untyped-${index}`;
      const res = await app.inject({
        method: method as 'GET',
        url,
        headers: { host: 'chat.example.com', 'x-request-id': id },
        payload: 'a=b',
      });
      expect(res.statusCode, `${method} ${url}`).toBe(status);
      expect(res.body, `${method} ${url}`).toBe(body);
      expect(await completedLine(id)).toMatchObject({ level: 30, method, statusCode: status });
    }
    expect(parsed().filter((line) => (line.level as number) >= 50)).toEqual([]);
  });

  it('never logs the Authorization header, an API key, its base64 or its hash (success, 4xx, 500)', async () => {
    lines.length = 0;
    const wrongKey = 'Wr0ngKeyWr0ngKeyWr0ngKeyWr0ngKey';
    const requests: Array<{ id: string; status: number; run: () => ReturnType<typeof api> }> = [
      { id: 'ok', status: 200, run: () => api(app, { url: '/api/v1/users/14', as: 'U', headers: { 'x-request-id': 'ok' } }) },
      {
        // A client that puts its key in the query string: only the path is logged.
        id: 'query',
        status: 200,
        run: () => api(app, { url: `/api/v1/users/14?api_key=${apiKeys.U}`, as: 'U', headers: { 'x-request-id': 'query' } }),
      },
      {
        id: 'form',
        status: 400,
        run: () =>
          api(app, {
            method: 'POST',
            url: '/api/v1/navigation_views',
            as: 'U',
            headers: { 'x-request-id': 'form' },
            form: { api_key: apiKeys.U, fragment: ' ' },
          }),
      },
      {
        id: 'wrong-key',
        status: 401,
        run: () =>
          api(app, { url: '/api/v1/users/14', headers: { 'x-request-id': 'wrong-key', authorization: basicAuth(emails.U, wrongKey) } }),
      },
      {
        id: 'bearer',
        status: 400,
        run: () => api(app, { url: '/api/v1/users/14', headers: { 'x-request-id': 'bearer', authorization: `Bearer ${apiKeys.U}` } }),
      },
      {
        id: 'malformed',
        status: 401,
        run: () => api(app, { url: '/api/v1/users/14', headers: { 'x-request-id': 'malformed', authorization: `Basic ${apiKeys.U}` } }),
      },
    ];
    for (const request of requests) {
      const res = await request.run();
      expect(res.statusCode, request.id).toBe(request.status);
      await completedLine(request.id);
    }

    // An unexpected failure after authentication: the 500 is logged with its detail and the request id.
    await sql`DROP TABLE navigation_views CASCADE`.execute(database.db);
    const failed = await api(app, { url: '/api/v1/navigation_views', as: 'U', headers: { 'x-request-id': 'fault' } });
    expect(failed.statusCode).toBe(500);
    expect(failed.body).toBe(INTERNAL_ERROR);
    expect(await completedLine('fault')).toMatchObject({ statusCode: 500, userId: 13 });
    const errorLine = linesOf('fault').find((line) => line.msg === 'unhandled error');
    expect(errorLine).toMatchObject({ level: 50, err: { message: expect.stringContaining('navigation_views') } });
    // The error line made the request's child logger, which then wrote the completion line.
    expect(Object.keys(errorLine!).slice(0, 5)).toEqual(['level', 'time', 'pid', 'hostname', 'reqId']);
    expect(Object.keys(await completedLine('fault'))).toEqual(COMPLETED_KEYS);

    const text = lines.join('\n');
    expect(text).not.toMatch(/authorization/i);
    for (const key of [apiKeys.U, wrongKey]) {
      for (const secret of [key, hashApiKey(key), Buffer.from(key).toString('base64'), basicAuth(emails.U, key).slice('Basic '.length)]) {
        expect(text).not.toContain(secret);
      }
    }
    // Each request logged exactly one completion line, authenticated ones with the caller.
    expect(parsed().filter((line) => line.msg === 'request completed')).toHaveLength(requests.length + 1);
    expect((await completedLine('ok')).userId).toBe(13);
    expect(await completedLine('wrong-key')).not.toHaveProperty('userId');
  });
});

describe('at trace level', () => {
  it('no log line carries the credentials, though plugins log request headers there (multipart’s busboy options)', async () => {
    const traceLines: string[] = [];
    const traceStream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        traceLines.push(
          ...chunk
            .toString('utf8')
            .split('\n')
            .filter((line) => line !== ''),
        );
        done();
      },
    });
    const config = loadConfig({ ...FIXTURE_ENV, LOG_LEVEL: 'trace', DATABASE_URL: database.url });
    const traced = await buildApp({ config, ...database }, { stream: traceStream });
    try {
      await traced.ready();
      const upload = multipart({ subscription_data: '[]' }, { name: 'upload', filename: 'a.bin', content: 'bytes' });
      const responses = [
        await api(traced, { method: 'POST', url: '/api/v1/users/me/subscriptions/properties', as: 'U', ...upload }),
        await api(traced, { method: 'POST', url: '/api/v1/users/me/subscriptions/properties', as: 'U', form: { subscription_data: '[]' } }),
        await api(traced, { url: '/api/v1/users/14', as: 'U' }),
        await api(traced, { url: '/api/v1/users/14', headers: { authorization: `Basic ${apiKeys.U}` } }),
      ];
      expect(responses.map((res) => res.statusCode)).toEqual([200, 200, 200, 401]);
      const busboyLine = traceLines.map((line) => JSON.parse(line) as LogLine).find((line) => line.msg === 'Providing options to busboy');
      expect(busboyLine).toMatchObject({ level: 10, busboyOptions: { headers: { authorization: '[redacted]' } } });
      const text = traceLines.join('\n');
      for (const secret of [
        apiKeys.U,
        hashApiKey(apiKeys.U),
        Buffer.from(apiKeys.U).toString('base64'),
        auth('U'),
        auth('U').slice('Basic '.length),
      ]) {
        expect(text).not.toContain(secret);
      }
    } finally {
      await traced.close();
    }
  });
});

describe('clients that leave', () => {
  it("a client that left before its write's turn is logged as gone (499, info), not as an error or a 500", async () => {
    lines.length = 0;
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    const locker = new pg.Client({ connectionString: database.url });
    await locker.connect();
    try {
      // U's write waits for its user's lock, held here as another instance would hold it.
      await locker.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids.U]);
      const body = `subscription_data=${encodeURIComponent(JSON.stringify([{ stream_id: ids.P, property: 'pin_to_top', value: true }]))}`;
      const socket = net.connect(port, '127.0.0.1');
      await once(socket, 'connect');
      socket.write(
        `POST /api/v1/users/me/subscriptions/properties HTTP/1.1\r\nHost: chat.example.com\r\nAuthorization: ${auth('U')}\r\n` +
          `X-Request-Id: gone-1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      );
      await eventually(async () => (await userLockWaiters(locker, ids.U)) === 1 || linesOf('gone-1').length > 0);
      socket.destroy();
      // The server noticed: the lock's wait was cancelled.
      await eventually(async () => (await userLockWaiters(locker, ids.U)) === 0);
      await locker.query('SELECT pg_advisory_unlock_all()');
      const line = await completedLine('gone-1');
      expect(line).toMatchObject({ level: 30, statusCode: 499, clientLeft: true, userId: ids.U });
      expect(linesOf('gone-1').filter((entry) => (entry.level as number) >= 40)).toEqual([]);
    } finally {
      await locker.query('SELECT pg_advisory_unlock_all()');
      await locker.end();
    }
  });
});

describe('a request logger made on first use', () => {
  it("answers pino's bindings and isLevelEnabled as the child it stands for would, and makes that child only when it logs", () => {
    const written: string[] = [];
    const root = pino({ level: 'info' }, { write: (line: string) => written.push(line) });
    const logger = new RequestLogger(root, { reqId: 'r-1' }, {});
    expect(logger.bindings()).toEqual(root.child({ reqId: 'r-1' }).bindings());
    expect([logger.isLevelEnabled('info'), logger.isLevelEnabled('debug')]).toEqual([true, false]);
    expect(logger.level).toBe('info');
    logger.debug('not written');
    expect(written).toEqual([]);
    logger.warn({ detail: 1 }, 'written');
    expect(JSON.parse(written[0]!)).toMatchObject({ level: 40, reqId: 'r-1', detail: 1, msg: 'written' });
  });
});
