import * as crypto from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { apiKeyDigest, hashApiKey, storedDigestMatches } from '../src/lib/api-keys.js';
import { api, type ApiRequest, createTestContext, type TestContext, useTestContext } from './helpers/app.js';
import { badQueueBody, errorBody, OK, success } from './helpers/envelope.js';
import { apiKeys, basicAuth, createQueue, emails, type FixtureUser, ids, queueEvents } from './helpers/fixture.js';

// Pass-through spy: proves the key comparison goes through crypto.timingSafeEqual.
vi.mock('node:crypto', async (importOriginal) => {
  const original = await importOriginal<typeof import('node:crypto')>();
  return { ...original, timingSafeEqual: vi.fn(original.timingSafeEqual) };
});

/**
 * Isolation (docs/api.md §1.3, docs/api.md §2.7–§2.10, design "Data"): no endpoint reads or writes another
 * organization's data or another user's private data; SQL metacharacters in every string
 * parameter and path segment are stored and compared literally; API keys are stored only hashed
 * and compared in constant time.
 */

const OTHER_HOST = 'other.chat.example.com';

/** A request as a fixture user; X always talks to its own organization's host. */
function send(ctx: TestContext, as: FixtureUser, request: Omit<ApiRequest, 'as'>): Promise<LightMyRequestResponse> {
  return api(ctx.app, { ...request, as, ...(as === 'X' && request.host === undefined && { host: OTHER_HOST }) });
}

/**
 * Every row that belongs to an organization (by realm) or to one user, as JSON text: what a request
 * of somebody else must never change.
 */
async function rowsOf(ctx: TestContext, scope: { realm: number } | { user: number }): Promise<string> {
  const byRealm = 'realm' in scope;
  const id = byRealm ? scope.realm : scope.user;
  const owner = (column: string) => (byRealm ? 't.realm_id = $1' : `t.${column} = $1`);
  const { rows } = await ctx.database.pool.query<{ state: string }>(
    `SELECT json_build_object(
      'users', (SELECT json_agg(t ORDER BY t.id) FROM users t WHERE ${byRealm ? 't.realm_id = $1' : 't.id = $1'}),
      'streams', (SELECT json_agg(t ORDER BY t.id) FROM streams t WHERE ${byRealm ? 't.realm_id = $1' : 'false'}),
      'subscriptions', (SELECT json_agg(t ORDER BY t.user_id, t.stream_id) FROM subscriptions t WHERE ${owner('user_id')}),
      'audit', (SELECT json_agg(t ORDER BY t.id) FROM subscription_audit_log t WHERE ${owner('acting_user_id')}),
      'navigation_views', (SELECT json_agg(t ORDER BY t.id) FROM navigation_views t WHERE ${owner('user_id')}),
      'event_queues', (SELECT json_agg(t ORDER BY t.id) FROM event_queues t WHERE ${owner('user_id')}),
      'events', (SELECT json_agg(e ORDER BY e.queue_id, e.id) FROM events e JOIN event_queues t ON t.id = e.queue_id WHERE ${owner('user_id')})
    )::text AS state`,
    [id],
  );
  return rows[0]!.state;
}

/** Runs `act` and asserts the rows of `scope` are exactly as before. */
async function leavesUntouched<T>(ctx: TestContext, scope: { realm: number } | { user: number }, act: () => Promise<T>): Promise<T> {
  const before = await rowsOf(ctx, scope);
  const result = await act();
  expect(await rowsOf(ctx, scope)).toBe(before);
  return result;
}

interface Seeded {
  ctx: TestContext;
  queueU: string;
  queueV: string;
  queueX: string;
}

/**
 * The fixture plus private data: U has two navigation views, changed P settings and a queue with
 * events; V and X have queues; X has a view of its own.
 */
async function seeded(): Promise<Seeded> {
  const ctx = await createTestContext();
  const queueU = await createQueue(ctx.db, 'U');
  const queueV = await createQueue(ctx.db, 'V');
  const queueX = await createQueue(ctx.db, 'X');
  const setup: [FixtureUser, ApiRequest][] = [
    ['U', { method: 'POST', url: '/api/v1/navigation_views', form: { fragment: 'inbox', is_pinned: 'true' } }],
    ['U', { method: 'POST', url: '/api/v1/navigation_views', form: { fragment: 'narrow/secret', is_pinned: 'false', name: 'Secret' } }],
    [
      'U',
      {
        method: 'POST',
        url: '/api/v1/users/me/subscriptions/properties',
        form: {
          subscription_data: JSON.stringify([
            { stream_id: 100, property: 'color', value: '#123456' },
            { stream_id: 100, property: 'pin_to_top', value: true },
          ]),
        },
      },
    ],
    ['X', { method: 'POST', url: '/api/v1/navigation_views', form: { fragment: 'narrow/x', is_pinned: 'true', name: 'Xview' } }],
  ];
  for (const [as, request] of setup) expect((await send(ctx, as, request)).body).toBe(OK);
  expect(await queueEvents(ctx.db, queueU)).toHaveLength(4);
  return { ctx, queueU, queueV, queueX };
}

const REALM_1_NAMES = ['owner@example.com', 'u@example.com', 'v@example.com', 'U Member', 'Secret', '#123456', 'Example', 'Our team'];

function expectNoRealm1Data(body: string): void {
  for (const text of REALM_1_NAMES) expect(body).not.toContain(text);
}

