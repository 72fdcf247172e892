import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';
import { api, createTestContext, FIXTURE_ENV, multipart, type TestContext } from './helpers/app.js';
import { errorBody, OK } from './helpers/envelope.js';
import { auth, createQueue, ids } from './helpers/fixture.js';
import { rawPost } from './helpers/http.js';
import { pinP, pinToTopOfP, PROPERTIES_URL } from './helpers/subscriptions.js';

// Request limits (docs/api.md §1.9): body size on every transport, list lengths, and timeouts that cut
// off slow or stuck clients without cutting long polls. Bodies and sockets go through a real port.

const TOO_LARGE = errorBody('Request body too large');
const BODY_LIMIT = 65536;
const SAFETY_NET_MS = 60_000;

function portOf(ctx: TestContext): number {
  return (ctx.app.server.address() as net.AddressInfo).port;
}

/** A POST sent with Transfer-Encoding: chunked (no Content-Length), one chunk per string. */
function chunkedPost(port: number, contentType: string, chunks: string[]): Promise<{ status: number; body: string }> {
  return rawPost({
    port,
    path: PROPERTIES_URL,
    chunks,
    headers: { host: 'chat.example.com', authorization: auth('U'), 'content-type': contentType, 'transfer-encoding': 'chunked' },
  });
}

/**
 * Writes raw bytes on a fresh TCP connection; resolves with what came back, when, and whether the
 * server closed it. Times are only bounded from below (a deadline never cuts early): a loaded
 * machine answers later, so what closed the connection is told by what was received instead.
 */
function rawSocket(port: number, text: string) {
  return new Promise<{ received: string; closedByServer: boolean; closedAfterMs: number; respondedAfterMs: number | undefined }>(
    (resolve, reject) => {
      const startedAt = Date.now();
      let received = '';
      let respondedAfterMs: number | undefined;
      let closedByServer = true;
      const socket = net.connect(port, '127.0.0.1', () => socket.write(text));
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => {
        received += chunk;
        respondedAfterMs ??= Date.now() - startedAt;
      });
      socket.on('error', (error: NodeJS.ErrnoException) => {
        if (error.code !== 'ECONNRESET') reject(error);
      });
      socket.on('close', () => {
        clearTimeout(safetyNet);
        resolve({ received, closedByServer, closedAfterMs: Date.now() - startedAt, respondedAfterMs });
      });
      // A socket the server never closes fails the test instead of hanging it: far past every
      // deadline these tests set (at most 4 s), and short of the request timeouts they must not meet.
      const safetyNet = setTimeout(() => {
        closedByServer = false;
        socket.destroy();
      }, SAFETY_NET_MS);
    },
  );
}

describe('body size limit on every transport (docs/api.md §1.9, BODY_LIMIT_BYTES=64 KiB)', () => {
  let ctx: TestContext;
  let port: number;
  beforeAll(async () => {
    ctx = await createTestContext({ env: { BODY_LIMIT_BYTES: String(BODY_LIMIT) } });
    await ctx.app.listen({ port: 0, host: '127.0.0.1' });
    port = portOf(ctx);
  });
  afterAll(() => ctx.close());

  const big = 'x'.repeat(BODY_LIMIT + 1);
  const half = 'y'.repeat(BODY_LIMIT / 2 + 1);

  it('multipart with one big file part, or one big field, is 413', async () => {
    for (const body of [
      multipart({ subscription_data: pinP }, { name: 'upload', filename: 'a.bin', content: big }),
      multipart({ subscription_data: big }),
    ]) {
      const res = await api(ctx.app, { method: 'POST', url: PROPERTIES_URL, as: 'U', ...body });
      expect(res.statusCode).toBe(413);
      expect(res.body).toBe(TOO_LARGE);
    }
    expect(await pinToTopOfP(ctx)).toBe(false);
  });

  it('a chunked body without Content-Length is 413 once it passes the limit, whatever its type', async () => {
    const file = multipart({ subscription_data: pinP }, { name: 'upload', filename: 'a.bin', content: big });
    const field = multipart({ subscription_data: big });
    // Parts each under the limit, together over it: busboy's per-part limits alone would accept them.
    const twoFields = multipart({ subscription_data: pinP, a: half, b: half });
    const fieldAndFile = multipart({ subscription_data: pinP, a: half }, { name: 'upload', filename: 'a.bin', content: half });
    const cases: [string, string[]][] = [
      ['application/x-www-form-urlencoded', [`subscription_data=${encodeURIComponent(pinP)}&pad=`, big]],
      ['application/json', [big]],
      ['text/plain', [half, half]],
      [file.headers['content-type'], [file.payload]],
      [field.headers['content-type'], [field.payload.slice(0, 1000), field.payload.slice(1000)]],
      [twoFields.headers['content-type'], [twoFields.payload]],
      [fieldAndFile.headers['content-type'], [fieldAndFile.payload]],
    ];
    for (const [contentType, chunks] of cases) {
      const res = await chunkedPost(port, contentType, chunks);
      expect(res.status, contentType).toBe(413);
      expect(res.body).toBe(TOO_LARGE);
    }
    expect(await pinToTopOfP(ctx)).toBe(false);
  });

  it('a chunked multipart body under the limit is parsed as usual', async () => {
    const body = multipart({ subscription_data: pinP }, { name: 'upload', filename: 'a.bin', content: half });
    const res = await chunkedPost(port, body.headers['content-type'], [body.payload.slice(0, 100), body.payload.slice(100)]);
    expect(res).toEqual({ status: 200, body: OK });
    expect(await pinToTopOfP(ctx)).toBe(true);
  });
});

