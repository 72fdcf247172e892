import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, createTestContext, multipart, type TestContext } from './helpers/app.js';
import { errorBody, INTERNAL_ERROR, methodNotAllowed } from './helpers/envelope.js';

let ctx: TestContext;
beforeAll(async () => {
  ctx = await createTestContext({
    beforeReady: (app) => {
      // A handler failing unexpectedly (spec case 17).
      app.get('/api/v1/test-fault', async () => {
        throw new Error('secret detail');
      });
      // A route that answers QUERY: Fastify refuses one without a Content-Type before its handler.
      app.route({ method: 'QUERY', url: '/api/v1/test-query', handler: async () => 'answered' });
    },
  });
});
afterAll(() => ctx.close());

const NOT_FOUND = errorBody('Not Found');

describe('routing (docs/api.md §1.1, cases 1–7)', () => {
  it('case 1: unknown paths are 404, with or without credentials, and touch no database', async () => {
    ctx.database.statements.length = 0;
    for (const as of ['U', undefined] as const) {
      for (const url of ['/api/v1/nope', '/api/v2/users', '/nope', '/api/v1//nope', '/api/v1/users/%E0%A4%A']) {
        const res = await api(ctx.app, { url, ...(as && { as }) });
        expect(res.statusCode, url).toBe(404);
        expect(res.body).toBe(NOT_FOUND);
        expect(res.headers['content-type']).toMatch(/^application\/json/);
      }
    }
    expect(ctx.database.statements).toEqual([]);
  });

  it('case 2: a wrong method is 405 with Allow, with or without credentials', async () => {
    for (const as of ['U', undefined] as const) {
      const res = await api(ctx.app, { url: '/api/v1/users/me/subscriptions/properties', ...(as && { as }) });
      expect(res.statusCode).toBe(405);
      expect(res.headers.allow).toBe('POST');
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(res.body).toBe(methodNotAllowed(['POST']));
    }
  });

  it('case 3: method lists are sorted, with HEAD wherever GET is', async () => {
    const cases: [string, string, string[]][] = [
      ['GET', '/api/v1/users/me/subscriptions/100', ['PATCH', 'POST']],
      ['POST', '/api/v1/users/14', ['DELETE', 'GET', 'HEAD', 'PATCH']],
      ['DELETE', '/api/v1/users/u@example.com', ['GET', 'HEAD', 'PATCH']],
      ['DELETE', '/api/v1/navigation_views', ['GET', 'HEAD', 'POST']],
      ['PUT', '/api/v1/users/me/subscriptions', ['DELETE', 'GET', 'HEAD', 'POST']],
      ['POST', '/api/v1/streams/100/members', ['GET', 'HEAD']],
    ];
    for (const [method, url, allowed] of cases) {
      const res = await api(ctx.app, { method, url });
      expect(res.statusCode, `${method} ${url}`).toBe(405);
      expect(res.json().allowed_methods).toEqual(allowed);
      expect(res.headers.allow).toBe(allowed.join(', '));
    }
  });

  it('case 4: OPTIONS lists the methods without credentials; unknown paths stay 404', async () => {
    const res = await api(ctx.app, { method: 'OPTIONS', url: '/api/v1/navigation_views/inbox' });
    expect(res.statusCode).toBe(204);
    expect(res.headers.allow).toBe('DELETE, PATCH');
    expect(res.body).toBe('');
    const unknown = await api(ctx.app, { method: 'OPTIONS', url: '/api/v1/nope' });
    expect(unknown.statusCode).toBe(404);
  });

  it('case 5: /users/ is not a route; /users/me is (GET and DELETE, issue #29), not with other methods', async () => {
    for (const url of ['/api/v1/users/', '/api/v1/users/me/nope', '/api/v1/navigation_views/']) {
      const res = await api(ctx.app, { url, as: 'U' });
      expect(res.statusCode, url).toBe(404);
      expect(res.body).toBe(NOT_FOUND);
    }
    const patchMe = await api(ctx.app, { method: 'PATCH', url: '/api/v1/users/me', as: 'U' });
    expect(patchMe.statusCode).toBe(405);
    expect(patchMe.json().allowed_methods).toEqual(['DELETE', 'GET', 'HEAD']);
  });

  it('repeated slashes collapse to one (as nginx in front of Zulip); a trailing slash still matches nothing', async () => {
    // zulip-js with a server URL ending in "/" sends //api/v1/...
    const settings = await api(ctx.app, { url: '//api/v1/server_settings' });
    expect(settings.statusCode).toBe(200);
    expect(settings.json()).toMatchObject({ result: 'success', realm_url: 'https://chat.example.com' });
    const direct = await api(ctx.app, { url: '/api/v1/users/14', as: 'U' });
    for (const url of ['//api/v1/users/14', '/api/v1//users/14', '/api//v1///users//14']) {
      const res = await api(ctx.app, { url, as: 'U' });
      expect(res.statusCode, url).toBe(200);
      expect(res.body, url).toBe(direct.body);
    }
    // 405 and OPTIONS see the same path.
    const wrongMethod = await api(ctx.app, { method: 'PUT', url: '//api/v1//users/14', as: 'U' });
    expect(wrongMethod.statusCode).toBe(405);
    expect(wrongMethod.headers.allow).toBe('DELETE, GET, HEAD, PATCH');
    const options = await api(ctx.app, { method: 'OPTIONS', url: '/api/v1//navigation_views//inbox' });
    expect(options.statusCode).toBe(204);
    expect(options.headers.allow).toBe('DELETE, PATCH');
    for (const url of ['/api/v1/users/', '//api/v1//users//', '/api/v1/server_settings/', '/api/v1//navigation_views//']) {
      const res = await api(ctx.app, { url, as: 'U' });
      expect(res.statusCode, url).toBe(404);
      expect(res.body, url).toBe(NOT_FOUND);
    }
  });

  it('case 6: a non-numeric channel id is not a route', async () => {
    const res = await api(ctx.app, { method: 'PATCH', url: '/api/v1/users/me/subscriptions/abc', as: 'U' });
    expect(res.statusCode).toBe(404);
    expect(res.body).toBe(NOT_FOUND);
  });

  it('case 7: HEAD answers like GET without a body; authentication applies', async () => {
    const ok = await api(ctx.app, { method: 'HEAD', url: '/api/v1/users/14', as: 'U' });
    expect(ok.statusCode).toBe(200);
    expect(ok.body).toBe('');
    const denied = await api(ctx.app, { method: 'HEAD', url: '/api/v1/users/14' });
    expect(denied.statusCode).toBe(401);
    expect(denied.headers['www-authenticate']).toBe('Basic realm="zulip"');
    expect(denied.body).toBe('');
  });
});

