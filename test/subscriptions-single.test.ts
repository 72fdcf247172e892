import { beforeEach, describe, expect, it } from 'vitest';
import { api, createTestContext, multipart, useSharedTestContext } from './helpers/app.js';
import { errorBody, methodNotAllowed, missingArgument, OK, success } from './helpers/envelope.js';
import { createQueue, ids, queueEvents } from './helpers/fixture.js';
import {
  auditRows,
  expectRejectedWithoutChanges,
  subscriptionEvent as event,
  subscriptionOf,
  writableState,
} from './helpers/subscriptions.js';

const { U, P } = ids;
const url = (streamId: number | string) => `/api/v1/users/me/subscriptions/${streamId}`;

// The errors change nothing: their tests share the fixture (with a queue of U's); the others write.
const ctx = useSharedTestContext(async () => {
  const context = await createTestContext();
  return { ...context, queue: await createQueue(context.db, 'U') };
});

const send = (form: Record<string, string> | [string, string][], streamId: number | string = P, method: 'PATCH' | 'POST' = 'PATCH') =>
  api(ctx.app, { method, url: url(streamId), as: 'U', form });

const rejects = (form: Record<string, string>, msg: string, streamId: number | string = P) =>
  expectRejectedWithoutChanges(ctx, () => send(form, streamId), msg);

describe('PATCH/POST /users/me/subscriptions/{stream_id}: success', () => {
  beforeEach(() => ctx.ownDatabase());

  it.each(['PATCH', 'POST'] as const)('cases 75–76: %s sets pin_to_top, one event, one audit row', async (method) => {
    const res = await send({ property: 'pin_to_top', value: 'true' }, P, method);
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
    expect(JSON.stringify(await queueEvents(ctx.db, ctx.queue))).toBe(
      JSON.stringify([{ type: 'subscription', op: 'update', property: 'pin_to_top', value: true, stream_id: P, id: 0 }]),
    );
    expect(await auditRows(ctx)).toEqual([
      { realm_id: 1, acting_user_id: U, stream_id: P, property: 'pin_to_top', old_value: false, new_value: true },
    ]);
  });

  it('case 77: colour', async () => {
    expect((await send({ property: 'color', value: '#00ff00' })).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).color).toBe('#00ff00');
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event('color', '#00ff00', P, 0)]);
  });

  it('case 78: is_muted gives in_home_view then is_muted events', async () => {
    expect((await send({ property: 'is_muted', value: 'true' })).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).is_muted).toBe(true);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event('in_home_view', false, P, 0), event('is_muted', true, P, 1)]);
  });

  it('in_home_view false mutes; the audit row names is_muted', async () => {
    expect((await send({ property: 'in_home_view', value: 'false' })).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).is_muted).toBe(true);
    expect(await queueEvents(ctx.db, ctx.queue)).toEqual([event('in_home_view', false, P, 0), event('is_muted', true, P, 1)]);
    expect(await auditRows(ctx)).toMatchObject([{ property: 'is_muted', old_value: false, new_value: true }]);
  });

  it('a JSON boolean with surrounding whitespace is a boolean', async () => {
    expect((await send({ property: 'desktop_notifications', value: ' false ' })).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).desktop_notifications).toBe(false);
  });

  it('leading zeros in the path name the same channel', async () => {
    expect((await send({ property: 'pin_to_top', value: 'true' }, '0100')).body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
  });

  it('case 85: multipart fields', async () => {
    const res = await api(ctx.app, { method: 'PATCH', url: url(P), as: 'U', ...multipart({ property: 'pin_to_top', value: 'true' }) });
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
  });

  it('case 86: a stream_id parameter is not the path parameter and is reported', async () => {
    const res = await send({ property: 'pin_to_top', value: 'true', stream_id: '7' });
    expect(res.body).toBe(success({ ignored_parameters_unsupported: ['stream_id'] }));
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
  });

  it('case 13: the body wins over the query string, nothing is ignored', async () => {
    const res = await api(ctx.app, {
      method: 'PATCH',
      url: `${url(P)}?property=nope`,
      as: 'U',
      form: { property: 'pin_to_top', value: 'true' },
    });
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
  });

  it('case 14: the last occurrence wins', async () => {
    const res = await send([
      ['property', 'nope'],
      ['property', 'pin_to_top'],
      ['value', 'true'],
    ]);
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).pin_to_top).toBe(true);
  });

  it('parameters from the query string alone', async () => {
    const res = await api(ctx.app, { method: 'POST', url: `${url(P)}?property=color&value=%23abc`, as: 'U' });
    expect(res.body).toBe(OK);
    expect((await subscriptionOf(ctx, U, P)).color).toBe('#abc');
  });
});

