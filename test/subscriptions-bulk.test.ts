import { beforeEach, describe, expect, it } from 'vitest';
import { api, createTestContext, multipart, useSharedTestContext } from './helpers/app.js';
import { methodNotAllowed, missingArgument, OK, success } from './helpers/envelope.js';
import { createQueue, ids, queueEvents } from './helpers/fixture.js';
import {
  auditRows,
  bulk,
  expectRejectedWithoutChanges,
  PROPERTIES_URL,
  subscriptionEvent as event,
  subscriptionOf,
  writableState,
} from './helpers/subscriptions.js';

const { U, P, Q, S, Z, W, C2 } = ids;
const BOOLEAN_PROPERTIES = [
  'pin_to_top',
  'desktop_notifications',
  'audible_notifications',
  'push_notifications',
  'email_notifications',
  'wildcard_mentions_notify',
] as const;

// The errors change nothing: their tests share the fixture (with a queue of U's); the others write.
const ctx = useSharedTestContext(async () => {
  const context = await createTestContext();
  return { ...context, queue: await createQueue(context.db, 'U') };
});

const rejects = (data: unknown, msg: string, as: 'U' | 'A' | 'G' = 'U') =>
  expectRejectedWithoutChanges(ctx, () => bulk(ctx, data, as), msg);