describe('organizations are isolated: X (realm 2) against realm 1, every endpoint', () => {
  let s: Seeded;
  beforeAll(async () => {
    s = await seeded();
  });
  afterAll(() => s.ctx.close());
  const realm1 = { realm: ids.R };
  /** A request of X, asserting that nothing of realm 1 changed; and one of U, for realm 2. */
  const xAlone = (request: Omit<ApiRequest, 'as'>) => leavesUntouched(s.ctx, realm1, () => send(s.ctx, 'X', request));
  const uAlone = (request: Omit<ApiRequest, 'as'>) => leavesUntouched(s.ctx, { realm: ids.R2 }, () => send(s.ctx, 'U', request));

  it("GET /server_settings on X's host names X's organization only", async () => {
    const res = await leavesUntouched(s.ctx, realm1, () => api(s.ctx.app, { url: '/api/v1/server_settings', host: OTHER_HOST }));
    expect(res.json()).toMatchObject({ realm_url: 'https://other.chat.example.com', realm_name: 'Other', realm_description: '' });
    expectNoRealm1Data(res.body);
  });

  it("X's credentials are refused on realm 1's host", async () => {
    const res = await xAlone({ url: '/api/v1/users', host: 'chat.example.com' });
    expect(res.statusCode).toBe(401);
    expect(res.body).toBe(errorBody('Account is not associated with this subdomain', 'UNAUTHORIZED'));
  });

  it("GET /users lists X's organization only", async () => {
    const res = await xAlone({ url: '/api/v1/users?include_custom_profile_fields=true' });
    expect(res.statusCode).toBe(200);
    expect(res.json().members.map((member: { user_id: number }) => member.user_id)).toEqual([ids.X]);
    expectNoRealm1Data(res.body);
  });

  it('GET /users/{id | email} never finds a realm-1 user, by id, address or dummy address', async () => {
    for (const target of [
      '10',
      '13',
      '14',
      '16',
      '18',
      'u@example.com',
      'V@EXAMPLE.COM',
      'b-bot@chat.example.com',
      'user13@other.chat.example.com',
      'user14@chat.example.com',
    ]) {
      const res = await xAlone({ url: `/api/v1/users/${encodeURIComponent(target)}` });
      expect(res.body, target).toBe(errorBody('No such user'));
    }
  });

  it('and U never finds X', async () => {
    for (const target of ['30', 'x@example.com', 'user30@chat.example.com', 'user30@other.chat.example.com']) {
      const res = await uAlone({ url: `/api/v1/users/${target}` });
      expect(res.body, target).toBe(errorBody('No such user'));
    }
    const list = await send(s.ctx, 'U', { url: '/api/v1/users' });
    expect(list.json().members.map((member: { user_id: number }) => member.user_id)).not.toContain(ids.X);
    expect(list.body).not.toContain('x@example.com');
  });

  it("GET /users/me/subscriptions shows X's own channel only, with its own subscribers", async () => {
    const res = await xAlone({ url: '/api/v1/users/me/subscriptions?include_subscribers=true' });
    const subscriptions = res.json().subscriptions as { stream_id: number; subscribers: number[] }[];
    expect(subscriptions.map((sub) => [sub.stream_id, sub.subscribers])).toEqual([[ids.C2, [ids.X]]]);
  });

  it('bulk and single setting updates cannot reach realm-1 channels (whatever their kind)', async () => {
    for (const streamId of [ids.P, ids.Q, ids.S, ids.Z, ids.W]) {
      const bulk = await xAlone({
        method: 'POST',
        url: '/api/v1/users/me/subscriptions/properties',
        form: { subscription_data: JSON.stringify([{ stream_id: streamId, property: 'pin_to_top', value: true }]) },
      });
      expect(bulk.body, `bulk ${streamId}`).toBe(errorBody('Invalid channel ID'));
      for (const method of ['PATCH', 'POST'] as const) {
        const single = await xAlone({
          method,
          url: `/api/v1/users/me/subscriptions/${streamId}`,
          form: { property: 'color', value: '#000000' },
        });
        expect(single.body, `${method} ${streamId}`).toBe(errorBody('Invalid channel ID'));
      }
    }
  });

  it('and U cannot reach C2', async () => {
    const bulk = await uAlone({
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      form: { subscription_data: JSON.stringify([{ stream_id: ids.C2, property: 'is_muted', value: true }]) },
    });
    expect(bulk.body).toBe(errorBody('Invalid channel ID'));
    const single = await uAlone({
      method: 'PATCH',
      url: `/api/v1/users/me/subscriptions/${ids.C2}`,
      form: { property: 'is_muted', value: 'true' },
    });
    expect(single.body).toBe(errorBody('Invalid channel ID'));
  });

  it("navigation views: X sees, changes and removes only its own; U's fragments and names do not clash with X's", async () => {
    const list = await xAlone({ url: '/api/v1/navigation_views' });
    const xView = { fragment: 'narrow/x', is_pinned: true, name: 'Xview' };
    expect(list.body).toBe(success({ navigation_views: [xView] }));
    const patch = await xAlone({ method: 'PATCH', url: '/api/v1/navigation_views/narrow/secret', form: { is_pinned: 'true' } });
    expect(patch.statusCode).toBe(404);
    expect(patch.body).toBe(errorBody('Navigation view does not exist.', 'NOT_FOUND'));
    const remove = await xAlone({ method: 'DELETE', url: '/api/v1/navigation_views/inbox' });
    expect(remove.statusCode).toBe(404);
    expect(remove.body).toBe(errorBody('Navigation view does not exist.'));
    // U's fragment and U's name are free for X.
    const add = await xAlone({
      method: 'POST',
      url: '/api/v1/navigation_views',
      form: { fragment: 'narrow/secret', is_pinned: 'true', name: 'Secret' },
    });
    expect(add.body).toBe(OK);
    const rename = await xAlone({
      method: 'PATCH',
      url: '/api/v1/navigation_views/narrow%2Fx',
      form: { name: 'Secret 2' },
    });
    expect(rename.body).toBe(OK);
    // And U cannot touch X's.
    const foreign = await uAlone({ method: 'DELETE', url: '/api/v1/navigation_views/narrow/x' });
    expect(foreign.body).toBe(errorBody('Navigation view does not exist.'));
  });

  it("POST /register gives X its own organization's users, channels and views", async () => {
    const res = await xAlone({ method: 'POST', url: '/api/v1/register', form: { include_subscribers: 'true' } });
    const body = res.json();
    expect(body.realm_users.map((user: { user_id: number }) => user.user_id)).toEqual([ids.X]);
    expect(body.realm_non_active_users).toEqual([]);
    expect(body.subscriptions.map((sub: { stream_id: number }) => sub.stream_id)).toEqual([ids.C2]);
    expect(body.navigation_views.every((view: { fragment: string }) => ['narrow/x', 'narrow/secret'].includes(view.fragment))).toBe(true);
    expectNoRealm1Data(res.body.replace('"name":"Secret"', '').replace('"name":"Secret 2"', ''));
  });

  it("GET and DELETE /events with U's queue id: BAD_EVENT_QUEUE_ID, and U's queue keeps its events", async () => {
    const events = await queueEvents(s.ctx.db, s.queueU);
    for (const [method, request] of [
      ['GET', { url: `/api/v1/events?queue_id=${s.queueU}&last_event_id=${events.length - 1}&dont_block=true` }],
      ['GET', { url: `/api/v1/events?queue_id=${s.queueU}&last_event_id=-1&dont_block=true` }],
      ['DELETE', { method: 'DELETE', url: '/api/v1/events', form: { queue_id: s.queueU } }],
    ] as const) {
      const res = await xAlone(request);
      expect(res.body, method).toBe(badQueueBody(s.queueU));
    }
    expect(await queueEvents(s.ctx.db, s.queueU)).toEqual(events);
    // And U with X's queue.
    const res = await uAlone({ method: 'DELETE', url: '/api/v1/events', form: { queue_id: s.queueX } });
    expect(res.body).toBe(badQueueBody(s.queueX));
  });

  it("X's own changes produce events in X's queue only", async () => {
    const before = (await queueEvents(s.ctx.db, s.queueX)).length;
    const res = await xAlone({
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      form: { subscription_data: JSON.stringify([{ stream_id: ids.C2, property: 'pin_to_top', value: true }]) },
    });
    expect(res.body).toBe(OK);
    expect((await queueEvents(s.ctx.db, s.queueX)).slice(before)).toEqual([
      { type: 'subscription', op: 'update', property: 'pin_to_top', value: true, stream_id: ids.C2, id: before },
    ]);
  });

  it('user management: X, an owner of realm 2, never finds a realm-1 user; realm 1 gets no event of realm 2', async () => {
    await s.ctx.db.updateTable('users').set({ role: 100, can_create_users: true }).where('id', '=', ids.X).execute();
    const me = await xAlone({ url: '/api/v1/users/me' });
    expect(me.json()).toMatchObject({ user_id: ids.X, role: 100 });
    expectNoRealm1Data(me.body);
    for (const target of ['10', '13', '14', '16', '18']) {
      for (const request of [
        { method: 'PATCH' as const, url: `/api/v1/users/${target}`, form: { full_name: 'Taken over', role: '600' } },
        { method: 'DELETE' as const, url: `/api/v1/users/${target}` },
        { method: 'POST' as const, url: `/api/v1/users/${target}/reactivate` },
      ]) {
        expect((await xAlone(request)).body, `${request.method} ${target}`).toBe(errorBody('No such user'));
      }
    }
    for (const target of ['u@example.com', 'user13@other.chat.example.com']) {
      const res = await xAlone({ method: 'PATCH', url: `/api/v1/users/${target}`, form: { full_name: 'Taken over' } });
      expect(res.body, target).toBe(errorBody('No such user'));
    }
    // Addresses are unique per organization: realm 1's is free in realm 2, and realm 1 hears nothing.
    const created = await xAlone({
      method: 'POST',
      url: '/api/v1/users',
      form: { email: 'u@example.com', password: 'secret-enough', full_name: 'U Two' },
    });
    expect(created.statusCode).toBe(200);
    const newId = created.json().user_id as number;
    expect((await queueEvents(s.ctx.db, s.queueX)).at(-1)).toMatchObject({ type: 'realm_user', op: 'add', person: { user_id: newId } });
    // And realm 1's administrators cannot reach realm 2's users.
    for (const request of [
      { method: 'PATCH' as const, url: `/api/v1/users/${newId}`, form: { full_name: 'Taken over' } },
      { method: 'DELETE' as const, url: `/api/v1/users/${ids.X}` },
      { method: 'POST' as const, url: `/api/v1/users/${newId}/reactivate` },
    ]) {
      const res = await leavesUntouched(s.ctx, { realm: ids.R2 }, () => send(s.ctx, 'O', request));
      expect(res.body, `${request.method} ${request.url}`).toBe(errorBody('No such user'));
    }
    expect((await xAlone({ method: 'DELETE', url: `/api/v1/users/${newId}` })).body).toBe(OK);
  });
});

