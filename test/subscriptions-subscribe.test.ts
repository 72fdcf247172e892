import { beforeEach, describe, expect, it } from 'vitest';
import { api, useSharedTestContext } from './helpers/app.js';
import { missingArgument, success } from './helpers/envelope.js';
import { createQueue, ids, queueEvents } from './helpers/fixture.js';
import { activeChannelsOf, expectMembershipUnchanged, membershipState, streamObject, subscribe } from './helpers/membership.js';

const { A, M, U, V, G, B, H, D, X, P, Q, S, Z, W } = ids;

const ctx = useSharedTestContext();

const rejects = (form: Record<string, unknown>, msg: string, as: Parameters<typeof subscribe>[2] = 'U') =>
  expectMembershipUnchanged(ctx, () => subscribe(ctx, form, as), msg);

const channelRow = (name: string) => ctx.db.selectFrom('streams').selectAll().where('name', '=', name).executeTakeFirstOrThrow();

const subscriptionObject = (row: Awaited<ReturnType<typeof channelRow>>, color: string, subscribers: number[]) => ({
  is_archived: row.deactivated,
  audible_notifications: null,
  color,
  creator_id: row.creator_id,
  date_created: Math.floor(row.date_created.getTime() / 1000),
  description: row.description,
  desktop_notifications: null,
  email_notifications: null,
  first_message_id: null,
  history_public_to_subscribers: row.history_public_to_subscribers,
  in_home_view: true,
  invite_only: row.invite_only,
  is_muted: false,
  is_web_public: row.is_web_public,
  message_retention_days: row.message_retention_days,
  name: row.name,
  pin_to_top: false,
  push_notifications: null,
  rendered_description: row.rendered_description,
  stream_id: row.id,
  stream_weekly_traffic: null,
  wildcard_mentions_notify: null,
  subscribers,
});

const eventsOf = async (queue: string) => JSON.stringify(await queueEvents(ctx.db, queue));
const withIds = (events: object[]) => JSON.stringify(events.map((event, id) => ({ ...event, id })));