describe('POST /users/me/subscriptions/properties: success', () => {
  beforeEach(() => ctx.ownDatabase());

  it('case 43: sets the colour; body exactly OK; one event; other subscriptions untouched', async () => {
    const zBefore = await subscriptionOf(ctx, U, Z);
    const res = await bulk(ctx, [{ stream_id: P, property: 'color', value: '#ffffff' }]);
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).color).toBe('#ffffff');
    expect(await subscriptionOf(ctx, U, Z)).toEqual(zBefore);
    expect(JSON.stringify(await queueEvents(ctx.db, ctx.queue))).toBe(
      JSON.stringify([{ type: 'subscription', op: 'update', property: 'color', value: '#ffffff', stream_id: P, id: 0 }]),
    );
  });

  it.each(['#abc', '#ABCDEF', '#abcd', '#AbCdE'])('case 44: colour %s is stored exactly as sent', async (color) => {
    const res = await bulk(ctx, [{ stream_id: P, property: 'color', value: color }]);
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).color).toBe(color);
  });

  it('case 46: is_muted true gives in_home_view then is_muted events', async () => {
    expect((await bulk(ctx, [{ stream_id: P, property: 'is_muted', value: true }])).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).is_muted).toBe(true);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event('in_home_view', false, P, 0), event('is_muted', true, P, 1)]);
  });

  it('case 47: in_home_view true on a muted channel unmutes it', async () => {
    await ctx.db.updateTable('subscriptions').set({ is_muted: true }).where('user_id', '=', U).where('stream_id', '=', P).execute();
    expect((await bulk(ctx, [{ stream_id: P, property: 'in_home_view', value: true }])).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).is_muted).toBe(false);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event('in_home_view', true, P, 0), event('is_muted', false, P, 1)]);
  });

  it('case 48: in_home_view false mutes', async () => {
    expect((await bulk(ctx, [{ stream_id: P, property: 'in_home_view', value: false }])).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).is_muted).toBe(true);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event('in_home_view', false, P, 0), event('is_muted', true, P, 1)]);
  });

  it.each(BOOLEAN_PROPERTIES)('case 49: %s true then false, one event each', async (property) => {
    expect((await bulk(ctx, [{ stream_id: P, property, value: true }])).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P))[property]).toBe(true);
    expect((await bulk(ctx, [{ stream_id: P, property, value: false }])).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P))[property]).toBe(false);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event(property, true, P, 0), event(property, false, P, 1)]);
  });

  it('case 57: an empty list succeeds and does nothing', async () => {
    const before = await writableState(ctx);
    const res = await bulk(ctx, []);
    expect(res.body).toBe(OK);
    expect(await writableState(ctx)).toEqual(before);
  });

  it('case 64: a guest may change a subscribed public channel', async () => {
    expect((await bulk(ctx, [{ stream_id: P, property: 'pin_to_top', value: true }], 'G')).body).toBe(OK);
    expect((await subscriptionOf(ctx, ids.G, P)).pin_to_top).toBe(true);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([]);
  });

  it('case 68: duplicates apply in order, the last one wins, each has its event', async () => {
    const res = await bulk(ctx, [
      { stream_id: P, property: 'color', value: '#111111' },
      { stream_id: P, property: 'color', value: '#222222' },
    ]);
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).color).toBe('#222222');
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event('color', '#111111', P, 0), event('color', '#222222', P, 1)]);
  });

  it('case 69: is_muted then in_home_view: four events, final is_muted false', async () => {
    const res = await bulk(ctx, [
      { stream_id: P, property: 'is_muted', value: true },
      { stream_id: P, property: 'in_home_view', value: true },
    ]);
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).is_muted).toBe(false);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([
      event('in_home_view', false, P, 0),
      event('is_muted', true, P, 1),
      event('in_home_view', true, P, 2),
      event('is_muted', false, P, 3),
    ]);
  });

  it('case 70: writing the current value still counts', async () => {
    expect((await bulk(ctx, [{ stream_id: P, property: 'pin_to_top', value: false }])).body).toBe(OK);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event('pin_to_top', false, P, 0)]);
    expect(await auditRows(ctx)).toHaveLength(1);
  });

  it('case 71: three properties stored, three events in entry order', async () => {
    const res = await bulk(ctx, [
      { stream_id: P, property: 'pin_to_top', value: true },
      { stream_id: P, property: 'color', value: '#123456' },
      { stream_id: P, property: 'desktop_notifications', value: false },
    ]);
    expect(res.body).toBe(OK);
    expect(await subscriptionOf(ctx, U, P)).toMatchObject({ pin_to_top: true, color: '#123456', desktop_notifications: false });
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([
      event('pin_to_top', true, P, 0),
      event('color', '#123456', P, 1),
      event('desktop_notifications', false, P, 2),
    ]);
  });

  it('case 72: unknown parameters are reported, client is not', async () => {
    const res = await bulk(ctx, [{ stream_id: P, property: 'pin_to_top', value: true }], 'U', {
      invalid_parameter: 'x',
      client: 'foo',
    });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(success({ ignored_parameters_unsupported: ['invalid_parameter'] }));
  });

  it('case 73: extra keys inside an entry are ignored', async () => {
    expect((await bulk(ctx, [{ stream_id: P, property: 'pin_to_top', value: true, foo: 1 }])).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
  });

  it('case 74: events reach every U queue accepting subscription events, and nobody else', async () => {
    const second = await createQueue(ctx.db, 'U');
    const navigationOnly = await createQueue(ctx.db, 'U', ['navigation_view']);
    const subscriptionOnly = await createQueue(ctx.db, 'U', ['subscription']);
    const otherUser = await createQueue(ctx.db, 'V');
    expect((await bulk(ctx, [{ stream_id: P, property: 'pin_to_top', value: true }])).body).toBe(OK);
    for (const id of [ctx.queue, second, subscriptionOnly]) {
      expect(await queueEvents(ctx.db, id)).toEqual([event('pin_to_top', true, P, 0)]);
    }
    expect(await queueEvents(ctx.db, navigationOnly)).toEqual([]);
    expect(await queueEvents(ctx.db, otherUser)).toEqual([]);
  });

  it('changes several channels in one request', async () => {
    await ctx.db
      .insertInto('subscriptions')
      .values([
        { realm_id: 1, user_id: U, stream_id: Q, color: '#000001' },
        { realm_id: 1, user_id: U, stream_id: W, color: '#000002' },
      ])
      .execute();
    const res = await bulk(ctx, [
      { stream_id: W, property: 'is_muted', value: true },
      { stream_id: P, property: 'color', value: '#abcdef' },
      { stream_id: Q, property: 'pin_to_top', value: true },
      { stream_id: W, property: 'email_notifications', value: true },
    ]);
    expect(res.body).toBe(OK);
    expect(await subscriptionOf(ctx, U, W)).toMatchObject({ is_muted: true, email_notifications: true, color: '#000002' });
    expect(await subscriptionOf(ctx, U, P)).toMatchObject({ color: '#abcdef', is_muted: false, pin_to_top: false });
    expect(await subscriptionOf(ctx, U, Q)).toMatchObject({ pin_to_top: true, color: '#000001', is_muted: false });
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([
      event('in_home_view', false, W, 0),
      event('is_muted', true, W, 1),
      event('color', '#abcdef', P, 2),
      event('pin_to_top', true, Q, 3),
      event('email_notifications', true, W, 4),
    ]);
  });
});

describe('POST /users/me/subscriptions/properties: audit log', () => {
  beforeEach(() => ctx.ownDatabase());

  it('records one row per (channel, stored setting) of a request: its value before the request and its final one, in request order', async () => {
    const res = await bulk(ctx, [
      { stream_id: P, property: 'color', value: '#111111' },
      { stream_id: P, property: 'color', value: '#222222' },
      { stream_id: P, property: 'in_home_view', value: false },
      { stream_id: P, property: 'is_muted', value: false },
      { stream_id: P, property: 'desktop_notifications', value: true },
      { stream_id: P, property: 'desktop_notifications', value: false },
    ]);
    expect(res.body).toBe(OK);
    const row = (property: string, oldValue: unknown, newValue: unknown) => ({
      realm_id: 1,
      acting_user_id: U,
      stream_id: P,
      property,
      old_value: oldValue,
      new_value: newValue,
    });
    // One row per setting however many entries set it (a request of 10,000 entries toggling one
    // setting writes one row): what one account adds a minute is bounded by the settings it has.
    // in_home_view and is_muted are one stored setting, is_muted, left as it was: still recorded.
    expect(await auditRows(ctx)).toEqual([
      row('color', '#76ce90', '#222222'),
      row('is_muted', false, false),
      row('desktop_notifications', null, false),
    ]);
    const times = await ctx.db.selectFrom('subscription_audit_log').select('created_at').execute();
    for (const { created_at } of times) expect(Math.abs(created_at.getTime() - Date.now())).toBeLessThan(60_000);
  });
});

