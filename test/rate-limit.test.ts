import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { createDatabase } from '../src/db/database.js';
import { api, createTestContext, type TestContext, useTestContext } from './helpers/app.js';
import { errorBody, INTERNAL_ERROR } from './helpers/envelope.js';
import { apiKeys, basicAuth, ids } from './helpers/fixture.js';

// docs/api.md §1.10 and cases 32–37, with docs/api.md's rule of 3 requests per 60 s unless a test says otherwise.
const LIMITED = { RATE_LIMITING: 'true', RATE_LIMIT_MAX_REQUESTS: '3', RATE_LIMIT_WINDOW_SECONDS: '60' };
const RATE_HEADERS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'];

const nowSeconds = () => Date.now() / 1000;

/** The 429 body, `retry-after` after `code`, with R as the server sent it. */
const refusalBody = (retryAfter: number) =>
  JSON.stringify({ result: 'error', msg: 'API usage exceeded rate limit', code: 'RATE_LIMIT_HIT', 'retry-after': retryAfter });

function expectRateLimited(res: LightMyRequestResponse): number {
  expect(res.statusCode).toBe(429);
  const retryAfter = res.json<{ 'retry-after': number }>()['retry-after'];
  expect(typeof retryAfter).toBe('number');
  expect(res.body).toBe(refusalBody(retryAfter));
  expect(res.headers['retry-after']).toBe(String(retryAfter));
  expect(res.headers['x-ratelimit-remaining']).toBe('0');
  return retryAfter;
}

function expectNoRateHeaders(res: LightMyRequestResponse) {
  for (const name of [...RATE_HEADERS, 'retry-after']) expect(res.headers[name], name).toBeUndefined();
}

async function hitsOf(ctx: TestContext, userId: number): Promise<Date[] | undefined> {
  const row = await ctx.db.selectFrom('rate_limit_logs').select('hits').where('user_id', '=', userId).executeTakeFirst();
  return row?.hits;
}

async function allLogs(ctx: TestContext) {
  return ctx.db.selectFrom('rate_limit_logs').selectAll().orderBy('user_id').execute();
}

/** A second server instance on the same database, with its own connection pool. */
async function secondInstance(ctx: TestContext): Promise<{ app: FastifyInstance; close(): Promise<void> }> {
  const handle = createDatabase(ctx.database.url);
  const app = await buildApp({ config: ctx.config, ...handle });
  await app.ready();
  return {
    app,
    close: async () => {
      await app.close();
      await handle.close();
    },
  };
}

const getV = (app: FastifyInstance, query = '') => api(app, { url: `/api/v1/users/14${query}`, as: 'U' });