describe('POST /users/me/subscriptions: creating and subscribing oneself', () => {
  beforeEach(() => ctx.ownDatabase());

  it('creates a channel: exact body, the row, and the events each user gets', async () => {
    const [qU, qV, qO, qG] = [
      await createQueue(ctx.db, 'U'),
      await createQueue(ctx.db, 'V'),
      await createQueue(ctx.db, 'O'),
      await createQueue(ctx.db, 'G'),
    ];
    const res = await subscribe(ctx, { subscriptions: [{ name: ' new1 ', description: 'line1\nline2' }] });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(success({ subscribed: { [U]: ['new1'] }, already_subscribed: {}, new_subscription_messages_sent: true }));
    const row = await channelRow('new1');
    expect(row).toMatchObject({
      realm_id: 1,
      creator_id: U,
      invite_only: false,
      is_web_public: false,
      history_public_to_subscribers: true,
      description: 'line1 line2',
    });
    expect(row.rendered_description).toBe('<p>line1 line2</p>');
    // U's palette: #76ce90 is taken (P), Z's default #c2c2c2 too; the next free one.
    const created = { type: 'stream', op: 'create', streams: [streamObject(row)] };
    const peerAdd = { type: 'subscription', op: 'peer_add', stream_ids: [row.id], user_ids: [U] };
    expect(await eventsOf(qU)).toBe(
      withIds([created, { type: 'subscription', op: 'add', subscriptions: [subscriptionObject(row, '#fae589', [U])] }]),
    );
    expect(await eventsOf(qV)).toBe(withIds([created, peerAdd]));
    expect(await eventsOf(qO)).toBe(withIds([created, peerAdd]));
    // A public channel is not shown to guests who are not on it.
    expect(await eventsOf(qG)).toBe('[]');
  });

  it("a queue that names its event types gets its own user's events of those types, never another user's", async () => {
    const [qU, qV, qG] = [
      await createQueue(ctx.db, 'U', ['subscription']),
      await createQueue(ctx.db, 'V', ['subscription', 'stream']),
      await createQueue(ctx.db, 'G', ['subscription']),
    ];
    const res = await subscribe(ctx, { subscriptions: [{ name: 'secret' }], invite_only: true });
    expect(res.statusCode).toBe(200);
    const row = await channelRow('secret');
    // U's stream/create is not among its queue's types; V and G may not see the private channel.
    expect(await eventsOf(qU)).toBe(
      withIds([{ type: 'subscription', op: 'add', subscriptions: [subscriptionObject(row, '#fae589', [U])] }]),
    );
    expect(await eventsOf(qV)).toBe('[]');
    expect(await eventsOf(qG)).toBe('[]');
  });

  it('names match case-insensitively: already subscribed, under the stored name; nothing is written', async () => {
    await subscribe(ctx, { subscriptions: [{ name: 'new1' }] });
    const queue = await createQueue(ctx.db, 'V');
    const before = await membershipState(ctx);
    const res = await subscribe(ctx, { subscriptions: [{ name: 'NEW1' }, { name: 'p' }, { name: 'New1' }] });
    expect(res.body).toBe(success({ subscribed: {}, already_subscribed: { [U]: ['new1', 'P'] }, new_subscription_messages_sent: true }));
    expect(await membershipState(ctx)).toEqual(before);
    expect(await eventsOf(queue)).toBe('[]');
  });

  it('an existing public channel: subscribed with a palette colour or the requested one; an inactive row is reactivated with its settings', async () => {
    await ctx.db
      .insertInto('subscriptions')
      .values({ realm_id: 1, user_id: U, stream_id: W, color: '#123456', active: false, pin_to_top: true })
      .execute();
    const queue = await createQueue(ctx.db, 'U');
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Q', color: '#abcdef' }, { name: 'W' }] });
    expect(res.body).toBe(success({ subscribed: { [U]: ['Q', 'W'] }, already_subscribed: {}, new_subscription_messages_sent: true }));
    const rows = await ctx.db
      .selectFrom('subscriptions')
      .select(['stream_id', 'color', 'pin_to_top', 'active'])
      .where('user_id', '=', U)
      .where('stream_id', 'in', [Q, W])
      .orderBy('stream_id')
      .execute();
    expect(rows).toEqual([
      { stream_id: Q, color: '#abcdef', pin_to_top: false, active: true },
      { stream_id: W, color: '#123456', pin_to_top: true, active: true },
    ]);
    const events = await queueEvents(ctx.db, queue);
    expect(events.map((event) => event.op)).toEqual(['add']);
    const subscriptions = events[0]!.subscriptions as { stream_id: number; color: string; pin_to_top: boolean; subscribers: number[] }[];
    expect(subscriptions.map(({ stream_id, color, pin_to_top, subscribers }) => ({ stream_id, color, pin_to_top, subscribers }))).toEqual([
      { stream_id: Q, color: '#abcdef', pin_to_top: false, subscribers: [U, V] },
      { stream_id: W, color: '#123456', pin_to_top: true, subscribers: [U, V] },
    ]);
  });

  it('an archived channel can be subscribed to (feature level 362)', async () => {
    await ctx.db.updateTable('subscriptions').set({ active: false }).where('user_id', '=', U).where('stream_id', '=', Z).execute();
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Z' }] });
    expect(res.body).toBe(success({ subscribed: { [U]: ['Z'] }, already_subscribed: {}, new_subscription_messages_sent: true }));
  });

  it('send_new_subscription_messages=false leaves new_subscription_messages_sent out; unknown parameters are listed', async () => {
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Q' }], send_new_subscription_messages: false, announce: true, foo: '1' });
    expect(res.body).toBe(
      success({ subscribed: { [U]: ['Q'] }, already_subscribed: {}, ignored_parameters_unsupported: ['announce', 'foo'] }),
    );
  });

  it('a private channel: shown to its creator and the administrators; others learn nothing', async () => {
    const [qU, qV, qA] = [await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'V'), await createQueue(ctx.db, 'A')];
    const res = await subscribe(ctx, { subscriptions: [{ name: 'secret' }], invite_only: true });
    expect(res.statusCode).toBe(200);
    const row = await channelRow('secret');
    expect(row).toMatchObject({ invite_only: true, history_public_to_subscribers: false });
    expect((await queueEvents(ctx.db, qU)).map((event) => `${String(event.type)}/${String(event.op)}`)).toEqual([
      'stream/create',
      'subscription/add',
    ]);
    expect(await eventsOf(qA)).toBe(
      withIds([
        { type: 'stream', op: 'create', streams: [streamObject(row)] },
        { type: 'subscription', op: 'peer_add', stream_ids: [row.id], user_ids: [U] },
      ]),
    );
    expect(await eventsOf(qV)).toBe('[]');
  });

  it('bots may subscribe', async () => {
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Q' }] }, 'B');
    expect(res.body).toBe(success({ subscribed: { [B]: ['Q'] }, already_subscribed: {}, new_subscription_messages_sent: true }));
  });
});