describe('bodies and failures (docs/api.md §1.9, cases 15–17, 19)', () => {
  it('case 15: a body over the limit is 413, before authentication', async () => {
    const big = `subscription_data=${'x'.repeat(2 * 1024 * 1024)}`;
    for (const headers of [
      { 'content-type': 'application/x-www-form-urlencoded' },
      { 'content-type': 'application/json' },
      { 'content-type': 'multipart/form-data; boundary=abc' },
    ]) {
      const res = await api(ctx.app, { method: 'POST', url: '/api/v1/users/me/subscriptions/properties', headers, payload: big });
      expect(res.statusCode, headers['content-type']).toBe(413);
      expect(res.body).toBe(errorBody('Request body too large'));
    }
  });

  it('case 16: a multipart body without its boundary is malformed', async () => {
    const res = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      as: 'U',
      headers: { 'content-type': 'multipart/form-data; boundary=xyz' },
      payload: 'this body never contains the boundary',
    });
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(errorBody('Malformed request body'));
    const noBoundary = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      as: 'U',
      headers: { 'content-type': 'multipart/form-data' },
      payload: 'x',
    });
    expect(noBoundary.statusCode).toBe(400);
    expect(noBoundary.json().msg).toBe('Malformed request body');
  });

  it("Fastify's own 4xx refusals are a 400, not a masked 500: a QUERY without Content-Type", async () => {
    const untyped = await api(ctx.app, { method: 'QUERY', url: '/api/v1/test-query', payload: 'a=b' });
    expect(untyped.statusCode).toBe(400);
    expect(untyped.body).toBe(errorBody('Malformed request'));
    const typed = await api(ctx.app, {
      method: 'QUERY',
      url: '/api/v1/test-query',
      headers: { 'content-type': 'text/plain' },
      payload: 'a=b',
    });
    expect(typed.body).toBe('answered');
  });

  it('file parts of a multipart body are neither parameters nor ignored parameters', async () => {
    const { payload, headers } = multipart({ foo: '1' }, { name: 'upload', filename: 'a.txt', content: 'data' });
    const res = await api(ctx.app, { method: 'POST', url: '/api/v1/navigation_views', as: 'U', headers, payload });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      result: 'error',
      msg: "Missing 'fragment' argument",
      var_name: 'fragment',
      code: 'REQUEST_VARIABLE_MISSING',
    });
  });

  it('case 17: an unexpected failure is a masked 500, logged', async () => {
    const res = await api(ctx.app, { url: '/api/v1/test-fault', as: 'U' });
    expect(res.statusCode).toBe(500);
    expect(res.body).toBe(INTERNAL_ERROR);
    expect(res.body).not.toContain('secret');
  });

  it('case 19: every error body begins with result then msg', async () => {
    const responses = await Promise.all([
      api(ctx.app, { url: '/api/v1/nope' }),
      api(ctx.app, { method: 'POST', url: '/api/v1/users/14' }),
      api(ctx.app, { url: '/api/v1/users/14' }),
      api(ctx.app, { url: '/api/v1/test-fault', as: 'U' }),
      api(ctx.app, { url: '/api/v1/server_settings' }),
    ]);
    for (const res of responses) expect(Object.keys(res.json()).slice(0, 2)).toEqual(['result', 'msg']);
  });

  it('operational endpoints answer without credentials', async () => {
    expect((await api(ctx.app, { url: '/health' })).json()).toEqual({ status: 'ok' });
    expect((await api(ctx.app, { url: '/ready' })).json()).toEqual({ status: 'ready' });
  });
});