describe('rate limiting, 3 requests per 60 s (docs/api.md §1.10)', () => {
  const ctx = useTestContext(() => createTestContext({ env: LIMITED }));

  /** Uses up U's three requests. */
  async function exhaustU() {
    for (let i = 0; i < 3; i++) expect((await getV(ctx.app)).statusCode).toBe(200);
  }

  it('case 32: three requests succeed with Limit 3, Remaining 2, 1, 0 and Reset = now + 60', async () => {
    for (const remaining of ['2', '1', '0']) {
      const before = nowSeconds();
      const res = await getV(ctx.app);
      const after = nowSeconds();
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-ratelimit-limit']).toBe('3');
      expect(res.headers['x-ratelimit-remaining']).toBe(remaining);
      const reset = res.headers['x-ratelimit-reset'] as string;
      expect(reset).toMatch(/^\d+$/);
      expect(Number(reset)).toBeGreaterThanOrEqual(Math.floor(before) + 59);
      expect(Number(reset)).toBeLessThanOrEqual(Math.ceil(after) + 60);
    }
    expect(await hitsOf(ctx, ids.U)).toHaveLength(3);
  });

  it('case 33: the fourth is 429 with a fractional retry-after R, header equal to R, Reset = now + R', async () => {
    await exhaustU();
    const before = nowSeconds();
    const res = await getV(ctx.app);
    const after = nowSeconds();
    const retryAfter = expectRateLimited(res);
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(retryAfter).not.toBe(Math.trunc(retryAfter)); // microsecond precision, not rounded
    expect(res.headers['x-ratelimit-limit']).toBe('3');
    const reset = Number(res.headers['x-ratelimit-reset']);
    expect(reset).toBeGreaterThanOrEqual(Math.floor(before + retryAfter) - 1);
    expect(reset).toBeLessThanOrEqual(Math.ceil(after + retryAfter));
    // R is exactly the time until the oldest accepted request leaves the window, on the database clock.
    const expected = await sql<{ r: number }>`
      SELECT extract(epoch FROM hits[1] + interval '60 seconds' - last_checked_at)::float8 AS r
      FROM rate_limit_logs WHERE user_id = ${ids.U}`.execute(ctx.db);
    expect(retryAfter).toBe(expected.rows[0]!.r);
    // A refused request is not counted.
    expect(await hitsOf(ctx, ids.U)).toHaveLength(3);
    const again = expectRateLimited(await getV(ctx.app));
    expect(again).toBeLessThan(retryAfter);
    expect(await hitsOf(ctx, ids.U)).toHaveLength(3);
  });

  it('case 34: a limited user gets 429 before parameter checks; others are unaffected; bad credentials are not counted', async () => {
    await exhaustU();
    const hits = await hitsOf(ctx, ids.U);
    expectRateLimited(await getV(ctx.app, '?client_gravatar=yes'));
    const bulk = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      as: 'U',
      form: { subscription_data: 'nope' },
    });
    expectRateLimited(bulk);
    const write = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      as: 'U',
      form: { subscription_data: JSON.stringify([{ stream_id: ids.P, property: 'pin_to_top', value: true }]) },
    });
    expectRateLimited(write);
    const sub = await ctx.db
      .selectFrom('subscriptions')
      .select('pin_to_top')
      .where('user_id', '=', ids.U)
      .where('stream_id', '=', ids.P)
      .executeTakeFirstOrThrow();
    expect(sub.pin_to_top).toBe(false); // the refused write did not happen

    // Failed authentication, also with V's address: no headers, nothing recorded for anyone.
    const wrongKey = basicAuth('v@example.com', 'k'.repeat(32));
    const refusedAuth = [
      await api(ctx.app, { url: '/api/v1/users/14' }),
      await api(ctx.app, { url: '/api/v1/users/14', headers: { authorization: wrongKey } }),
      await api(ctx.app, { url: '/api/v1/users/14', headers: { authorization: basicAuth('u@example.com', apiKeys.V) } }),
      await api(ctx.app, { url: '/api/v1/users/14', headers: { authorization: 'Bearer abc' } }),
      await api(ctx.app, { url: '/api/v1/users/14', as: 'D' }),
      await api(ctx.app, { url: '/api/v1/users/14', as: 'H' }),
      await api(ctx.app, { url: '/api/v1/users/30', as: 'X' }),
    ];
    expect(refusedAuth.map((res) => res.statusCode)).toEqual([401, 401, 401, 400, 401, 401, 401]);
    for (const res of refusedAuth) expectNoRateHeaders(res);
    expect((await allLogs(ctx)).map((log) => log.user_id)).toEqual([ids.U]);
    expect(await hitsOf(ctx, ids.U)).toEqual(hits);

    // V has a quota of its own, untouched by all of the above.
    const v = await api(ctx.app, { url: '/api/v1/users/13', as: 'V' });
    expect(v.statusCode).toBe(200);
    expect(v.headers['x-ratelimit-remaining']).toBe('2');
  });

  it('case 35: a request with bad parameters still uses quota: 400 with Remaining 2', async () => {
    const res = await getV(ctx.app, '?client_gravatar=yes');
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(errorBody('client_gravatar is not valid JSON'));
    expect(res.headers['x-ratelimit-limit']).toBe('3');
    expect(res.headers['x-ratelimit-remaining']).toBe('2');
    expect(res.headers['x-ratelimit-reset']).toMatch(/^\d+$/);
    expect(await hitsOf(ctx, ids.U)).toHaveLength(1);
    // Endpoint-level 4xx answers carry the headers too.
    const missing = await api(ctx.app, { url: '/api/v1/users/999999', as: 'U' });
    expect(missing.body).toBe(errorBody('No such user'));
    expect(missing.headers['x-ratelimit-remaining']).toBe('1');
  });

  it('case 36: two instances share one count', async () => {
    const other = await secondInstance(ctx);
    try {
      expect((await getV(ctx.app)).headers['x-ratelimit-remaining']).toBe('2');
      expect((await getV(ctx.app)).headers['x-ratelimit-remaining']).toBe('1');
      expect((await getV(other.app)).headers['x-ratelimit-remaining']).toBe('0');
      expectRateLimited(await getV(other.app));
      expectRateLimited(await getV(ctx.app));
    } finally {
      await other.close();
    }
  });

  it('case 37: server_settings is never limited and has no rate-limit headers', async () => {
    await exhaustU();
    for (let i = 0; i < 10; i++) {
      const res = await api(ctx.app, { url: '/api/v1/server_settings', as: 'U' });
      expect(res.statusCode).toBe(200);
      expectNoRateHeaders(res);
    }
    expect(await hitsOf(ctx, ids.U)).toHaveLength(3);
    // Nor are 404, 405, OPTIONS and the operational endpoints.
    for (const [method, url] of [
      ['GET', '/api/v1/nope'],
      ['PUT', '/api/v1/users/14'],
      ['OPTIONS', '/api/v1/users/14'],
      ['GET', '/health'],
    ] as const) {
      expectNoRateHeaders(await api(ctx.app, { method, url, as: 'V' }));
    }
    expect((await allLogs(ctx)).map((log) => log.user_id)).toEqual([ids.U]);
  });

  it('HEAD requests count and carry the headers', async () => {
    const res = await api(ctx.app, { method: 'HEAD', url: '/api/v1/users/14', as: 'U' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-ratelimit-remaining']).toBe('2');
    await getV(ctx.app);
    await getV(ctx.app);
    const refused = await api(ctx.app, { method: 'HEAD', url: '/api/v1/users/14', as: 'U' });
    expect(refused.statusCode).toBe(429);
    expect(refused.body).toBe('');
    expect(refused.headers['x-ratelimit-remaining']).toBe('0');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
  });

  it('a 500 after authentication keeps the headers', async () => {
    await sql`ALTER TABLE navigation_views RENAME TO navigation_views_gone`.execute(ctx.db);
    const res = await api(ctx.app, { url: '/api/v1/navigation_views', as: 'U' });
    expect(res.statusCode).toBe(500);
    expect(res.body).toBe(INTERNAL_ERROR);
    expect(res.headers['x-ratelimit-limit']).toBe('3');
    expect(res.headers['x-ratelimit-remaining']).toBe('2');
  });

  it('adds no SQL statement: the decision rides in the authentication statement', async () => {
    const unlimited = await buildApp({ config: { ...ctx.config, rateLimiting: false }, ...ctx.database });
    try {
      for (const [url, as] of [
        ['/api/v1/users/14', 'M'],
        ['/api/v1/users/me/subscriptions', 'V'],
        ['/api/v1/users/14?client_gravatar=yes', 'G'],
      ] as const) {
        ctx.database.statements.length = 0;
        await api(unlimited, { url, as });
        const baseline = ctx.database.statements.length;
        ctx.database.statements.length = 0;
        await api(ctx.app, { url, as });
        expect(ctx.database.statements.length, url).toBe(baseline);
        expect(
          ctx.database.statements.filter((text) => text.includes('rate_limit_logs')),
          url,
        ).toHaveLength(1);
      }
      // A refusal costs that one statement and nothing else.
      await exhaustU();
      ctx.database.statements.length = 0;
      expectRateLimited(await getV(ctx.app));
      expect(ctx.database.statements).toHaveLength(1);
    } finally {
      await unlimited.close();
    }
  });

  it('with the limit lowered below the recorded requests, R counts from the request that must leave', async () => {
    await exhaustU();
    const lowered = await buildApp({ config: { ...ctx.config, rateLimitMaxRequests: 2 }, ...ctx.database });
    try {
      const res = await getV(lowered);
      const retryAfter = expectRateLimited(res);
      expect(res.headers['x-ratelimit-limit']).toBe('2');
      const expected = await sql<{ r: number }>`
        SELECT extract(epoch FROM hits[2] + interval '60 seconds' - last_checked_at)::float8 AS r
        FROM rate_limit_logs WHERE user_id = ${ids.U}`.execute(ctx.db);
      expect(retryAfter).toBe(expected.rows[0]!.r);
    } finally {
      await lowered.close();
    }
  });
});