describe('list lengths', () => {
  // No count limit of its own (Zulip has none): the body limit bounds subscription_data
  // (test/subscriptions-bulk-writes.test.ts applies 10,000 entries in one request).
  const entry = { stream_id: ids.P, property: 'pin_to_top', value: true };
  const widest = { stream_id: 2147483647, property: 'wildcard_mentions_notify', value: false };
  const list = (count: number, item: object = entry) => JSON.stringify(Array.from({ length: count }, () => item));
  const defaultLimit = loadConfig({ ...FIXTURE_ENV, AVATAR_SALT: 'x' }).bodyLimitBytes;

  it('10,000 bulk entries fit in the default body limit: any entries as multipart, compact ones urlencoded', () => {
    expect(defaultLimit).toBe(1048576);
    expect(Buffer.byteLength(multipart({ subscription_data: list(10_000, widest) }).payload)).toBeLessThan(defaultLimit);
    const form = new URLSearchParams({ subscription_data: list(10_000) }).toString();
    expect(Buffer.byteLength(form)).toBeLessThan(defaultLimit);
  });

  it('a list too long for the body limit is 413 and changes nothing', async () => {
    const ctx = await createTestContext();
    try {
      const res = await api(ctx.app, { method: 'POST', url: PROPERTIES_URL, as: 'U', form: { subscription_data: list(25_000) } });
      expect(res.statusCode).toBe(413);
      expect(res.body).toBe(TOO_LARGE);
      expect(await pinToTopOfP(ctx)).toBe(false);
    } finally {
      await ctx.close();
    }
  });
});

