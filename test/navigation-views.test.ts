import { describe, expect, it } from 'vitest';
import { api, useSharedTestContext } from './helpers/app.js';
import { errorBody, methodNotAllowed, missingArgument, OK, success } from './helpers/envelope.js';
import { createQueue, ids, queueEvents } from './helpers/fixture.js';
import {
  BUILT_IN_NAMED,
  BUILT_INS,
  createViewsContext,
  eventsOf,
  EXISTS,
  expectRefused,
  list,
  post,
  seedViews,
  storedViews,
} from './helpers/navigation-views.js';
import { waitForLockWaiter } from './helpers/database.js';

// Shared by the tests that only read; those that write take their own.
const ctx = useSharedTestContext(createViewsContext);

const addEvent = (fragment: string, isPinned: boolean, name: string | null, id: number) => ({
  type: 'navigation_view',
  op: 'add',
  navigation_view: { fragment, is_pinned: isPinned, name },
  id,
});

describe('routing of /api/v1/navigation_views', () => {
  it('case 4: OPTIONS on a fragment path answers 204 with Allow, no body, without credentials', async () => {
    const res = await api(ctx.app, { method: 'OPTIONS', url: '/api/v1/navigation_views/inbox' });
    expect(res.statusCode).toBe(204);
    expect(res.headers.allow).toBe('DELETE, PATCH');
    expect(res.body).toBe('');
    const collection = await api(ctx.app, { method: 'OPTIONS', url: '/api/v1/navigation_views' });
    expect(collection.statusCode).toBe(204);
    expect(collection.headers.allow).toBe('GET, HEAD, POST');
  });

  it('wrong methods are 405 and an empty fragment is 404, before authentication', async () => {
    const put = await api(ctx.app, { method: 'PUT', url: '/api/v1/navigation_views/narrow/x' });
    expect(put.statusCode).toBe(405);
    expect(put.headers.allow).toBe('DELETE, PATCH');
    expect(put.body).toBe(methodNotAllowed(['DELETE', 'PATCH']));
    const del = await api(ctx.app, { method: 'DELETE', url: '/api/v1/navigation_views' });
    expect(del.json()).toEqual({ result: 'error', msg: 'Method Not Allowed', allowed_methods: ['GET', 'HEAD', 'POST'] });
    const empty = await api(ctx.app, { method: 'DELETE', url: '/api/v1/navigation_views/' });
    expect(empty.statusCode).toBe(404);
    expect(empty.body).toBe(errorBody('Not Found'));
  });

  it('every method needs credentials', async () => {
    await ctx.ownDatabase();
    await seedViews(ctx, 'U', [{ fragment: 'recent', is_pinned: true, name: null }]);
    for (const [method, url] of [
      ['GET', '/api/v1/navigation_views'],
      ['POST', '/api/v1/navigation_views'],
      ['PATCH', '/api/v1/navigation_views/recent'],
      ['DELETE', '/api/v1/navigation_views/recent'],
    ] as const) {
      await expectRefused(
        ctx,
        () => api(ctx.app, { method, url, form: { fragment: 'x', is_pinned: 'true', name: 'x' } }),
        401,
        errorBody('Not logged in: API authentication or user session required', 'UNAUTHORIZED'),
      );
    }
  });
});