describe('rate limiting over a sliding window', () => {
  const ctx = useTestContext(() => createTestContext({ env: LIMITED }));

  /** Seconds from U's last check until its oldest stored request leaves the window (the server's clock). */
  async function untilOldestLeaves(): Promise<number> {
    const { rows } = await sql<{ r: number }>`
      SELECT extract(epoch FROM hits[1] + interval '60 seconds' - last_checked_at)::float8 AS r
      FROM rate_limit_logs WHERE user_id = ${ids.U}`.execute(ctx.db);
    return rows[0]!.r;
  }

  /**
   * Ages U's log so that its oldest stored request leaves the window `seconds` after now, on the
   * database's clock (not after U's last check: real time has passed since); returns by how much.
   */
  async function ageUntilOldestLeavesIn(seconds: number): Promise<number> {
    const { rows } = await sql<{ by: number }>`
      SELECT extract(epoch FROM hits[1] + interval '60 seconds' - now())::float8 - ${seconds}::float8 AS by
      FROM rate_limit_logs WHERE user_id = ${ids.U}`.execute(ctx.db);
    await age(rows[0]!.by);
    return rows[0]!.by;
  }

  /**
   * Ages U's log by `seconds`, as if that much time had passed: the server compares the stored
   * times with the database's clock alone, so no test waits (and no loaded machine skews) a window.
   */
  async function age(seconds: number): Promise<void> {
    const by = sql`make_interval(secs => ${seconds}::float8)`;
    await sql`
      UPDATE rate_limit_logs SET hits = ARRAY(SELECT hit - ${by} FROM unnest(hits) AS hit ORDER BY hit), last_checked_at = last_checked_at - ${by}
      WHERE user_id = ${ids.U}`.execute(ctx.db);
  }

  it('case 33: after R seconds the next request succeeds; the window slides per request', async () => {
    expect((await getV(ctx.app)).headers['x-ratelimit-remaining']).toBe('2');
    await age(30);
    expect((await getV(ctx.app)).headers['x-ratelimit-remaining']).toBe('1');
    expect((await getV(ctx.app)).headers['x-ratelimit-remaining']).toBe('0');
    const retryAfter = expectRateLimited(await getV(ctx.app));
    // Only the first request has to leave: half a window after the others came.
    expect(retryAfter).toBe(await untilOldestLeaves());
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(30);
    const [, second, third] = (await hitsOf(ctx, ids.U))!;
    // Shortly before the first request leaves, the next is still refused. Real time passes too,
    // until the request is checked: 2 s before, counted from now, leave room for a loaded machine.
    const aged = await ageUntilOldestLeavesIn(2);
    expectRateLimited(await getV(ctx.app));
    await age(2);
    const res = await getV(ctx.app);
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-ratelimit-remaining']).toBe('0'); // the two later requests are still in the window
    const hits = (await hitsOf(ctx, ids.U))!;
    expect(hits).toHaveLength(3); // the first request was pruned, refusals never stored
    // The second and third, aged as told (to the millisecond Dates keep).
    expect(Math.abs(hits[0]!.getTime() - (second!.getTime() - (aged + 2) * 1000))).toBeLessThanOrEqual(1);
    expect(Math.abs(hits[1]!.getTime() - (third!.getTime() - (aged + 2) * 1000))).toBeLessThanOrEqual(1);
    // Not a fixed window: the next slot frees when the second request leaves, half a window after the first did.
    const next = expectRateLimited(await getV(ctx.app));
    expect(next).toBe(await untilOldestLeaves());
  });
});