describe('timeouts (REQUEST_TIMEOUT_SECONDS=1, KEEP_ALIVE_TIMEOUT_SECONDS=1, CONNECTION_TIMEOUT_SECONDS=8)', () => {
  let ctx: TestContext;
  let port: number;
  beforeAll(async () => {
    ctx = await createTestContext({
      env: {
        REQUEST_TIMEOUT_SECONDS: '1',
        KEEP_ALIVE_TIMEOUT_SECONDS: '1',
        CONNECTION_TIMEOUT_SECONDS: '8',
        HEARTBEAT_SECONDS: '2',
        HEARTBEAT_JITTER_SECONDS: '0',
        EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '3',
      },
      beforeReady: (app) => {
        // A handler slower than the request timeout but within the connection timeout, with room
        // for a loaded machine's late timers.
        app.get('/test-slow', async () => {
          await new Promise((resolve) => setTimeout(resolve, 2500));
          return { status: 'slow' };
        });
      },
    });
    await ctx.app.listen({ port: 0, host: '127.0.0.1' });
    port = portOf(ctx);
  });
  afterAll(() => ctx.close());

  it('configures the Node server from the environment', () => {
    expect(ctx.app.server.requestTimeout).toBe(1000);
    expect(ctx.app.server.headersTimeout).toBe(1000);
    expect(ctx.app.server.keepAliveTimeout).toBe(1000);
    expect(ctx.app.server.timeout).toBe(8000);
  });

  it('a client that sends part of its headers and stalls gets 408 and is disconnected', async () => {
    const result = await rawSocket(port, 'GET /api/v1/users/14 HTTP/1.1\r\nHost: chat.example.com\r\n');
    expect(result.received).toMatch(/^HTTP\/1\.1 408 /);
    expect(result.received).toMatch(/\r\n\r\n\{"result":"error","msg":"Request timeout","code":"BAD_REQUEST"\}$/);
    expect(result.closedByServer).toBe(true);
    expect(result.closedAfterMs).toBeGreaterThanOrEqual(900);
  });

  it('a client that stalls in the middle of its body gets 408 and is disconnected', async () => {
    const result = await rawSocket(
      port,
      `POST ${PROPERTIES_URL} HTTP/1.1\r\nHost: chat.example.com\r\nAuthorization: ${auth('U')}\r\n` +
        'Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nsubscription_data=',
    );
    expect(result.received).toMatch(/^HTTP\/1\.1 408 /);
    expect(result.received).toContain('{"result":"error","msg":"Request timeout","code":"BAD_REQUEST"}');
    expect(result.closedByServer).toBe(true);
    expect(result.closedAfterMs).toBeGreaterThanOrEqual(900);
    expect(await pinToTopOfP(ctx)).toBe(false);
  });

  it('oversized headers and unparseable HTTP get the Zulip envelope and a closed connection', async () => {
    const huge = await rawSocket(port, `GET /api/v1/users/14 HTTP/1.1\r\nHost: chat.example.com\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(huge.received).toMatch(/^HTTP\/1\.1 431 /);
    expect(huge.received).toContain('{"result":"error","msg":"Request header fields too large","code":"BAD_REQUEST"}');
    const garbage = await rawSocket(port, 'NOT HTTP AT ALL\r\n\r\n');
    expect(garbage.received).toMatch(/^HTTP\/1\.1 400 /);
    expect(garbage.received).toContain('{"result":"error","msg":"Malformed request","code":"BAD_REQUEST"}');
  });

  it('a connection that never sends anything gets 408 once the request timeout passes, and is closed', async () => {
    const result = await rawSocket(port, '');
    expect(result.received).toMatch(/\r\n\r\n\{"result":"error","msg":"Request timeout","code":"BAD_REQUEST"\}$/);
    expect(result.received).toMatch(/^HTTP\/1\.1 408 /);
    expect(result.closedByServer).toBe(true);
    expect(result.closedAfterMs).toBeGreaterThanOrEqual(900);
  });

  it('an idle keep-alive connection is closed after KEEP_ALIVE_TIMEOUT_SECONDS', async () => {
    const result = await rawSocket(port, 'GET /health HTTP/1.1\r\nHost: chat.example.com\r\nConnection: keep-alive\r\n\r\n');
    expect(result.received).toMatch(/^HTTP\/1\.1 200 /);
    expect(result.received).toContain('{"status":"ok"}');
    expect(result.received).toContain('\r\nKeep-Alive: timeout=1\r\n');
    // Closed without a word: not the request timeout's 408.
    expect(result.received.match(/^HTTP\/1\.1 /gm)).toHaveLength(1);
    expect(result.closedByServer).toBe(true);
    expect(result.closedAfterMs - result.respondedAfterMs!).toBeGreaterThanOrEqual(900);
  });

  it('the request timeout does not cover the time to answer: slow handlers and long polls finish', async () => {
    const slow = await fetch(`http://127.0.0.1:${port}/test-slow`);
    expect(slow.status).toBe(200);
    expect(await slow.json()).toEqual({ status: 'slow' });

    const queueId = await createQueue(ctx.db, 'U');
    const startedAt = Date.now();
    const poll = await fetch(`http://127.0.0.1:${port}/api/v1/events?queue_id=${queueId}&last_event_id=-1`, {
      headers: { host: 'chat.example.com', authorization: auth('U') },
    });
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1900);
    expect(poll.status).toBe(200);
    expect(((await poll.json()) as { events: unknown[] }).events).toEqual([{ type: 'heartbeat', id: 0 }]);
  });
});