describe('PATCH/POST /users/me/subscriptions/{stream_id}: errors', () => {
  it.each(['True', '1', '"true"', '', 'null'])('case 79: is_muted value %j is not a boolean', async (value) => {
    await rejects({ property: 'is_muted', value }, 'is_muted is not a boolean');
  });

  it('case 80: unknown property, checked before the channel', async () => {
    await rejects({ property: 'nope', value: 'true' }, 'Unknown subscription property: nope');
    await rejects({ property: 'nope', value: 'true' }, 'Unknown subscription property: nope', ids.Q);
  });

  it('case 81: missing property, then missing value', async () => {
    const before = await writableState(ctx);
    const noFields = await send({});
    expect(noFields.statusCode).toBe(400);
    expect(noFields.body).toBe(missingArgument('property'));
    const noValue = await send({ property: 'pin_to_top' });
    expect(noValue.statusCode).toBe(400);
    expect(noValue.body).toBe(missingArgument('value'));
    expect(await writableState(ctx)).toEqual(before);
  });

  it('case 82: channel checks', async () => {
    await ctx.ownDatabase();
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Not subscribed to channel ID 101', ids.Q);
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Invalid channel ID', 999999);
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Invalid channel ID', ids.Z);
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Invalid channel ID', ids.S);
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Invalid channel ID', ids.C2);
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Invalid channel ID', 0);
  });

  it('out-of-range path ids are invalid channels, never a 500', async () => {
    await ctx.ownDatabase();
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Invalid channel ID', '99999999999');
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Invalid channel ID', '2147483648');
    await rejects({ property: 'pin_to_top', value: 'true' }, 'Invalid channel ID', '9'.repeat(400));
  });

  it.each(['zzz', 'true', '#fffffff', '#ffffff\n', 'ffffff'])('case 83: colour %j is invalid, without the bulk prefix', async (value) => {
    await rejects({ property: 'color', value }, 'color is not a valid hex color code');
    expect((await subscriptionOf(ctx, U, P)).color).toBe('#76ce90');
  });

  it('case 84: a JSON body is not a parameter source', async () => {
    const before = await writableState(ctx);
    const res = await api(ctx.app, {
      method: 'PATCH',
      url: url(P),
      as: 'U',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ property: 'pin_to_top', value: true }),
    });
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(missingArgument('property'));
    expect(await writableState(ctx)).toEqual(before);
  });
});

describe('routing of /users/me/subscriptions/{stream_id}', () => {
  it('case 6: a non-digit segment is 404', async () => {
    for (const segment of ['abc', '-1', '1a', '%31x']) {
      const res = await api(ctx.app, { method: 'PATCH', url: url(segment), as: 'U', form: { property: 'pin_to_top', value: 'true' } });
      expect(res.statusCode).toBe(404);
      expect(res.body).toBe(errorBody('Not Found'));
    }
  });

  it('case 3: GET is 405 with PATCH and POST allowed', async () => {
    const res = await api(ctx.app, { url: url(P) });
    expect(res.statusCode).toBe(405);
    expect(res.headers.allow).toBe('PATCH, POST');
    expect(res.body).toBe(methodNotAllowed(['PATCH', 'POST']));
  });
});