describe('hooks', () => {
  /** The hooks Fastify runs for one route, by kind, as its printRoutes lists them. */
  function hooksOf(method: string, url: string): Record<string, number> {
    const lines = ctx.app.printRoutes({ includeHooks: true, commonPrefix: false, method }).split('\n');
    const at = lines.findIndex((line) => line.endsWith(`── ${url} (${method})`));
    expect(at, `${method} ${url}`).toBeGreaterThanOrEqual(0);
    const counts: Record<string, number> = {};
    for (const line of lines.slice(at + 1)) {
      const hook = /• \((\w+)\) (\[.*\])$/.exec(line);
      if (!hook) break;
      counts[hook[1]!] = (JSON.parse(hook[2]!) as string[]).length;
    }
    return counts;
  }

  it('each route runs the hooks it needs and no more: a long poll none of the body hooks', () => {
    const poll = hooksOf('GET', '/api/v1/events');
    // No body to count, time or hold memory for; authentication and the parameters only.
    expect(poll.preParsing).toBeUndefined();
    expect(poll.preHandler).toBe(2);
    const register = hooksOf('POST', '/api/v1/register');
    // The field counter and the body deadline; authentication, the body's memory, the parameters;
    // a large body's turn, taken before it is read and given back with the answer.
    expect(register.preParsing).toBe(2);
    expect(register.preHandler).toBe(3);
    expect(register.onRequest).toBe(poll.onRequest! + 1);
    expect(register.onSend).toBe(poll.onSend! + 2);
    // No credentials needed: the parameters only.
    expect(hooksOf('GET', '/api/v1/server_settings').preHandler).toBe(1);
    // A route with a path parameter refuses an empty one (onRequest), a wildcard's too (printed as `*`
    // under its parent); a route without one has no such check.
    const plain = hooksOf('DELETE', '/api/v1/events').onRequest!;
    expect(hooksOf('DELETE', '*').onRequest).toBe(plain + 1);
    expect(hooksOf('DELETE', '/api/v1/users/:user(^\\d+$)').onRequest).toBe(plain + 1);
  });
});
