import { describe, expect, it } from 'vitest';
import type { Database } from '../src/db/database.js';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { errorBody } from './helpers/envelope.js';
import { type FixtureUser, restrict } from './helpers/fixture.js';
import { pendingEvents, register, setColor } from './helpers/events.js';
import { placeholderObject } from './helpers/users.js';

/** POST /api/v1/register (docs/api.md §3.12, acceptance cases 150–158 and 171). */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const JOINED = '2024-01-02T03:04+00:00';

const human = (id: number, fullName: string, email: string, role: number, extra: object = {}) => ({
  email,
  user_id: id,
  avatar_version: 1,
  is_admin: role <= 200,
  is_owner: role === 100,
  is_guest: role === 600,
  role,
  is_bot: false,
  full_name: fullName,
  timezone: '',
  date_joined: JOINED,
  delivery_email: email,
  avatar_url: null,
  is_imported_stub: false,
  profile_data: {},
  ...extra,
});
const bot = (id: number, fullName: string, email: string, botType: number) => ({
  email,
  user_id: id,
  avatar_version: 1,
  is_admin: false,
  is_owner: false,
  is_guest: false,
  role: 400,
  is_bot: true,
  full_name: fullName,
  timezone: '',
  date_joined: JOINED,
  delivery_email: email,
  avatar_url: null,
  is_imported_stub: false,
  bot_type: botType,
  bot_owner_id: 13,
});
const placeholder = (id: number) => placeholderObject(id, false);

const V_PROFILE_DATA = {
  1: { value: '**Lead**', rendered_value: '<p><strong>Lead</strong></p>' },
  2: { value: 'line1\nline2 <b>x</b>', rendered_value: '<p>line1<br>\nline2 &lt;b&gt;x&lt;/b&gt;</p>' },
  3: { value: 'opt1' },
  4: { value: '2000-01-01' },
};

const USERS = {
  10: human(10, 'O Owner', 'owner@example.com', 100),
  11: human(11, 'A Admin', 'admin@example.com', 200),
  12: human(12, 'M Mod', 'mod@example.com', 300),
  13: human(13, 'U Member', 'u@example.com', 400),
  14: human(14, 'V Member', 'v@example.com', 400, { profile_data: V_PROFILE_DATA }),
  15: human(15, 'G Guest', 'guest@example.com', 600),
  16: bot(16, 'B Bot', 'b-bot@chat.example.com', 1),
  17: bot(17, 'H Hook', 'h-bot@chat.example.com', 2),
  18: human(18, 'D Gone', 'd@example.com', 400),
};

/** P as U sees it, notification settings as a client without notification_settings_null gets them. */
const P_SUBSCRIPTION = {
  is_archived: false,
  audible_notifications: false,
  color: '#76ce90',
  creator_id: null,
  date_created: 1704164645,
  description: 'General chat',
  desktop_notifications: false,
  email_notifications: false,
  first_message_id: null,
  history_public_to_subscribers: true,
  in_home_view: true,
  invite_only: false,
  is_muted: false,
  is_web_public: false,
  message_retention_days: null,
  name: 'P',
  pin_to_top: false,
  push_notifications: false,
  rendered_description: '<p>General chat</p>',
  stream_id: 100,
  stream_weekly_traffic: null,
  wildcard_mentions_notify: null,
};

const header = (queueId: string, idleQueueTimeoutSecs = 600) => ({
  result: 'success',
  msg: '',
  queue_id: queueId,
  idle_queue_timeout_secs: idleQueueTimeoutSecs,
  zulip_version: '12.0-dev',
  zulip_feature_level: 490,
  zulip_merge_base: '12.0-dev',
  event_queue_longpoll_timeout_seconds: 90,
});

const queues = (db: Database) => db.selectFrom('event_queues').selectAll().orderBy('created_at').execute();

const ctx = useTestContext(createTestContext);

async function registered(form: Record<string, string> = {}, as: FixtureUser = 'U') {
  const res = await register(ctx.app, form, as);
  expect(res.statusCode, res.body).toBe(200);
  return { res, body: res.json<Record<string, unknown> & { queue_id: string }>() };
}