describe('POST /users/me/subscriptions: principals', () => {
  it('by ids: each user once; other users get peer_add, the subscribed ones subscription/add', async () => {
    await ctx.ownDatabase();
    const [qU, qV, qM] = [await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'V'), await createQueue(ctx.db, 'M')];
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Q' }, { name: 'P' }], principals: [V, B, U, V] });
    expect(res.body).toBe(
      success({
        subscribed: { [U]: ['Q'], [B]: ['Q', 'P'] },
        already_subscribed: { [U]: ['P'], [V]: ['Q', 'P'] },
        new_subscription_messages_sent: true,
      }),
    );
    expect(await activeChannelsOf(ctx, B)).toEqual([Q, P].sort());
    expect((await queueEvents(ctx.db, qU)).map((event) => String(event.op))).toEqual(['add', 'peer_add']);
    expect(JSON.stringify((await queueEvents(ctx.db, qV)).map(({ op, stream_ids, user_ids }) => ({ op, stream_ids, user_ids })))).toBe(
      JSON.stringify([
        { op: 'peer_add', stream_ids: [P], user_ids: [B] },
        { op: 'peer_add', stream_ids: [Q], user_ids: [U, B] },
      ]),
    );
    // P has a guest subscriber: an event of its own (first), the batched ones after; M sees both.
    expect((await queueEvents(ctx.db, qM)).map((event) => event.stream_ids)).toEqual([[P], [Q]]);
  });

  it('by API emails, case-insensitively; a hidden address is named by its dummy address', async () => {
    await ctx.ownDatabase();
    await ctx.db.updateTable('users').set({ email_address_visibility: 3 }).where('id', '=', M).execute();
    const res = await subscribe(ctx, {
      subscriptions: [{ name: 'Q' }],
      principals: [' V@Example.com', 'b-bot@chat.example.com', `user${M}@chat.example.com`],
    });
    expect(res.body).toBe(
      success({ subscribed: { [M]: ['Q'], [B]: ['Q'] }, already_subscribed: { [V]: ['Q'] }, new_subscription_messages_sent: true }),
    );
    await rejects({ subscriptions: [{ name: 'Q' }], principals: ['mod@example.com'] }, 'No such user');
  });

  it('principals equal to the caller alone subscribe the caller', async () => {
    await ctx.ownDatabase();
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Q' }], principals: [U] });
    expect(res.body).toBe(success({ subscribed: { [U]: ['Q'] }, already_subscribed: {}, new_subscription_messages_sent: true }));
  });

  it('guests and bots may be subscribed by others', async () => {
    await ctx.ownDatabase();
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Q' }], principals: [G, H] });
    expect(res.body).toBe(
      success({ subscribed: { [G]: ['Q'], [H]: ['Q'] }, already_subscribed: {}, new_subscription_messages_sent: true }),
    );
  });

  it('a guest newly subscribed to a public channel is shown it (stream/create)', async () => {
    await ctx.ownDatabase();
    const queue = await createQueue(ctx.db, 'G');
    await subscribe(ctx, { subscriptions: [{ name: 'Q' }], principals: [G] });
    expect((await queueEvents(ctx.db, queue)).map((event) => `${String(event.type)}/${String(event.op)}`)).toEqual([
      'stream/create',
      'subscription/add',
    ]);
  });

  it('unknown, other-organization and deactivated principals; a channel the request would create stays uncreated', async () => {
    for (const principals of [[999999], [X], [V, 2 ** 40], ['nobody@example.com'], ['x@example.com']]) {
      await rejects({ subscriptions: [{ name: 'brand new' }], principals }, 'No such user');
    }
    await rejects({ subscriptions: [{ name: 'brand new' }], principals: [D] }, 'User is deactivated');
    // Unknown before deactivated, whatever the order.
    await rejects({ subscriptions: [{ name: 'brand new' }], principals: [D, 999999] }, 'No such user');
  });
});