describe('POST /users/me/subscriptions/properties: parameter and entry errors', () => {
  it.each([['3ffrff'], [false], ['#ffffff\n'], ['#fffffff'], ['#ggg'], [null], [5], ['#ff'], [['#fff']], [{}]])(
    'case 45: colour %j is rejected',
    async (value) => {
      await rejects(
        [{ stream_id: P, property: 'color', value }],
        'Invalid subscription_data[0]: Value error, color is not a valid hex color code',
      );
      expect((await subscriptionOf(ctx, U, P)).color).toBe('#76ce90');
    },
  );

  it.each([...BOOLEAN_PROPERTIES, 'is_muted', 'in_home_view'])('case 50: %s needs a boolean', async (property) => {
    for (const value of ['bad', 'true', 1, null, [], {}]) {
      await rejects([{ stream_id: P, property, value }], `${property} is not a boolean`);
    }
  });

  it('case 51: unknown property', async () => {
    await rejects([{ stream_id: P, property: 'bad', value: 'bad' }], 'Unknown subscription property: bad');
    await rejects([{ stream_id: P, property: '__proto__', value: true }], 'Unknown subscription property: __proto__');
  });

  it('cases 52–53: missing keys, checked stream_id, property, value', async () => {
    await rejects([{ property: 'color', value: '#ffffff' }], 'subscription_data[0]["stream_id"] field is missing: Field required');
    await rejects([{ stream_id: P, property: 'color' }], 'subscription_data[0]["value"] field is missing: Field required');
    await rejects([{ stream_id: P, value: true }], 'subscription_data[0]["property"] field is missing: Field required');
    await rejects([{}], 'subscription_data[0]["stream_id"] field is missing: Field required');
  });

  it('case 54: wrong key types', async () => {
    for (const streamId of ['100', true, 1.5, null, [100]]) {
      await rejects([{ stream_id: streamId, property: 'pin_to_top', value: true }], 'subscription_data[0]["stream_id"] is not an integer');
    }
    await rejects([{ stream_id: P, property: 5, value: true }], 'subscription_data[0]["property"] is not a string');
  });

  it('case 55: not JSON', async () => {
    await rejects('not-json', 'subscription_data is not valid JSON');
    await rejects('', 'subscription_data is not valid JSON');
  });

  it('case 56: not a list', async () => {
    await rejects({ stream_id: P }, 'subscription_data is not a list');
  });

  it('case 58: an entry that is not an object', async () => {
    await ctx.ownDatabase();
    await rejects([5], 'subscription_data[0] is not a dict');
    await rejects([{ stream_id: P, property: 'pin_to_top', value: true }, []], 'subscription_data[1] is not a dict');
  });

  it('missing subscription_data', async () => {
    const res = await api(ctx.app, { method: 'POST', url: PROPERTIES_URL, as: 'U', form: { other: 'x' } });
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(missingArgument('subscription_data'));
  });
});