describe('rate limiting under concurrency', () => {
  const ctx = useTestContext(() => createTestContext({ env: { ...LIMITED, RATE_LIMIT_MAX_REQUESTS: '5' } }));

  it('20 simultaneous requests over two instances: exactly 5 accepted', async () => {
    const other = await secondInstance(ctx);
    try {
      const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => getV(i % 2 === 0 ? ctx.app : other.app)));
      const accepted = responses.filter((res) => res.statusCode === 200);
      expect(accepted).toHaveLength(5);
      expect(responses.filter((res) => res.statusCode === 429)).toHaveLength(15);
      expect(accepted.map((res) => res.headers['x-ratelimit-remaining']).sort()).toEqual(['0', '1', '2', '3', '4']);
      expect(await hitsOf(ctx, ids.U)).toHaveLength(5);
    } finally {
      await other.close();
    }
  });

  it('300 simultaneous requests over two instances with a rule of 100: exactly 100 accepted, each remaining count once', async () => {
    const hundred = await createTestContext({ env: { ...LIMITED, RATE_LIMIT_MAX_REQUESTS: '100' } });
    const other = await secondInstance(hundred);
    try {
      const responses = await Promise.all(Array.from({ length: 300 }, (_, i) => getV(i % 2 === 0 ? hundred.app : other.app)));
      const accepted = responses.filter((res) => res.statusCode === 200);
      expect(accepted).toHaveLength(100);
      expect(responses.filter((res) => res.statusCode === 429)).toHaveLength(200);
      const remaining = accepted.map((res) => Number(res.headers['x-ratelimit-remaining'])).sort((a, b) => a - b);
      expect(remaining).toEqual(Array.from({ length: 100 }, (_, i) => i));
      expect(await hitsOf(hundred, ids.U)).toHaveLength(100);
    } finally {
      await other.close();
      await hundred.close();
    }
  });
});