describe('POST /users/me/subscriptions: refusals change nothing', () => {
  it('guests are refused before their parameters are read', async () => {
    await rejects({ subscriptions: [{ name: 'Q' }] }, 'Not allowed for guest users', 'G');
    await rejects({}, 'Not allowed for guest users', 'G');
    await rejects({ subscriptions: 'nope' }, 'Not allowed for guest users', 'G');
  });

  it('parameters, as Zulip words them', async () => {
    const res = await subscribe(ctx, {});
    expect(res.body).toBe(missingArgument('subscriptions'));
    await rejects({ subscriptions: 'nope' }, 'subscriptions is not valid JSON');
    await rejects({ subscriptions: '{}' }, 'subscriptions is not a list');
    await rejects(
      { subscriptions: ['Q'] },
      'Invalid subscriptions[0]: Input should be a valid dictionary or instance of AddSubscriptionData',
    );
    await rejects({ subscriptions: [{}] }, 'subscriptions[0]["name"] field is missing: Field required');
    await rejects({ subscriptions: [{ name: 1 }] }, 'subscriptions[0]["name"] is not a string');
    // Neither reaches PostgreSQL inside JSON (each failed there as a 500).
    await rejects({ subscriptions: [{ name: 'new', description: 'a\u0000b' }] }, 'Invalid characters in subscriptions[0]["description"]');
    await rejects({ subscriptions: [{ name: 'new', description: 'a\ud800b' }] }, 'Invalid characters in subscriptions[0]["description"]');
    await rejects(
      { subscriptions: [{ name: 'a', color: 'red' }] },
      'Invalid subscriptions[0]: Value error, add.color is not a valid hex color code',
    );
    await rejects(
      { subscriptions: [{ name: 'a', description: 'x'.repeat(1025) }] },
      'subscriptions[0]["description"] is too long (limit: 1024 characters)',
    );
    await rejects({ subscriptions: [{ name: 'a' }], principals: [{}] }, 'principals["list[str]"][0] is not a string');
    await rejects({ subscriptions: [{ name: 'a' }], principals: [1, 'x'] }, 'principals["list[int]"][1] is not an integer');
    await rejects({ subscriptions: [{ name: 'a' }], invite_only: 'yes' }, 'invite_only is not valid JSON');
    await rejects({ subscriptions: [{ name: 'a' }], authorization_errors_fatal: 1 }, 'authorization_errors_fatal is not a boolean');
    await rejects(
      { subscriptions: Array.from({ length: 1001 }, (_, i) => ({ name: `c${i}` })) },
      'subscriptions is too long (limit: 1000 items)',
    );
    await rejects(
      { subscriptions: [{ name: 'a' }], principals: Array.from({ length: 1001 }, () => U) },
      'principals is too long (limit: 1000 items)',
    );
  });

  it('channel names (Zulip check_stream_name), every name before any other check', async () => {
    await rejects({ subscriptions: [{ name: '  ' }] }, "Channel name can't be empty.");
    await rejects({ subscriptions: [{ name: 'x'.repeat(61) }] }, 'Channel name too long (limit: 60 characters).');
    await rejects({ subscriptions: [{ name: 'abc\u0000' }] }, 'Invalid character in channel name, at position 4.');
    await rejects({ subscriptions: [{ name: 'S' }, { name: 'a\nb' }] }, 'Invalid character in channel name, at position 2.');
    await rejects({ subscriptions: [{ name: 'new' }, { name: '' }], principals: [999999] }, "Channel name can't be empty.");
  });

  it('private channels the caller is not on: fatal by default (administrators too), listed otherwise', async () => {
    await ctx.ownDatabase();
    await rejects({ subscriptions: [{ name: 'Q' }, { name: 's' }] }, 'Unable to access channel (S).');
    await rejects({ subscriptions: [{ name: 'S' }] }, 'Unable to access channel (S).', 'A');
    await rejects({ subscriptions: [{ name: 'S' }] }, 'Unable to access channel (S).', 'O');
    const res = await subscribe(ctx, { subscriptions: [{ name: 'S' }, { name: 'Q' }], authorization_errors_fatal: false });
    expect(res.body).toBe(
      success({ subscribed: { [U]: ['Q'] }, already_subscribed: {}, new_subscription_messages_sent: true, unauthorized: ['S'] }),
    );
    expect(await activeChannelsOf(ctx, U)).toEqual([P, Q, Z]);
    // Checked before the principals.
    await rejects({ subscriptions: [{ name: 'S' }], principals: [999999] }, 'Unable to access channel (S).');
  });

  it('a subscriber of a private channel may add others to it', async () => {
    await ctx.ownDatabase();
    const res = await subscribe(ctx, { subscriptions: [{ name: 'S' }], principals: [U] }, 'V');
    expect(res.body).toBe(success({ subscribed: { [U]: ['S'] }, already_subscribed: {}, new_subscription_messages_sent: true }));
  });

  it('web-public channels cannot be created', async () => {
    await ctx.ownDatabase();
    await rejects({ subscriptions: [{ name: 'web' }], is_web_public: true }, 'Web-public channels are not enabled.');
    // Only creation is refused.
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Q' }], is_web_public: true });
    expect(res.statusCode).toBe(200);
  });

  it("a channel of another organization is not found: it is created in the caller's", async () => {
    await ctx.ownDatabase();
    const res = await subscribe(ctx, { subscriptions: [{ name: 'C2' }] });
    expect(res.statusCode).toBe(200);
    expect((await channelRow('C2')).realm_id).toBe(2);
    expect(await ctx.db.selectFrom('streams').select('realm_id').where('name', '=', 'C2').orderBy('realm_id').execute()).toEqual([
      { realm_id: 1 },
      { realm_id: 2 },
    ]);
  });
});