describe('GET /api/v1/navigation_views', () => {
  it('case 120: a new user has no views', async () => {
    const res = await list(ctx);
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(success({ navigation_views: [] }));
  });

  it('case 147: lists the views in creation order', async () => {
    await ctx.ownDatabase();
    expect((await post(ctx, { fragment: 'feed', is_pinned: 'true' })).statusCode).toBe(200);
    expect((await post(ctx, { fragment: 'inbox', is_pinned: 'false' })).statusCode).toBe(200);
    expect((await post(ctx, { fragment: 'narrow/x', is_pinned: 'true', name: 'X' })).statusCode).toBe(200);
    const res = await list(ctx);
    expect(res.body).toBe(
      success({
        navigation_views: [
          { fragment: 'feed', is_pinned: true, name: null },
          { fragment: 'inbox', is_pinned: false, name: null },
          { fragment: 'narrow/x', is_pinned: true, name: 'X' },
        ],
      }),
    );
  });

  it('case 149: reports unknown query parameters, not client', async () => {
    const res = await list(ctx, 'U', '?foo=1&client=x');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(success({ navigation_views: [], ignored_parameters_unsupported: ['foo'] }));
  });

  it("shows only the caller's own views (same and other organization)", async () => {
    await ctx.ownDatabase();
    await seedViews(ctx, 'V', [
      { fragment: 'recent', is_pinned: true, name: null },
      { fragment: 'narrow/v', is_pinned: false, name: 'Vs' },
    ]);
    await seedViews(ctx, 'X', [{ fragment: 'narrow/x', is_pinned: true, name: 'Xs' }]);
    await seedViews(ctx, 'U', [{ fragment: 'inbox', is_pinned: false, name: null }]);
    expect((await list(ctx)).json().navigation_views).toEqual([{ fragment: 'inbox', is_pinned: false, name: null }]);
    expect((await list(ctx, 'V')).json().navigation_views).toEqual([
      { fragment: 'recent', is_pinned: true, name: null },
      { fragment: 'narrow/v', is_pinned: false, name: 'Vs' },
    ]);
    const x = await api(ctx.app, { url: '/api/v1/navigation_views', as: 'X', host: 'other.chat.example.com' });
    expect(x.json().navigation_views).toEqual([{ fragment: 'narrow/x', is_pinned: true, name: 'Xs' }]);
  });

  it('answers HEAD without a body', async () => {
    const res = await api(ctx.app, { method: 'HEAD', url: '/api/v1/navigation_views', as: 'U' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('');
  });
});

describe('POST /api/v1/navigation_views', () => {
  it('case 121: adds a built-in view and announces it to the caller', async () => {
    await ctx.ownDatabase();
    const res = await post(ctx, { fragment: 'recent', is_pinned: 'true' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect((await list(ctx)).body).toBe(success({ navigation_views: [{ fragment: 'recent', is_pinned: true, name: null }] }));
    const events = await eventsOf(ctx, ctx.queueU);
    expect(JSON.stringify(events)).toBe(JSON.stringify([addEvent('recent', true, null, 0)]));
  });

  it('case 122: a built-in view cannot have a name', async () => {
    await expectRefused(ctx, () => post(ctx, { fragment: 'recent', is_pinned: 'true', name: 'foo' }), 400, BUILT_IN_NAMED);
    expect(await storedViews(ctx, 'U')).toEqual([]);
  });

  it('case 123: a blank fragment is refused', async () => {
    await expectRefused(ctx, () => post(ctx, { fragment: '', is_pinned: 'true', name: 'foo' }), 400, errorBody('fragment cannot be blank'));
    await expectRefused(ctx, () => post(ctx, { fragment: '  ', is_pinned: 'true' }), 400, errorBody('fragment cannot be blank'));
  });

  it('case 124: a custom view needs a name', async () => {
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: 'narrow/view', is_pinned: 'true' }),
      400,
      errorBody('Custom views must have a valid name.'),
    );
  });

  it('case 125: a blank name is refused', async () => {
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: 'narrow/view', is_pinned: 'true', name: '' }),
      400,
      errorBody('name cannot be blank'),
    );
    // Parsing comes before the built-in check.
    await expectRefused(ctx, () => post(ctx, { fragment: 'inbox', is_pinned: 'true', name: ' ' }), 400, errorBody('name cannot be blank'));
  });

  it('case 126: fragment and name are trimmed before storing and announcing', async () => {
    await ctx.ownDatabase();
    const res = await post(ctx, { fragment: ' narrow/view ', is_pinned: 'false', name: ' foo ' });
    expect(res.body).toBe(OK);
    expect(await storedViews(ctx, 'U')).toEqual([{ fragment: 'narrow/view', is_pinned: false, name: 'foo' }]);
    expect(JSON.stringify(await eventsOf(ctx, ctx.queueU))).toBe(JSON.stringify([addEvent('narrow/view', false, 'foo', 0)]));
  });

  it('case 127: a fragment the caller already has is refused', async () => {
    await ctx.ownDatabase();
    expect((await post(ctx, { fragment: 'recent', is_pinned: 'true' })).statusCode).toBe(200);
    await expectRefused(ctx, () => post(ctx, { fragment: 'recent', is_pinned: 'false' }), 400, EXISTS);
    // Compared after trimming.
    await expectRefused(ctx, () => post(ctx, { fragment: ' recent', is_pinned: 'false' }), 400, EXISTS);
    expect(await storedViews(ctx, 'U')).toEqual([{ fragment: 'recent', is_pinned: true, name: null }]);
  });

  it('case 128: a name the caller already uses is refused', async () => {
    await ctx.ownDatabase();
    expect((await post(ctx, { fragment: ' narrow/view ', is_pinned: 'false', name: ' foo ' })).statusCode).toBe(200);
    await expectRefused(ctx, () => post(ctx, { fragment: 'narrow/is/attachment', is_pinned: 'true', name: 'foo' }), 400, EXISTS);
    await expectRefused(ctx, () => post(ctx, { fragment: 'narrow/view', is_pinned: 'true', name: 'foo' }), 400, EXISTS);
  });

  it('names and fragments are compared exactly (case-sensitive)', async () => {
    await ctx.ownDatabase();
    await seedViews(ctx, 'U', [{ fragment: 'narrow/view', is_pinned: true, name: 'foo' }]);
    expect((await post(ctx, { fragment: 'narrow/other', is_pinned: 'true', name: 'Foo' })).body).toBe(OK);
    expect((await post(ctx, { fragment: 'Narrow/View', is_pinned: 'true', name: 'bar' })).body).toBe(OK);
    expect((await storedViews(ctx, 'U')).map((view) => view.name)).toEqual(['foo', 'Foo', 'bar']);
  });

  it("another user's fragment or name does not clash", async () => {
    await ctx.ownDatabase();
    await seedViews(ctx, 'V', [
      { fragment: 'narrow/view', is_pinned: true, name: 'foo' },
      { fragment: 'recent', is_pinned: true, name: null },
    ]);
    expect((await post(ctx, { fragment: 'narrow/view', is_pinned: 'false', name: 'foo' })).body).toBe(OK);
    expect((await post(ctx, { fragment: 'recent', is_pinned: 'false' })).body).toBe(OK);
    expect(await storedViews(ctx, 'V')).toEqual([
      { fragment: 'narrow/view', is_pinned: true, name: 'foo' },
      { fragment: 'recent', is_pinned: true, name: null },
    ]);
    expect(await eventsOf(ctx, ctx.queueV)).toEqual([]);
  });

  it('case 129: missing parameters, in table order', async () => {
    await expectRefused(ctx, () => post(ctx, { fragment: 'recent' }), 400, missingArgument('is_pinned'));
    await expectRefused(ctx, () => post(ctx, {}), 400, missingArgument('fragment'));
  });

  it('case 130: is_pinned must be a JSON boolean', async () => {
    await expectRefused(ctx, () => post(ctx, { fragment: 'recent', is_pinned: 'maybe' }), 400, errorBody('is_pinned is not valid JSON'));
    await expectRefused(ctx, () => post(ctx, { fragment: 'recent', is_pinned: '1' }), 400, errorBody('is_pinned is not a boolean'));
    await expectRefused(ctx, () => post(ctx, { fragment: 'recent', is_pinned: '"true"' }), 400, errorBody('is_pinned is not a boolean'));
  });

  it('case 131: every built-in fragment, exactly as spelled', async () => {
    await ctx.ownDatabase();
    for (const fragment of BUILT_INS) {
      await expectRefused(ctx, () => post(ctx, { fragment, is_pinned: 'true', name: 'x' }), 400, BUILT_IN_NAMED);
      expect((await post(ctx, { fragment, is_pinned: 'true' })).body).toBe(OK);
    }
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: 'Inbox', is_pinned: 'true' }),
      400,
      errorBody('Custom views must have a valid name.'),
    );
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: 'narrow/is/starred/', is_pinned: 'true' }),
      400,
      errorBody('Custom views must have a valid name.'),
    );
    expect((await storedViews(ctx, 'U')).map((view) => view.fragment)).toEqual(BUILT_INS);
    expect((await eventsOf(ctx, ctx.queueU)).map((event) => event.id)).toEqual(BUILT_INS.map((_, index) => index));
  });

  it('case 132: fragment and name are limited to 500 characters, counted in code points after trimming', async () => {
    await ctx.ownDatabase();
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: 'f'.repeat(501), is_pinned: 'true', name: 'n' }),
      400,
      errorBody('fragment is too long (limit: 500 characters)'),
    );
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: 'narrow/x', is_pinned: 'true', name: 'n'.repeat(501) }),
      400,
      errorBody('name is too long (limit: 500 characters)'),
    );
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: '😀'.repeat(501), is_pinned: 'true', name: 'n' }),
      400,
      errorBody('fragment is too long (limit: 500 characters)'),
    );
    const longest = 'f'.repeat(500);
    expect((await post(ctx, { fragment: longest, is_pinned: 'true', name: 'a' })).body).toBe(OK);
    expect((await post(ctx, { fragment: ` ${'😀'.repeat(500)} `, is_pinned: 'true', name: ` ${'é'.repeat(500)} ` })).body).toBe(OK);
    expect(await storedViews(ctx, 'U')).toEqual([
      { fragment: longest, is_pinned: true, name: 'a' },
      { fragment: '😀'.repeat(500), is_pinned: true, name: 'é'.repeat(500) },
    ]);
  });

  it('a NUL character, which PostgreSQL text cannot hold, is a 400 rather than a 500', async () => {
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: 'a\u0000b', is_pinned: 'true', name: 'n' }),
      400,
      errorBody('fragment cannot contain NUL characters'),
    );
    await expectRefused(
      ctx,
      () => post(ctx, { fragment: 'narrow/x', is_pinned: 'true', name: 'n\u0000' }),
      400,
      errorBody('name cannot contain NUL characters'),
    );
  });

  it('reports unknown parameters on success; the query string is a source too', async () => {
    await ctx.ownDatabase();
    const res = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/navigation_views?name=Q&zeta=1',
      as: 'U',
      form: { fragment: 'narrow/q', is_pinned: 'true', client: 'app', alpha: '2' },
    });
    expect(res.body).toBe(success({ ignored_parameters_unsupported: ['alpha', 'zeta'] }));
    expect(await storedViews(ctx, 'U')).toEqual([{ fragment: 'narrow/q', is_pinned: true, name: 'Q' }]);
  });

  it('writes with a constant number of statements: auth; then BEGIN, the lock, the checked insert with its event and COMMIT in one burst', async () => {
    await ctx.ownDatabase();
    for (const name of ['short', 'n'.repeat(500)]) {
      ctx.database.statements.length = 0;
      expect((await post(ctx, { fragment: `narrow/${name.length}`, is_pinned: 'true', name })).statusCode).toBe(200);
      expect(ctx.database.statements).toHaveLength(5);
      expect(ctx.database.statements.slice(1, 3)).toEqual(['BEGIN', 'SELECT user_lock_now($1, $2)']); // a small write's: refused, not waited for, when held
    }
  });

  it('events go to every queue of the caller that accepts them, and to nobody else', async () => {
    await ctx.ownDatabase();
    const secondU = await createQueue(ctx.db, 'U');
    const otherTypes = await createQueue(ctx.db, 'U', ['subscription']);
    const onlyViews = await createQueue(ctx.db, 'U', ['navigation_view']);
    await post(ctx, { fragment: 'inbox', is_pinned: 'true' });
    const expected = JSON.stringify([addEvent('inbox', true, null, 0)]);
    for (const queue of [ctx.queueU, secondU, onlyViews]) expect(JSON.stringify(await queueEvents(ctx.db, queue))).toBe(expected);
    expect(await queueEvents(ctx.db, otherTypes)).toEqual([]);
    expect(await queueEvents(ctx.db, ctx.queueV)).toEqual([]);
  });
});