describe('rate limiting disabled (RATE_LIMITING=false)', () => {
  const ctx = useTestContext(() => createTestContext({ env: { RATE_LIMIT_MAX_REQUESTS: '1' } }));

  it('never limits, sends no headers and records nothing', async () => {
    for (let i = 0; i < 5; i++) {
      const res = await getV(ctx.app);
      expect(res.statusCode).toBe(200);
      expectNoRateHeaders(res);
    }
    expect(await allLogs(ctx)).toEqual([]);
  });
});

describe('authentication statements of one turn of the event loop go out together', () => {
  const ctx = useTestContext(() => createTestContext({ env: LIMITED }));

  const batchStatements = () => ctx.database.statements.filter((text) => text.includes('jsonb_to_recordset'));

  it('several users: one statement decides them all, each with its own answer and headers', async () => {
    ctx.database.statements.length = 0;
    const callers = ['O', 'A', 'M', 'V', 'G', 'B'] as const;
    const responses = await Promise.all(callers.map((as) => api(ctx.app, { url: '/api/v1/users/13', as })));
    expect(responses.map((res) => res.statusCode)).toEqual(callers.map(() => 200));
    expect(responses.map((res) => res.headers['x-ratelimit-remaining'])).toEqual(callers.map(() => '2'));
    expect(responses.map((res) => res.json<{ user: { user_id: number } }>().user.user_id)).toEqual(callers.map(() => ids.U));
    expect(batchStatements()).toHaveLength(1);
    expect((await allLogs(ctx)).map((log) => log.user_id)).toEqual([ids.O, ids.A, ids.M, ids.V, ids.G, ids.B]);
  });

  it('one key twice in a turn: the second request goes in a later statement, decided after the first', async () => {
    ctx.database.statements.length = 0;
    const [first, second, other, refusedAuth] = await Promise.all([
      getV(ctx.app),
      getV(ctx.app),
      api(ctx.app, { url: '/api/v1/users/13', as: 'V' }),
      api(ctx.app, { url: '/api/v1/users/13', headers: { authorization: basicAuth('u@example.com', apiKeys.V) } }),
    ]);
    // U's two requests are decided one after the other (which one first depends on the order they
    // reach authentication): remaining 2, then 1.
    expect([first, second].map((res) => res.headers['x-ratelimit-remaining']).sort()).toEqual(['1', '2']);
    expect(other.headers['x-ratelimit-remaining']).toBe('2');
    expect(refusedAuth.statusCode).toBe(401);
    // [U, V], then [U, V's key with U's address]: a repeated key goes in the next batch.
    expect(batchStatements()).toHaveLength(2);
    expect(await hitsOf(ctx, ids.V)).toHaveLength(1); // the refused request was not counted
  });
});

describe('batches of two instances sharing users', () => {
  it('never deadlock: the rows of a batch are taken in user id order', async () => {
    const ctx = await createTestContext({ env: { ...LIMITED, RATE_LIMIT_MAX_REQUESTS: '10000' } });
    const other = await secondInstance(ctx);
    try {
      const ask = (app: FastifyInstance, as: 'U' | 'V' | 'O' | 'A') => api(app, { url: '/api/v1/users/13', as });
      for (let round = 0; round < 40; round++) {
        // Each instance batches the same users, in opposite orders.
        const responses = await Promise.all([
          ask(ctx.app, 'U'),
          ask(ctx.app, 'V'),
          ask(ctx.app, 'O'),
          ask(ctx.app, 'A'),
          ask(other.app, 'A'),
          ask(other.app, 'O'),
          ask(other.app, 'V'),
          ask(other.app, 'U'),
        ]);
        expect(responses.map((res) => res.statusCode)).toEqual(Array(8).fill(200));
      }
    } finally {
      await other.close();
      await ctx.close();
    }
  });
});