describe("users are isolated: V against U's private data, every endpoint", () => {
  let s: Seeded;
  beforeAll(async () => {
    s = await seeded();
  });
  afterAll(() => s.ctx.close());
  const userU = { user: ids.U };
  /** A request of V, asserting that nothing of U's changed. */
  const vAlone = (request: Omit<ApiRequest, 'as'>) => leavesUntouched(s.ctx, userU, () => send(s.ctx, 'V', request));

  it("GET /navigation_views lists V's views, never U's", async () => {
    const res = await vAlone({ url: '/api/v1/navigation_views' });
    expect(res.body).toBe(success({ navigation_views: [] }));
  });

  it("PATCH and DELETE of U's views are 404 for V (however the fragment is spelled)", async () => {
    for (const path of ['inbox', 'narrow/secret', 'narrow%2Fsecret']) {
      const patch = await vAlone({ method: 'PATCH', url: `/api/v1/navigation_views/${path}`, form: { is_pinned: 'false' } });
      expect(patch.body, path).toBe(errorBody('Navigation view does not exist.', 'NOT_FOUND'));
      const remove = await vAlone({ method: 'DELETE', url: `/api/v1/navigation_views/${path}` });
      expect(remove.body, path).toBe(errorBody('Navigation view does not exist.'));
    }
    // A name only U uses is free for V (names are unique per user, docs/api.md §2.9).
    const rename = await vAlone({ method: 'PATCH', url: '/api/v1/navigation_views/nonexistent', form: { name: 'Secret' } });
    expect(rename.body).toBe(errorBody('Navigation view does not exist.', 'NOT_FOUND'));
  });

  it("POST /navigation_views: V may use U's fragment and name; U's rows and queue are untouched", async () => {
    const forms: Record<string, string>[] = [
      { fragment: 'inbox', is_pinned: 'false' },
      { fragment: 'narrow/secret', is_pinned: 'true', name: 'Secret' },
    ];
    for (const form of forms) {
      const res = await vAlone({ method: 'POST', url: '/api/v1/navigation_views', form });
      expect(res.body).toBe(OK);
    }
    expect((await queueEvents(s.ctx.db, s.queueV)).map((event) => event.op)).toEqual(['add', 'add']);
  });

  it("GET /users/me/subscriptions shows V's own settings for the channel U changed", async () => {
    const res = await vAlone({ url: '/api/v1/users/me/subscriptions' });
    const p = (res.json().subscriptions as { stream_id: number; color: string; pin_to_top: boolean }[]).find(
      (sub) => sub.stream_id === ids.P,
    )!;
    expect([p.color, p.pin_to_top]).toEqual(['#c2c2c2', false]);
  });

  it("bulk and single updates by V change V's subscription, audit rows and queue only", async () => {
    await leavesUntouched(s.ctx, userU, async () => {
      const bulk = await send(s.ctx, 'V', {
        method: 'POST',
        url: '/api/v1/users/me/subscriptions/properties',
        form: { subscription_data: JSON.stringify([{ stream_id: ids.P, property: 'color', value: '#654321' }]) },
      });
      expect(bulk.body).toBe(OK);
      const single = await send(s.ctx, 'V', {
        method: 'PATCH',
        url: `/api/v1/users/me/subscriptions/${ids.P}`,
        form: { property: 'is_muted', value: 'true' },
      });
      expect(single.body).toBe(OK);
    });
    const rows = await s.ctx.db
      .selectFrom('subscriptions')
      .select(['user_id', 'color', 'is_muted', 'pin_to_top'])
      .where('stream_id', '=', ids.P)
      .where('user_id', 'in', [ids.U, ids.V])
      .orderBy('user_id')
      .execute();
    expect(rows).toEqual([
      { user_id: ids.U, color: '#123456', is_muted: false, pin_to_top: true },
      { user_id: ids.V, color: '#654321', is_muted: true, pin_to_top: false },
    ]);
    const audit = await s.ctx.db
      .selectFrom('subscription_audit_log')
      .select(['acting_user_id', 'property'])
      .where('acting_user_id', '=', ids.V)
      .orderBy('id')
      .execute();
    expect(audit).toEqual([
      { acting_user_id: ids.V, property: 'color' },
      { acting_user_id: ids.V, property: 'is_muted' },
    ]);
  });

  it("POST /register gives V V's settings and views", async () => {
    const res = await vAlone({
      method: 'POST',
      url: '/api/v1/register',
      form: { fetch_event_types: '["subscription","navigation_views"]' },
    });
    const body = res.json();
    const p = (body.subscriptions as { stream_id: number; color: string; pin_to_top: boolean }[]).find((sub) => sub.stream_id === ids.P)!;
    expect(p.pin_to_top).toBe(false);
    expect(p.color).not.toBe('#123456');
    const views = body.navigation_views as { is_pinned: boolean; fragment: string }[];
    expect(views.some((view) => view.fragment === 'inbox' && view.is_pinned)).toBe(false);
  });

  it("GET and DELETE /events with U's queue id are BAD_EVENT_QUEUE_ID for V: nothing acknowledged, nothing deleted", async () => {
    const events = await queueEvents(s.ctx.db, s.queueU);
    const queueRow = () =>
      s.ctx.db.selectFrom('event_queues').select(['last_acked_id', 'next_event_id']).where('id', '=', s.queueU).executeTakeFirstOrThrow();
    const counters = await queueRow();
    for (const request of [
      { url: `/api/v1/events?queue_id=${s.queueU}&last_event_id=${events.length - 1}&dont_block=true` },
      { url: `/api/v1/events?queue_id=${s.queueU}&last_event_id=-1` },
      { method: 'DELETE' as const, url: '/api/v1/events', form: { queue_id: s.queueU } },
      { method: 'DELETE' as const, url: '/api/v1/events', form: { queue_id: s.queueU.toUpperCase() } },
    ]) {
      const res = await vAlone(request);
      expect(res.statusCode).toBe(400);
      expect(res.json().code).toBe('BAD_EVENT_QUEUE_ID');
    }
    expect(await queueEvents(s.ctx.db, s.queueU)).toEqual(events);
    expect(await queueRow()).toEqual(counters);
  });

  it('(the row snapshot sees a change by the owner: the checks above can fail)', async () => {
    const before = await rowsOf(s.ctx, userU);
    expect(before).toContain('narrow/secret');
    expect((await send(s.ctx, 'U', { method: 'PATCH', url: '/api/v1/navigation_views/inbox', form: { is_pinned: 'false' } })).body).toBe(
      OK,
    );
    expect(await rowsOf(s.ctx, userU)).not.toBe(before);
  });

  it('GET /users and GET /users/{id} are the same public objects for everyone (no private settings in them)', async () => {
    const res = await vAlone({ url: `/api/v1/users/${ids.U}` });
    expect(res.statusCode).toBe(200);
    for (const text of ['Secret', '#123456', 'pin_to_top', s.queueU]) expect(res.body).not.toContain(text);
  });
});