describe('POST /api/v1/navigation_views under concurrency', () => {
  it('concurrent adds of the same name: exactly one succeeds', async () => {
    await ctx.ownDatabase();
    const responses = await Promise.all(
      Array.from({ length: 6 }, (_, index) => post(ctx, { fragment: `narrow/${index}`, is_pinned: 'true', name: 'same' })),
    );
    const statuses = responses.map((res) => res.statusCode).sort();
    expect(statuses).toEqual([200, 400, 400, 400, 400, 400]);
    for (const res of responses.filter((r) => r.statusCode === 400)) expect(res.body).toBe(EXISTS);
    expect(await storedViews(ctx, 'U')).toHaveLength(1);
    expect(await eventsOf(ctx, ctx.queueU)).toHaveLength(1);
  });

  it('a unique violation from the database (a writer that skipped the lock) becomes "already exists"', async () => {
    await ctx.ownDatabase();
    // An uncommitted row with the same name makes the request's INSERT wait on the unique index;
    // committing it then makes that INSERT fail with SQLSTATE 23505.
    let pending: ReturnType<typeof post> | undefined;
    await ctx.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('navigation_views')
        .values({ realm_id: ids.R, user_id: ids.U, fragment: 'narrow/raw', is_pinned: true, name: 'dup' })
        .execute();
      pending = post(ctx, { fragment: 'narrow/api', is_pinned: 'true', name: 'dup' });
      await waitForLockWaiter(ctx.db);
    });
    const res = await pending!;
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(EXISTS);
    expect(await storedViews(ctx, 'U')).toEqual([{ fragment: 'narrow/raw', is_pinned: true, name: 'dup' }]);
    expect(await eventsOf(ctx, ctx.queueU)).toEqual([]);
  });
});