describe('timeout configuration', () => {
  const env = { ...FIXTURE_ENV, AVATAR_SALT: 'x' };

  it('defaults: 60 s to send a request, 120 s of silence, 72 s of keep-alive', () => {
    const config = loadConfig(env);
    expect([config.requestTimeoutSeconds, config.connectionTimeoutSeconds, config.keepAliveTimeoutSeconds]).toEqual([60, 120, 72]);
  });

  it('the connection timeout must exceed the long-poll timeout', () => {
    expect(() => loadConfig({ ...env, CONNECTION_TIMEOUT_SECONDS: '90' })).toThrow(ConfigError);
    expect(() => loadConfig({ ...env, CONNECTION_TIMEOUT_SECONDS: '90' })).toThrow(
      /^CONNECTION_TIMEOUT_SECONDS must exceed EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS$/,
    );
    expect(loadConfig({ ...env, CONNECTION_TIMEOUT_SECONDS: '91' }).connectionTimeoutSeconds).toBe(91);
    expect(() => loadConfig({ ...env, REQUEST_TIMEOUT_SECONDS: '0' })).toThrow(/REQUEST_TIMEOUT_SECONDS/);
  });

  it("a request timeout above Node's default (300 s) is the server's, for headers too", async () => {
    // Node refuses a server whose headersTimeout exceeds its requestTimeout when it is made.
    const ctx = await createTestContext({ env: { REQUEST_TIMEOUT_SECONDS: '600' } });
    try {
      expect([ctx.app.server.requestTimeout, ctx.app.server.headersTimeout]).toEqual([600_000, 600_000]);
    } finally {
      await ctx.close();
    }
  });
});

describe('body deadline (BODY_TIMEOUT_SECONDS=1, REQUEST_TIMEOUT_SECONDS=300)', () => {
  let ctx: TestContext;
  let port: number;
  beforeAll(async () => {
    ctx = await createTestContext({ env: { BODY_TIMEOUT_SECONDS: '1', REQUEST_TIMEOUT_SECONDS: '300' } });
    await ctx.app.listen({ port: 0, host: '127.0.0.1' });
    port = portOf(ctx);
  });
  afterAll(() => ctx.close());

  const TIMED_OUT = '{"result":"error","msg":"Request timeout","code":"BAD_REQUEST"}';
  const head = (contentType: string, length: string, authorization = auth('U')) =>
    `POST ${PROPERTIES_URL} HTTP/1.1\r\nHost: chat.example.com\r\nAuthorization: ${authorization}\r\nContent-Type: ${contentType}\r\n${length}\r\n\r\n`;

  // A large body that stops halfway: 408 after about a second, whatever its encoding and with or
  // without credentials; nothing is written. The request timeout would only answer long after the
  // test's safety net closed the socket.
  const stalled: [string, string][] = [
    ['urlencoded', `${head('application/x-www-form-urlencoded', 'Content-Length: 200000')}subscription_data=${'x'.repeat(100_000)}`],
    [
      'urlencoded, no credentials',
      `${head('application/x-www-form-urlencoded', 'Content-Length: 200000', 'Basic bm9uZQ==')}a=${'x'.repeat(100_000)}`,
    ],
    [
      'multipart',
      `${head('multipart/form-data; boundary=b', 'Content-Length: 200000')}--b\r\nContent-Disposition: form-data; name="subscription_data"\r\n\r\n${'x'.repeat(100_000)}`,
    ],
    ['chunked', `${head('application/x-www-form-urlencoded', 'Transfer-Encoding: chunked')}10\r\nsubscription_dat\r\n`],
    // Not a parameter source, read all the same (docs/api.md §1.5): the 408 is sent, the socket not just dropped.
    ['JSON', `${head('application/json', 'Content-Length: 200000')}{"subscription_data":"${'x'.repeat(100_000)}`],
  ];
  it.each(stalled)('%s: 408 at the deadline, connection closed', async (_name, text) => {
    const result = await rawSocket(port, text);
    expect(result.received).toMatch(/^HTTP\/1\.1 408 /);
    expect(result.received.endsWith(`\r\n\r\n${TIMED_OUT}`)).toBe(true);
    expect(result.closedByServer).toBe(true);
    expect(result.closedAfterMs).toBeGreaterThanOrEqual(900);
    expect(await pinToTopOfP(ctx)).toBe(false);
  });

  it('a large body that arrives in time is served', async () => {
    const form = `subscription_data=${encodeURIComponent(pinP)}&padding=${'x'.repeat(70_000)}`;
    const res = await rawPost({
      port,
      path: PROPERTIES_URL,
      chunks: [form.slice(0, 30_000), form.slice(30_000)],
      headers: { host: 'chat.example.com', authorization: auth('U'), 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(res.status).toBe(200);
    expect(await pinToTopOfP(ctx)).toBe(true);
  });
});