describe('POST /users/me/subscriptions: cost', () => {
  beforeEach(() => ctx.ownDatabase());

  it('a constant number of statements whatever the number of channels and principals', async () => {
    const count = async (form: Record<string, unknown>) => {
      ctx.database.statements.length = 0;
      const res = await subscribe(ctx, form);
      expect(res.statusCode).toBe(200);
      return ctx.database.statements.length;
    };
    const one = await count({ subscriptions: [{ name: 'one' }] });
    const many = await count({
      subscriptions: Array.from({ length: 60 }, (_, i) => ({ name: `many${i}` })).concat([{ name: 'P' }, { name: 'Q' }]),
      principals: [U, V, M, B, G],
    });
    expect(many).toBe(one);
    // Authentication, BEGIN, the user's lock, the organization's lock, the read, the write, COMMIT.
    expect(one).toBe(7);
    // Nothing to write: no write statement.
    expect(await count({ subscriptions: [{ name: 'P' }] })).toBe(6);
  });
});

describe('register after subscribing', () => {
  beforeEach(() => ctx.ownDatabase());

  it('the subscriptions section has the new channel, with its subscribers', async () => {
    await subscribe(ctx, { subscriptions: [{ name: 'new1' }], principals: [U, V] });
    const res = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/register',
      as: 'V',
      form: { fetch_event_types: '["subscription"]', include_subscribers: 'true' },
    });
    const body = JSON.parse(res.body) as { subscriptions: { name: string; subscribers: number[] }[] };
    expect(body.subscriptions.find((sub) => sub.name === 'new1')?.subscribers).toEqual([U, V]);
    void A;
    void S;
  });
});
