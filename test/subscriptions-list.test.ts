import { describe, expect, it } from 'vitest';
import { listSubscriptions } from '../src/modules/subscriptions/subscriptions.service.js';
import { api, useSharedTestContext } from './helpers/app.js';
import { expectError, OK, success } from './helpers/envelope.js';
import { ids } from './helpers/fixture.js';
import { bulk } from './helpers/subscriptions.js';

const URL = '/api/v1/users/me/subscriptions';

/** P's object for U, exactly the example of docs/api.md §3.4. */
const P_FOR_U = {
  is_archived: false,
  audible_notifications: null,
  color: '#76ce90',
  creator_id: null,
  date_created: 1704164645,
  description: 'General chat',
  desktop_notifications: null,
  email_notifications: null,
  first_message_id: null,
  history_public_to_subscribers: true,
  in_home_view: true,
  invite_only: false,
  is_muted: false,
  is_web_public: false,
  message_retention_days: null,
  name: 'P',
  pin_to_top: false,
  push_notifications: null,
  rendered_description: '<p>General chat</p>',
  stream_id: 100,
  stream_weekly_traffic: null,
  wildcard_mentions_notify: null,
};

// Shared by the tests that only read; those that write take their own.
const ctx = useSharedTestContext();

const list = (as: 'U' | 'V' | 'B' | 'G', query = '') => api(ctx.app, { url: `${URL}${query}`, as });

describe('GET /users/me/subscriptions', () => {
  it('case 87: U sees exactly P, as the docs/api.md §3.4 example', async () => {
    const res = await list('U');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(success({ subscriptions: [P_FOR_U] }));
  });

  it('case 88: V sees P, Q, S, W sorted by name', async () => {
    const res = await list('V');
    const subscriptions = res.json().subscriptions as {
      name: string;
      stream_id: number;
      invite_only: boolean;
      is_web_public: boolean;
      color: string;
    }[];
    expect(subscriptions.map((s) => [s.name, s.stream_id])).toEqual([
      ['P', 100],
      ['Q', 101],
      ['S', 102],
      ['W', 104],
    ]);
    expect(subscriptions[2]).toMatchObject({ invite_only: true, is_web_public: false, color: '#c2c2c2' });
    expect(subscriptions[3]).toMatchObject({ invite_only: false, is_web_public: true });
    for (const subscription of subscriptions) expect(Object.keys(subscription)).toEqual(Object.keys(P_FOR_U));
  });

  it('case 89: include_subscribers lists active users with active subscriptions, ascending', async () => {
    const res = await list('U', '?include_subscribers=true');
    expect(res.body).toBe(success({ subscriptions: [{ ...P_FOR_U, subscribers: [13, 14, 15] }] }));
  });

  it('include_subscribers=false adds nothing', async () => {
    expect((await list('U', '?include_subscribers=false')).body).toBe(success({ subscriptions: [P_FOR_U] }));
  });

  it('include_subscribers excludes inactive subscriptions and reads the subscribers of every channel in one query', async () => {
    await ctx.ownDatabase();
    await ctx.db.updateTable('subscriptions').set({ active: false }).where('user_id', '=', ids.G).where('stream_id', '=', ids.P).execute();
    await ctx.db.insertInto('subscriptions').values({ realm_id: 1, user_id: ids.B, stream_id: ids.W }).execute();
    ctx.database.statements.length = 0;
    const res = await list('V', '?include_subscribers=true');
    expect(ctx.database.statements).toHaveLength(2); // authentication + the list
    const subscriptions = res.json().subscriptions as { name: string; subscribers: number[] }[];
    expect(subscriptions.map((s) => [s.name, s.subscribers])).toEqual([
      ['P', [13, 14]],
      ['Q', [14]],
      ['S', [14]],
      ['W', [14, 16]],
    ]);
  });

  it('case 90: include_subscribers must be a JSON boolean (or partial)', async () => {
    expectError(await list('U', '?include_subscribers=yes'), 'include_subscribers is not valid JSON');
    expectError(await list('U', '?include_subscribers=1'), 'include_subscribers is not a boolean');
    expectError(await list('U', '?include_subscribers=%22all%22'), 'include_subscribers is not a boolean');
    expectError(await list('U', '?include_subscribers=Partial'), 'include_subscribers is not valid JSON');
  });

  it('include_subscribers=partial (feature level 412) answers the whole lists, as a word or a JSON string', async () => {
    for (const value of ['partial', '%22partial%22']) {
      const res = await list('U', `?include_subscribers=${value}`);
      expect(res.body).toBe(success({ subscriptions: [{ ...P_FOR_U, subscribers: [13, 14, 15] }] }));
    }
  });

  it('case 91: settings changed through the API show up', async () => {
    await ctx.ownDatabase();
    expect((await bulk(ctx, [{ stream_id: ids.P, property: 'is_muted', value: true }])).body).toBe(OK);
    expect((await bulk(ctx, [{ stream_id: ids.P, property: 'desktop_notifications', value: false }])).body).toBe(OK);
    const res = await list('U');
    expect(res.body).toBe(success({ subscriptions: [{ ...P_FOR_U, desktop_notifications: false, in_home_view: false, is_muted: true }] }));
  });

  it('case 92: no subscriptions', async () => {
    expect((await list('B')).body).toBe(success({ subscriptions: [] }));
  });

  it('sorts by code point and skips inactive subscriptions and archived channels', async () => {
    await ctx.ownDatabase();
    await ctx.db
      .insertInto('streams')
      .values([
        { id: 300, realm_id: 1, name: 'a' },
        { id: 301, realm_id: 1, name: 'B' },
        { id: 302, realm_id: 1, name: 'É' },
        { id: 303, realm_id: 1, name: 'Pa' },
        { id: 304, realm_id: 1, name: 'gone' },
      ])
      .execute();
    await ctx.db
      .insertInto('subscriptions')
      .values([300, 301, 302, 303].map((id) => ({ realm_id: 1, user_id: ids.U, stream_id: id })))
      .execute();
    await ctx.db.insertInto('subscriptions').values({ realm_id: 1, user_id: ids.U, stream_id: 304, active: false }).execute();
    const names = ((await list('U')).json().subscriptions as { name: string }[]).map((s) => s.name);
    expect(names).toEqual(['B', 'P', 'Pa', 'a', 'É']);
  });

  it('reports unknown parameters', async () => {
    const res = await list('U', '?foo=1&client=x&include_subscribers=false');
    expect(res.json()).toMatchObject({ ignored_parameters_unsupported: ['foo'] });
  });

  it('HEAD answers like GET without a body', async () => {
    const res = await api(ctx.app, { method: 'HEAD', url: URL, as: 'U' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('');
  });

  it('listSubscriptions is reusable outside the route', async () => {
    const objects = await listSubscriptions(ctx.db, { id: ids.U, realmId: 1 }, { includeSubscribers: true });
    expect(objects).toEqual([{ ...P_FOR_U, subscribers: [13, 14, 15] }]);
  });
});