// --- SQL metacharacters: stored and compared literally. ---

const META = [
  "'",
  '"',
  ';',
  '--',
  '\\',
  '%',
  '_',
  '$1',
  "' OR 1=1 --",
  "x'); DROP TABLE navigation_views; --",
  '%_%',
  '\\%',
  "E'\\x41'",
  '*/ /*',
];

describe('SQL metacharacters in every string parameter and path segment are harmless', () => {
  const ctx = useTestContext(createTestContext, 'all');

  it('navigation views named and addressed with them round-trip exactly; wildcards match nothing else', async () => {
    const queue = await createQueue(ctx.db, 'U');
    const add = (form: Record<string, string>) => send(ctx, 'U', { method: 'POST', url: '/api/v1/navigation_views', form });
    const views = [
      { fragment: 'narrow/abc', is_pinned: false, name: 'abc' },
      ...META.map((meta) => ({ fragment: `narrow/${meta}`, is_pinned: false, name: meta })),
    ];
    for (const view of views) {
      const res = await add({ fragment: view.fragment, is_pinned: 'false', name: view.name });
      expect(res.body, view.fragment).toBe(OK);
    }
    const list = await send(ctx, 'U', { url: '/api/v1/navigation_views' });
    expect(list.body).toBe(success({ navigation_views: views }));
    // A name with wildcards clashes only with itself.
    expect((await add({ fragment: 'narrow/new', is_pinned: 'true', name: '%' })).body).toBe(errorBody('Navigation view already exists.'));
    expect((await add({ fragment: 'narrow/new', is_pinned: 'true', name: 'a_c' })).body).toBe(OK);
    // PATCH and DELETE through the path: each touches exactly its own row.
    for (const meta of META) {
      const path = `/api/v1/navigation_views/${encodeURIComponent(`narrow/${meta}`)}`;
      expect((await send(ctx, 'U', { method: 'PATCH', url: path, form: { is_pinned: 'true' } })).body, meta).toBe(OK);
    }
    const pinned = await ctx.db
      .selectFrom('navigation_views')
      .select(['fragment', 'is_pinned'])
      .where('user_id', '=', ids.U)
      .orderBy('id')
      .execute();
    expect(pinned).toEqual([
      { fragment: 'narrow/abc', is_pinned: false },
      ...META.map((meta) => ({ fragment: `narrow/${meta}`, is_pinned: true })),
      { fragment: 'narrow/new', is_pinned: true },
    ]);
    for (const meta of ['%', '_', '%_%']) {
      const url = `/api/v1/navigation_views/narrow%2F${encodeURIComponent(meta)}`;
      expect((await send(ctx, 'U', { method: 'DELETE', url })).body, meta).toBe(OK);
    }
    const left = await ctx.db.selectFrom('navigation_views').select('name').where('user_id', '=', ids.U).orderBy('id').execute();
    expect(left.map((row) => row.name)).toEqual(['abc', ...META.filter((meta) => !['%', '_', '%_%'].includes(meta)), 'a_c']);
    // The events carry the same literal text.
    const events = await queueEvents(ctx.db, queue);
    expect(events.filter((event) => event.op === 'add').map((event) => (event.navigation_view as { name: string }).name)).toEqual([
      'abc',
      ...META,
      'a_c',
    ]);
    expect(events.filter((event) => event.op === 'remove').map((event) => event.fragment)).toEqual(['narrow/%', 'narrow/_', 'narrow/%_%']);
  });

  it('an email path with LIKE wildcards or injected SQL matches no user', async () => {
    for (const target of [
      '%',
      '_',
      '%@example.com',
      '_@example.com',
      'u@example.co_',
      'U@EXAMPLE.CO%',
      '%u@example.com%',
      "' OR 1=1 --",
      "u@example.com' OR '1'='1",
      'u@example.com;--',
      '\\',
      '$1',
      'u@example.com\\',
      'user1_@chat.example.com',
      'user1%@chat.example.com',
    ]) {
      const res = await send(ctx, 'U', { url: `/api/v1/users/${encodeURIComponent(target)}` });
      expect(res.body, target).toBe(errorBody('No such user'));
    }
    expect((await send(ctx, 'U', { url: '/api/v1/users/u%40example.com' })).statusCode).toBe(200);
  });

  it('subscription properties, values and entry keys are compared literally', async () => {
    const before = await rowsOf(ctx, { realm: ids.R });
    for (const meta of META) {
      const bulk = await send(ctx, 'U', {
        method: 'POST',
        url: '/api/v1/users/me/subscriptions/properties',
        form: { subscription_data: JSON.stringify([{ stream_id: ids.P, property: meta, value: true }]) },
      });
      expect(bulk.body, meta).toBe(errorBody(`Unknown subscription property: ${meta}`));
      const color = await send(ctx, 'U', {
        method: 'POST',
        url: '/api/v1/users/me/subscriptions/properties',
        form: { subscription_data: JSON.stringify([{ stream_id: ids.P, property: 'color', value: `#fff${meta}` }]) },
      });
      expect(color.body, meta).toBe(errorBody('Invalid subscription_data[0]: Value error, color is not a valid hex color code'));
      const single = await send(ctx, 'U', {
        method: 'PATCH',
        url: `/api/v1/users/me/subscriptions/${ids.P}`,
        form: { property: meta, value: 'true' },
      });
      expect(single.body, meta).toBe(errorBody(`Unknown subscription property: ${meta}`));
      const path = await send(ctx, 'U', {
        method: 'PATCH',
        url: `/api/v1/users/me/subscriptions/${encodeURIComponent(meta)}`,
        form: { property: 'pin_to_top', value: 'true' },
      });
      expect(path.statusCode, meta).toBe(404);
    }
    expect(await rowsOf(ctx, { realm: ids.R })).toBe(before);
    const extraKeys = Object.fromEntries(META.map((meta) => [meta, meta]));
    const ok = await send(ctx, 'U', {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      form: { subscription_data: JSON.stringify([{ stream_id: ids.P, property: 'pin_to_top', value: true, ...extraKeys }]) },
    });
    expect(ok.body).toBe(OK);
  });

  it('queue ids, event types and capability keys are compared and stored literally', async () => {
    for (const meta of META) {
      const poll = await send(ctx, 'U', { url: `/api/v1/events?queue_id=${encodeURIComponent(meta)}&last_event_id=-1&dont_block=true` });
      expect(poll.body, meta).toBe(badQueueBody(meta));
      const remove = await send(ctx, 'U', { method: 'DELETE', url: '/api/v1/events', form: { queue_id: meta } });
      expect(remove.body, meta).toBe(badQueueBody(meta));
    }
    const eventTypes = [...META, 'navigation_view', '{a,b}', 'NULL'];
    const res = await send(ctx, 'U', {
      method: 'POST',
      url: '/api/v1/register',
      form: {
        event_types: JSON.stringify(eventTypes),
        fetch_event_types: JSON.stringify(META),
        client_capabilities: JSON.stringify({ "' OR 1=1 --": true }),
      },
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body)).not.toContain('navigation_views');
    const stored = await ctx.db.selectFrom('event_queues').select('event_types').where('id', '=', body.queue_id).executeTakeFirstOrThrow();
    expect(stored.event_types).toEqual(eventTypes);
    // The queue takes exactly the listed types.
    await send(ctx, 'U', { method: 'POST', url: '/api/v1/navigation_views', form: { fragment: 'feed', is_pinned: 'true' } });
    await send(ctx, 'U', {
      method: 'PATCH',
      url: `/api/v1/users/me/subscriptions/${ids.P}`,
      form: { property: 'is_muted', value: 'true' },
    });
    expect((await queueEvents(ctx.db, body.queue_id)).map((event) => event.type)).toEqual(['navigation_view']);
  });

  it('JSON-typed parameters holding them are simply not valid JSON, on every endpoint', async () => {
    const before = await rowsOf(ctx, { realm: ids.R });
    const cases: [string, string, string][] = [
      ['GET', '/api/v1/users/me/subscriptions', 'include_subscribers'],
      ['GET', '/api/v1/users', 'client_gravatar'],
      ['GET', `/api/v1/users/${ids.V}`, 'include_custom_profile_fields'],
      ['POST', '/api/v1/users/me/subscriptions/properties', 'subscription_data'],
      ['PATCH', '/api/v1/navigation_views/inbox', 'is_pinned'],
      ['POST', '/api/v1/register', 'client_capabilities'],
      ['POST', '/api/v1/register', 'event_types'],
      ['POST', '/api/v1/register', 'queue_lifespan_secs'],
      ['GET', '/api/v1/events?queue_id=q', 'last_event_id'],
    ];
    for (const [method, url, name] of cases) {
      for (const meta of META) {
        const res =
          method === 'GET'
            ? await send(ctx, 'U', { url: `${url}${url.includes('?') ? '&' : '?'}${name}=${encodeURIComponent(meta)}` })
            : await send(ctx, 'U', { method, url, form: { [name]: meta } });
        expect(res.body, `${name}=${meta}`).toBe(errorBody(`${name} is not valid JSON`));
      }
    }
    expect(await rowsOf(ctx, { realm: ids.R })).toBe(before);
  });

  it('parameter names are reported literally; credentials and hosts with them are refused', async () => {
    const query = META.map((meta, index) => `${encodeURIComponent(meta)}=${index}`).join('&');
    const res = await send(ctx, 'U', { url: `/api/v1/users/${ids.V}?${query}` });
    expect(res.statusCode).toBe(200);
    expect(res.json().ignored_parameters_unsupported).toEqual([...new Set(META)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    for (const meta of META) {
      const login = await api(ctx.app, { url: '/api/v1/users', headers: { authorization: basicAuth(meta, apiKeys.U) } });
      expect(login.body, meta).toBe(errorBody('Invalid API key', 'UNAUTHORIZED'));
      const email = await api(ctx.app, { url: '/api/v1/users', headers: { authorization: basicAuth(`${emails.U}${meta}`, apiKeys.U) } });
      expect(email.body, meta).toBe(errorBody('Invalid API key', 'UNAUTHORIZED'));
    }
    // A subdomain of wildcards names no organization (`_____` would LIKE-match `other`).
    for (const subdomain of ['_____', '%', "other' OR '1'='1", 'oth%']) {
      const login = await send(ctx, 'X', { url: '/api/v1/users', host: `${subdomain}.chat.example.com` });
      expect(login.body, subdomain).toBe(errorBody('Account is not associated with this subdomain', 'UNAUTHORIZED'));
      const settings = await api(ctx.app, { url: '/api/v1/server_settings', host: `${subdomain}.chat.example.com` });
      expect(settings.json().realm_name, subdomain).toBeUndefined();
    }
  });

  it('every table is still there with its rows', async () => {
    const { rows } = await ctx.database.pool.query<{ n: number }>(
      `SELECT (SELECT count(*) FROM users)::int + (SELECT count(*) FROM streams)::int + (SELECT count(*) FROM realms)::int AS n`,
    );
    expect(rows[0]!.n).toBe(10 + 6 + 2);
  });
});

// --- API keys: only hashes at rest, constant-time comparison. ---

describe('API keys are stored only hashed and compared in constant time', () => {
  const digest = hashApiKey(apiKeys.U);

  it('storedDigestMatches: the equal digest matches; different, malformed or differently sized ones never do, and never throw', () => {
    const bytes = apiKeyDigest(apiKeys.U).bytes;
    expect(storedDigestMatches(digest, bytes)).toBe(true);
    const hexBytes = (hex: string) => Buffer.from(hex, 'hex');
    for (const [stored, computed] of [
      [digest, apiKeyDigest(apiKeys.V).bytes],
      [digest, bytes.subarray(0, 31)],
      [digest, Buffer.concat([bytes, Buffer.alloc(1)])],
      [digest, Buffer.alloc(0)],
      ['', bytes],
      ['', Buffer.alloc(0)],
      ['zz', Buffer.alloc(0)],
      ['abc', hexBytes('ab')],
      [digest.slice(0, 62), bytes.subarray(0, 31)],
      [`${digest}00`, Buffer.concat([bytes, Buffer.alloc(1)])],
      [digest.replace(/.$/, 'g'), bytes],
      [digest.toUpperCase(), bytes],
      [`${digest.slice(0, 63)}\0`, bytes],
      ['😀'.repeat(32), bytes],
    ] as [string, Buffer][]) {
      expect(() => storedDigestMatches(stored, computed)).not.toThrow();
      expect(storedDigestMatches(stored, computed), `${stored} vs ${computed.toString('hex')}`).toBe(false);
    }
  });

  it('the comparison is crypto.timingSafeEqual over the two 32-byte digests', () => {
    const spy = vi.mocked(crypto.timingSafeEqual);
    spy.mockClear();
    expect(storedDigestMatches(digest, apiKeyDigest(apiKeys.U).bytes)).toBe(true);
    expect(spy).toHaveBeenCalledTimes(1);
    const [left, right] = spy.mock.calls[0]! as [Buffer, Buffer];
    expect([left.length, right.length]).toEqual([32, 32]);
  });

  it('authentication goes through it, and after traffic of every kind no column of any table holds a key in clear', async () => {
    const ctx = await createTestContext({ env: { RATE_LIMITING: 'true' } });
    try {
      const spy = vi.mocked(crypto.timingSafeEqual);
      spy.mockClear();
      const queue = await send(ctx, 'U', { method: 'POST', url: '/api/v1/register' });
      expect(queue.statusCode).toBe(200);
      expect(spy).toHaveBeenCalled();
      const users: FixtureUser[] = ['O', 'A', 'M', 'U', 'V', 'G', 'B', 'H', 'D', 'X'];
      for (const user of users) {
        const register = await send(ctx, user, { method: 'POST', url: '/api/v1/register' });
        await send(ctx, user, {
          method: 'POST',
          url: '/api/v1/navigation_views',
          form: { fragment: 'narrow/k', is_pinned: 'true', name: 'k' },
        });
        await send(ctx, user, { method: 'PATCH', url: '/api/v1/navigation_views/narrow%2Fk', form: { is_pinned: 'false' } });
        await send(ctx, user, {
          method: 'PATCH',
          url: `/api/v1/users/me/subscriptions/${ids.P}`,
          form: { property: 'pin_to_top', value: 'true' },
        });
        await send(ctx, user, {
          method: 'POST',
          url: '/api/v1/users/me/subscriptions/properties',
          form: { subscription_data: JSON.stringify([{ stream_id: ids.P, property: 'is_muted', value: true }]) },
        });
        await send(ctx, user, { url: '/api/v1/users/me/subscriptions' });
        await send(ctx, user, { url: `/api/v1/users/${emails[user]}` });
        if (register.statusCode === 200) {
          await send(ctx, user, { url: `/api/v1/events?queue_id=${register.json().queue_id}&last_event_id=-1&dont_block=true` });
        }
        // A refused attempt with the key in the email position too.
        await api(ctx.app, { url: '/api/v1/users', headers: { authorization: basicAuth(apiKeys[user], apiKeys[user]) } });
      }
      const { rows: tables } = await ctx.database.pool.query<{ table_name: string }>(
        `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`,
      );
      expect(tables.map((table) => table.table_name)).toEqual(
        expect.arrayContaining(['users', 'event_queues', 'events', 'rate_limit_logs']),
      );
      for (const { table_name: table } of tables) {
        for (const user of users) {
          // The whole row as text: every column of every type, arrays and JSON included.
          const { rows } = await ctx.database.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM "${table}" t WHERE strpos(t::text, $1) > 0`,
            [apiKeys[user]],
          );
          expect(rows[0]!.n, `${table} holds ${user}'s key`).toBe(0);
        }
      }
      const { rows } = await ctx.database.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM users WHERE api_key_hash !~ '^[0-9a-f]{64}$'`,
      );
      expect(rows[0]!.n).toBe(0);
    } finally {
      await ctx.close();
    }
  });
});

describe('membership is isolated: X (realm 2) against realm 1', () => {
  let s: Seeded;
  beforeAll(async () => {
    s = await seeded();
  });
  afterAll(() => s.ctx.close());

  const realm1 = { realm: ids.R };
  const xAlone = (request: Omit<ApiRequest, 'as'>) => leavesUntouched(s.ctx, realm1, () => send(s.ctx, 'X', request));
  const uAlone = (request: Omit<ApiRequest, 'as'>) => leavesUntouched(s.ctx, { realm: ids.R2 }, () => send(s.ctx, 'U', request));

  it('membership: X subscribes, unsubscribes and reads in its own organization only, and never names realm-1 users', async () => {
    const subscribeAs = (as: FixtureUser, form: Record<string, string>) =>
      send(s.ctx, as, { method: 'POST', url: '/api/v1/users/me/subscriptions', form });
    const eventsOfU = (await queueEvents(s.ctx.db, s.queueU)).length;
    const created = await leavesUntouched(s.ctx, realm1, () => subscribeAs('X', { subscriptions: '[{"name":"p"},{"name":"S"}]' }));
    expect(created.body).toBe(
      success({ subscribed: { [ids.X]: ['p', 'S'] }, already_subscribed: {}, new_subscription_messages_sent: true }),
    );
    for (const principal of [`[${ids.U}]`, '["u@example.com"]', `["user${ids.U}@other.chat.example.com"]`]) {
      expect(
        (
          await xAlone({
            method: 'POST',
            url: '/api/v1/users/me/subscriptions',
            form: { subscriptions: '[{"name":"C2"}]', principals: principal },
          })
        ).body,
      ).toBe(errorBody('No such user'));
      expect(
        (
          await xAlone({
            method: 'DELETE',
            url: '/api/v1/users/me/subscriptions',
            form: { subscriptions: '["C2"]', principals: principal },
          })
        ).body,
      ).toBe(errorBody('No such user'));
    }
    expect((await xAlone({ method: 'DELETE', url: '/api/v1/users/me/subscriptions', form: { subscriptions: '["Q"]' } })).body).toBe(
      errorBody('Channel(s) (Q) do not exist'),
    );
    expect((await xAlone({ url: `/api/v1/users/${ids.U}/subscriptions/${ids.C2}` })).body).toBe(errorBody('No such user'));
    expect((await xAlone({ url: `/api/v1/users/${ids.X}/subscriptions/${ids.P}` })).body).toBe(errorBody('Invalid channel ID'));
    expect((await xAlone({ url: `/api/v1/streams/${ids.P}/members` })).body).toBe(errorBody('Invalid channel ID'));
    expect((await uAlone({ url: `/api/v1/streams/${ids.C2}/members` })).body).toBe(errorBody('Invalid channel ID'));
    expect(
      (
        await uAlone({
          method: 'POST',
          url: '/api/v1/users/me/subscriptions',
          form: { subscriptions: '[{"name":"P"}]', principals: `[${ids.X}]` },
        })
      ).body,
    ).toBe(errorBody('No such user'));
    // Realm 1's queues got nothing of X's channels.
    expect(await queueEvents(s.ctx.db, s.queueU)).toHaveLength(eventsOfU);
  });

  it('membership: SQL metacharacters in channel names and principals are taken literally', async () => {
    const name = "x'); DROP TABLE streams; --";
    const res = await send(s.ctx, 'X', {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions',
      form: { subscriptions: JSON.stringify([{ name }]) },
    });
    expect(res.body).toBe(success({ subscribed: { [ids.X]: [name] }, already_subscribed: {}, new_subscription_messages_sent: true }));
    expect(
      (
        await send(s.ctx, 'X', {
          method: 'POST',
          url: '/api/v1/users/me/subscriptions',
          form: { subscriptions: '[{"name":"Q"}]', principals: '["\' OR 1=1 --"]' },
        })
      ).body,
    ).toBe(errorBody('No such user'));
    expect(
      (await send(s.ctx, 'X', { method: 'DELETE', url: '/api/v1/users/me/subscriptions', form: { subscriptions: JSON.stringify([name]) } }))
        .body,
    ).toBe(success({ removed: [name], not_removed: [] }));
  });
});