describe('POST /api/v1/register', () => {
  it('case 150: every section, keys in order, and a new queue for the caller', async () => {
    const { res, body } = await registered();
    expect(body.queue_id).toMatch(UUID);
    expect(res.body).toBe(
      JSON.stringify({
        ...header(body.queue_id),
        realm_users: [10, 11, 12, 13, 14, 15, 16, 17].map((id) => USERS[id as keyof typeof USERS]),
        realm_non_active_users: [USERS[18]],
        subscriptions: [P_SUBSCRIPTION],
        navigation_views: [],
        last_event_id: -1,
      }),
    );
    const [queue] = await queues(ctx.db);
    expect(queue).toMatchObject({
      id: body.queue_id,
      realm_id: 1,
      user_id: 13,
      event_types: null,
      last_acked_id: -1,
      next_event_id: 0,
      lifespan_seconds: 600,
      poll_id: null,
      poll_lease_until: null,
    });
    expect(await pendingEvents(ctx.app, body.queue_id)).toEqual([]);
  });

  it('each registration makes a queue of its own', async () => {
    const first = (await registered({ fetch_event_types: '[]' })).body.queue_id;
    const second = (await registered({ fetch_event_types: '[]' })).body.queue_id;
    expect(first).not.toBe(second);
    expect((await queues(ctx.db)).map((queue) => queue.id).sort()).toEqual([first, second].sort());
  });

  it('case 151: fetch_event_types=["navigation_views"] gives only that section', async () => {
    const { res, body } = await registered({ fetch_event_types: '["navigation_views"]' });
    expect(res.body).toBe(JSON.stringify({ ...header(body.queue_id), navigation_views: [], last_event_id: -1 }));
    expect((await queues(ctx.db))[0]!.event_types).toBeNull();
  });

  it('case 152: the event type navigation_view names no section; empty and unknown fetch lists give none', async () => {
    const onlyViews = await registered({ event_types: '["navigation_view"]' });
    expect(onlyViews.res.body).toBe(JSON.stringify({ ...header(onlyViews.body.queue_id), last_event_id: -1 }));
    const queue = await ctx.db.selectFrom('event_queues').selectAll().where('id', '=', onlyViews.body.queue_id).executeTakeFirstOrThrow();
    expect(queue.event_types).toEqual(['navigation_view']);
    for (const fetch of ['[]', '["message","realm"]']) {
      const { res, body } = await registered({ fetch_event_types: fetch });
      expect(res.body).toBe(JSON.stringify({ ...header(body.queue_id), last_event_id: -1 }));
    }
  });

  it('event_types picks the sections when fetch_event_types is absent; fetch_event_types wins when present', async () => {
    const bySubscription = await registered({ event_types: '["subscription","realm_user"]' });
    expect(Object.keys(bySubscription.body)).toEqual([
      ...Object.keys(header('')),
      'realm_users',
      'realm_non_active_users',
      'subscriptions',
      'last_event_id',
    ]);
    const fetchWins = await registered({ event_types: '["subscription"]', fetch_event_types: '["navigation_views"]' });
    expect(Object.keys(fetchWins.body)).toEqual([...Object.keys(header('')), 'navigation_views', 'last_event_id']);
  });

  it('case 153: realm_users and realm_non_active_users carry no is_active key', async () => {
    const { body } = await registered({ fetch_event_types: '["realm_user"]' });
    expect(JSON.stringify(body.realm_users)).toBe(
      JSON.stringify([10, 11, 12, 13, 14, 15, 16, 17].map((id) => USERS[id as keyof typeof USERS])),
    );
    expect(JSON.stringify(body.realm_non_active_users)).toBe(JSON.stringify([USERS[18]]));
    expect(JSON.stringify(body)).not.toContain('is_active');
  });

  it('realm_users follows client_gravatar', async () => {
    const { body } = await registered({ fetch_event_types: '["realm_user"]', client_gravatar: 'false' });
    const users = body.realm_users as { user_id: number; avatar_url: string }[];
    expect(users.find((user) => user.user_id === 14)!.avatar_url).toBe(
      'https://secure.gravatar.com/avatar/19eb9884e5d9ee1df522e134f90f6cea?d=identicon&version=1',
    );
  });

  it('case 154: null notification settings take the user defaults unless notification_settings_null', async () => {
    const fetch = { fetch_event_types: '["subscription"]' };
    expect(JSON.stringify((await registered(fetch)).body.subscriptions)).toBe(JSON.stringify([P_SUBSCRIPTION]));

    const nulls = await registered({ ...fetch, client_capabilities: '{"notification_settings_null":true}' });
    expect(JSON.stringify(nulls.body.subscriptions)).toBe(
      JSON.stringify([
        {
          ...P_SUBSCRIPTION,
          audible_notifications: null,
          desktop_notifications: null,
          email_notifications: null,
          push_notifications: null,
        },
      ]),
    );

    await ctx.db.updateTable('users').set({ enable_stream_push_notifications: true }).where('id', '=', 13).execute();
    const push = await registered(fetch);
    expect(JSON.stringify(push.body.subscriptions)).toBe(JSON.stringify([{ ...P_SUBSCRIPTION, push_notifications: true }]));

    // A stored value is never replaced.
    await ctx.db
      .updateTable('subscriptions')
      .set({ push_notifications: false, desktop_notifications: true })
      .where('user_id', '=', 13)
      .where('stream_id', '=', 100)
      .execute();
    const stored = await registered(fetch);
    expect(JSON.stringify(stored.body.subscriptions)).toBe(JSON.stringify([{ ...P_SUBSCRIPTION, desktop_notifications: true }]));
  });

  it('case 155: include_subscribers adds the active subscribers; partial (feature level 412) too', async () => {
    for (const value of ['true', 'partial', '"partial"']) {
      const { body } = await registered({ fetch_event_types: '["subscription"]', include_subscribers: value });
      expect(JSON.stringify(body.subscriptions)).toBe(JSON.stringify([{ ...P_SUBSCRIPTION, subscribers: [13, 14, 15] }]));
    }
  });

  it('case 156: a restricted guest gets placeholders, or nothing with user_list_incomplete', async () => {
    await restrict(ctx.db);
    const fetch = { fetch_event_types: '["realm_user"]' };
    const full = await registered(fetch, 'G');
    expect(JSON.stringify(full.body.realm_users)).toBe(
      JSON.stringify([
        placeholder(10),
        placeholder(11),
        placeholder(12),
        USERS[13],
        USERS[14],
        USERS[15],
        USERS[16],
        USERS[17],
        placeholder(18),
      ]),
    );
    expect(full.body.realm_non_active_users).toEqual([]);

    const incomplete = await registered({ ...fetch, client_capabilities: '{"user_list_incomplete":true}' }, 'G');
    expect(JSON.stringify(incomplete.body.realm_users)).toBe(JSON.stringify([USERS[13], USERS[14], USERS[15], USERS[16], USERS[17]]));
    expect(incomplete.body.realm_non_active_users).toEqual([]);
  });

  it("navigation_views lists the caller's views in creation order", async () => {
    await ctx.db
      .insertInto('navigation_views')
      .values([
        { realm_id: 1, user_id: 13, fragment: 'feed', is_pinned: true, name: null },
        { realm_id: 1, user_id: 13, fragment: 'narrow/x', is_pinned: false, name: 'X' },
        { realm_id: 1, user_id: 14, fragment: 'inbox', is_pinned: true, name: null },
      ])
      .execute();
    const { body } = await registered({ fetch_event_types: '["navigation_views"]' });
    expect(JSON.stringify(body.navigation_views)).toBe(
      JSON.stringify([
        { fragment: 'feed', is_pinned: true, name: null },
        { fragment: 'narrow/x', is_pinned: false, name: 'X' },
      ]),
    );
  });

  it('case 157: parameter errors, in table order, create no queue', async () => {
    const cases: [Record<string, string>, string][] = [
      [{ event_types: 'foo' }, 'event_types is not valid JSON'],
      [{ event_types: '{}' }, 'event_types is not a list'],
      [{ event_types: '[1]' }, 'event_types[0] is not a string'],
      [{ fetch_event_types: '["a",null]' }, 'fetch_event_types[1] is not a string'],
      [{ client_capabilities: '[]' }, 'client_capabilities is not a dict'],
      [{ client_capabilities: '{"notification_settings_null":1}' }, 'client_capabilities["notification_settings_null"] is not a boolean'],
      [{ queue_lifespan_secs: 'abc' }, 'queue_lifespan_secs is not valid JSON'],
      [{ queue_lifespan_secs: '1.5' }, 'queue_lifespan_secs is not an integer'],
      [{ client_gravatar: 'yes' }, 'client_gravatar is not valid JSON'],
      [{ include_subscribers: 'Partial' }, 'include_subscribers is not valid JSON'],
      [{ include_subscribers: '"all"' }, 'include_subscribers is not a boolean'],
      [{ include_subscribers: '1', event_types: 'foo' }, 'include_subscribers is not a boolean'],
      [{ client_capabilities: '[]', event_types: 'foo' }, 'client_capabilities is not a dict'],
    ];
    for (const [form, msg] of cases) {
      const res = await register(ctx.app, form);
      expect(res.statusCode, msg).toBe(400);
      expect(res.body).toBe(errorBody(msg));
    }
    expect(await queues(ctx.db)).toEqual([]);
  });

  it('case 158: parameters Zulip knows but this server does not are reported', async () => {
    const { res, body } = await registered({ apply_markdown: 'true', narrow: '[]', fetch_event_types: '[]', client: 'x' });
    expect(res.body).toBe(
      JSON.stringify({
        ...header(body.queue_id),
        last_event_id: -1,
        ignored_parameters_unsupported: ['apply_markdown', 'narrow'],
      }),
    );
  });

  it('queue_lifespan_secs: ≤ 0 means the default, larger values are capped', async () => {
    const lifespans: [string, number][] = [
      ['0', 600],
      ['-5', 600],
      ['2', 2],
      ['604800', 604800],
      ['999999999999', 604800],
    ];
    for (const [requested] of lifespans) await registered({ queue_lifespan_secs: requested, fetch_event_types: '[]' });
    expect((await queues(ctx.db)).map((queue) => queue.lifespan_seconds).sort((a, b) => a - b)).toEqual(
      lifespans.map(([, stored]) => stored).sort((a, b) => a - b),
    );
  });

  it('idle_queue_timeout (feature level 481): seconds or "mobile", capped at the maximum; it wins over queue_lifespan_secs; the effective value is returned', async () => {
    const cases: [Record<string, string>, number][] = [
      [{}, 600],
      [{ idle_queue_timeout: '3600' }, 3600],
      [{ idle_queue_timeout: '1' }, 1],
      [{ idle_queue_timeout: '"mobile"' }, 43_200],
      [{ idle_queue_timeout: ' "mobile" ' }, 43_200],
      [{ idle_queue_timeout: 'mobile' }, 43_200],
      [{ idle_queue_timeout: '604800' }, 604_800],
      [{ idle_queue_timeout: '10000000' }, 604_800],
      [{ queue_lifespan_secs: '60' }, 60],
      [{ queue_lifespan_secs: '60', idle_queue_timeout: '3600' }, 3600],
      [{ queue_lifespan_secs: '0', idle_queue_timeout: '"mobile"' }, 43_200],
    ];
    for (const [form, seconds] of cases) {
      const { res, body } = await registered({ ...form, fetch_event_types: '[]' });
      expect(res.body, JSON.stringify(form)).toBe(JSON.stringify({ ...header(body.queue_id, seconds), last_event_id: -1 }));
      const queue = await ctx.db
        .selectFrom('event_queues')
        .select('lifespan_seconds')
        .where('id', '=', body.queue_id)
        .executeTakeFirstOrThrow();
      expect(queue.lifespan_seconds).toBe(seconds);
    }
  });

  it('idle_queue_timeout: bad values are 400s, checked after queue_lifespan_secs, and create no queue', async () => {
    const cases: [Record<string, string>, string][] = [
      [{ idle_queue_timeout: 'Mobile' }, 'idle_queue_timeout is not valid JSON'],
      [{ idle_queue_timeout: '' }, 'idle_queue_timeout is not valid JSON'],
      [{ idle_queue_timeout: '0' }, 'idle_queue_timeout is too small'],
      [{ idle_queue_timeout: '-60' }, 'idle_queue_timeout is too small'],
      [{ idle_queue_timeout: '"desktop"' }, 'Invalid idle_queue_timeout'],
      [{ idle_queue_timeout: '"3600"' }, 'Invalid idle_queue_timeout'],
      [{ idle_queue_timeout: '1.5' }, 'Invalid idle_queue_timeout'],
      [{ idle_queue_timeout: 'true' }, 'Invalid idle_queue_timeout'],
      [{ idle_queue_timeout: 'null' }, 'Invalid idle_queue_timeout'],
      [{ idle_queue_timeout: '["mobile"]' }, 'Invalid idle_queue_timeout'],
      [{ idle_queue_timeout: '0', queue_lifespan_secs: 'x' }, 'queue_lifespan_secs is not valid JSON'],
      [{ idle_queue_timeout: '0', event_types: '{}' }, 'event_types is not a list'],
    ];
    for (const [form, msg] of cases) {
      const res = await register(ctx.app, form);
      expect(res.statusCode, msg).toBe(400);
      expect(res.body).toBe(errorBody(msg));
    }
    expect(await queues(ctx.db)).toEqual([]);
  });

  it('event types containing NUL are accepted; they match no event (never a 500)', async () => {
    const { body } = await registered({
      event_types: '["\\u0000","navigation_view\\u0000x","subscription"]',
      fetch_event_types: '["\\u0000"]',
    });
    const queue = await ctx.db.selectFrom('event_queues').selectAll().where('id', '=', body.queue_id).executeTakeFirstOrThrow();
    expect(queue.event_types).toEqual(['subscription']);
    expect(Object.keys(body)).toEqual([...Object.keys(header('')), 'last_event_id']);
  });

  it('other capabilities are accepted and ignored', async () => {
    const { body } = await registered({
      fetch_event_types: '["realm_user"]',
      client_capabilities: '{"user_avatar_url_field_optional":true,"bulk_message_deletion":true}',
    });
    expect(JSON.stringify(body.realm_users)).toContain('"avatar_url":null');
  });

  it('costs a constant number of statements, whatever the sections', async () => {
    ctx.database.statements.length = 0;
    await registered();
    const all = ctx.database.statements.length;
    // Two round trips: authentication; then BEGIN, the user's lock, the organization's membership
    // lock (shared), queue, users, subscriptions, views and COMMIT, sent in one burst.
    expect(all).toBe(9);
    ctx.database.statements.length = 0;
    await registered({ fetch_event_types: '[]' });
    expect(ctx.database.statements.length).toBe(all - 3);
  });

  it('case 171: register racing a colour change never both includes and misses the change (100 runs)', async () => {
    let seenInState = 0;
    let seenAsEvent = 0;
    for (let run = 0; run < 100; run++) {
      const before = run === 0 ? '#76ce90' : `#${(run - 1).toString(16).padStart(6, '0')}`;
      const color = `#${run.toString(16).padStart(6, '0')}`;
      const [registration, change] = await Promise.all([
        register(ctx.app, { fetch_event_types: '["subscription"]', event_types: '["subscription"]' }),
        setColor(ctx.app, color),
      ]);
      expect(change.statusCode, change.body).toBe(200);
      const body = registration.json();
      const stateColor = body.subscriptions[0].color;
      const colorEvents = (await pendingEvents(ctx.app, body.queue_id)).filter((event) => event.property === 'color');
      if (stateColor === color) {
        expect(colorEvents).toEqual([]);
        seenInState++;
      } else {
        expect(stateColor).toBe(before);
        expect(colorEvents).toEqual([{ type: 'subscription', op: 'update', property: 'color', value: color, stream_id: 100, id: 0 }]);
        seenAsEvent++;
      }
    }
    expect(seenInState + seenAsEvent).toBe(100);
  });

  it('requires authentication', async () => {
    const res = await api(ctx.app, { method: 'POST', url: '/api/v1/register' });
    expect(res.statusCode).toBe(401);
    expect(await queues(ctx.db)).toEqual([]);
  });
});