describe('POST /users/me/subscriptions/properties: channel checks', () => {
  // The request's statement runs, and finds the entry it refuses.
  beforeEach(() => ctx.ownDatabase());

  it.each([999999, 0, -1, 99999999999, 2147483648, 1e30])('case 59: stream_id %d is an invalid channel', async (streamId) => {
    await rejects([{ stream_id: streamId, property: 'pin_to_top', value: true }], 'Invalid channel ID');
  });

  it('case 60: a public channel U is not subscribed to', async () => {
    await rejects([{ stream_id: Q, property: 'pin_to_top', value: true }], 'Not subscribed to channel ID 101');
  });

  it('case 61: a private channel, even for an administrator', async () => {
    await rejects([{ stream_id: S, property: 'pin_to_top', value: true }], 'Invalid channel ID');
    await rejects([{ stream_id: S, property: 'pin_to_top', value: true }], 'Invalid channel ID', 'A');
  });

  it('case 61 (branch): a subscriber of a private channel may change it', async () => {
    expect((await bulk(ctx, [{ stream_id: S, property: 'pin_to_top', value: true }], 'V')).body).toBe(OK);
    expect((await subscriptionOf(ctx, ids.V, S)).pin_to_top).toBe(true);
  });

  it('case 62: an archived channel, though U is subscribed', async () => {
    await rejects([{ stream_id: Z, property: 'pin_to_top', value: true }], 'Invalid channel ID');
  });

  it('case 63: a channel of another organization', async () => {
    await rejects([{ stream_id: C2, property: 'pin_to_top', value: true }], 'Invalid channel ID');
  });

  it('case 64: guests: public unsubscribed is invalid, web-public unsubscribed is not subscribed', async () => {
    await createQueue(ctx.db, 'G');
    await rejects([{ stream_id: Q, property: 'pin_to_top', value: true }], 'Invalid channel ID', 'G');
    await rejects([{ stream_id: W, property: 'pin_to_top', value: true }], 'Not subscribed to channel ID 104', 'G');
  });

  it('an inactive subscription is not a subscription', async () => {
    await ctx.db.updateTable('subscriptions').set({ active: false }).where('user_id', '=', U).where('stream_id', '=', P).execute();
    await rejects([{ stream_id: P, property: 'pin_to_top', value: true }], 'Not subscribed to channel ID 100');
  });

  it('case 65 and case 170 (first half): all or nothing, no event on failure', async () => {
    await rejects(
      [
        { stream_id: P, property: 'pin_to_top', value: true },
        { stream_id: Q, property: 'pin_to_top', value: true },
      ],
      'Not subscribed to channel ID 101',
    );
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(false);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([]);
  });

  it('case 66: the lowest-index failing entry decides', async () => {
    await rejects(
      [
        { stream_id: 999999, property: 'is_muted', value: true },
        { stream_id: P, property: 'bad', value: 1 },
      ],
      'Invalid channel ID',
    );
    await rejects(
      [
        { stream_id: P, property: 'pin_to_top', value: true },
        { stream_id: P, property: 'bad', value: 1 },
      ],
      'Unknown subscription property: bad',
    );
    await rejects([{ stream_id: Q, property: 'pin_to_top', value: true }, 5], 'Not subscribed to channel ID 101');
    await rejects(
      [
        { stream_id: P, property: 'pin_to_top', value: true },
        { stream_id: Q, property: 'pin_to_top', value: true },
        { stream_id: 999999, property: 'pin_to_top', value: true },
      ],
      'Not subscribed to channel ID 101',
    );
  });

  it('case 67: messages carry the failing index', async () => {
    await rejects(
      [
        { stream_id: P, property: 'pin_to_top', value: true },
        { stream_id: P, property: 'color', value: 'zzz' },
      ],
      'Invalid subscription_data[1]: Value error, color is not a valid hex color code',
    );
    await rejects(
      [
        { stream_id: P, property: 'pin_to_top', value: true },
        { stream_id: 'x', property: 'color', value: '#fff' },
      ],
      'subscription_data[1]["stream_id"] is not an integer',
    );
  });
});

describe('POST /users/me/subscriptions/properties: bodies (docs/api.md §5.1)', () => {
  const payload = [{ stream_id: P, property: 'pin_to_top', value: true }];

  it('case 10: a JSON body is not a parameter source', async () => {
    const before = await writableState(ctx);
    const res = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ subscription_data: payload }),
    });
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(missingArgument('subscription_data'));
    expect(await writableState(ctx)).toEqual(before);
  });

  it('case 11: multipart field', async () => {
    await ctx.ownDatabase();
    const res = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      ...multipart({ subscription_data: JSON.stringify(payload) }),
    });
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
  });

  it('case 12: query string of a POST with an empty body', async () => {
    await ctx.ownDatabase();
    const res = await api(ctx.app, {
      method: 'POST',
      url: `${PROPERTIES_URL}?subscription_data=${encodeURIComponent(JSON.stringify(payload))}`,
      as: 'U',
    });
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
  });

  it('the body wins over the query string', async () => {
    await ctx.ownDatabase();
    const res = await api(ctx.app, {
      method: 'POST',
      url: `${PROPERTIES_URL}?subscription_data=not-json`,
      as: 'U',
      form: { subscription_data: JSON.stringify(payload) },
    });
    expect(res.body).toBe(OK);
  });

  it('the last occurrence of the field wins', async () => {
    await ctx.ownDatabase();
    const res = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      form: [
        ['subscription_data', 'not-json'],
        ['subscription_data', JSON.stringify(payload)],
      ],
    });
    expect(res.body).toBe(OK);
  });

  it('case 2: GET on the path is 405 with POST allowed', async () => {
    const res = await api(ctx.app, { url: PROPERTIES_URL });
    expect(res.statusCode).toBe(405);
    expect(res.headers.allow).toBe('POST');
    expect(res.body).toBe(methodNotAllowed(['POST']));
  });
});
