import { afterEach, beforeAll, afterAll, describe, expect, it } from 'vitest';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { expectError, success } from './helpers/envelope.js';
import { type FixtureUser, ids, restrict } from './helpers/fixture.js';

const { U, V, G, B, D, X, P, Q, S, Z, W, C2 } = ids;

let ctx: TestContext;
beforeAll(async () => {
  ctx = await createTestContext();
});
afterAll(() => ctx.close());
afterEach(async () => {
  await ctx.db.updateTable('realms').set({ can_access_all_users_group: 'everyone' }).execute();
});

const status = (userId: number | string, streamId: number | string, as: FixtureUser = 'U') =>
  api(ctx.app, { url: `/api/v1/users/${userId}/subscriptions/${streamId}`, as });
const members = (streamId: number | string, as: FixtureUser = 'U') => api(ctx.app, { url: `/api/v1/streams/${streamId}/members`, as });

describe('GET /users/{user_id}/subscriptions/{stream_id}', () => {
  it('answers is_subscribed', async () => {
    expect((await status(U, P)).body).toBe(success({ is_subscribed: true }));
    expect((await status(U, Q)).body).toBe(success({ is_subscribed: false }));
    expect((await status(V, S, 'A')).body).toBe(success({ is_subscribed: true }));
    expect((await status(B, P)).body).toBe(success({ is_subscribed: false }));
    // Archived channels are served (feature level 480).
    expect((await status(U, Z)).body).toBe(success({ is_subscribed: true }));
    expect((await status(V, W, 'G')).body).toBe(success({ is_subscribed: true }));
    expect(await status(U, P, 'U').then((res) => res.statusCode)).toBe(200);
  });

  it('refusals: the user first, then the channel', async () => {
    expectError(await status(999999, P), 'No such user');
    expectError(await status(X, P), 'No such user');
    expectError(await status(99999999999, P), 'No such user');
    expectError(await status(D, P), 'User is deactivated');
    expectError(await status(999999, 999999), 'No such user');
    expectError(await status(U, 999999), 'Invalid channel ID');
    expectError(await status(U, C2), 'Invalid channel ID');
    expectError(await status(V, S), 'Invalid channel ID');
    expectError(await status(V, S, 'M'), 'Invalid channel ID');
    expectError(await status(V, Q, 'G'), 'Invalid channel ID');
    expect((await status('abc', P)).statusCode).toBe(404);
  });

  it('a guest of a restricted organization cannot ask about users it cannot see', async () => {
    await restrict(ctx.db);
    expectError(await status(ids.O, P, 'G'), 'Insufficient permission');
    expect((await status(V, P, 'G')).body).toBe(success({ is_subscribed: true }));
  });
});

describe('GET /streams/{stream_id}/members', () => {
  it('answers the active users subscribed, ascending', async () => {
    expect((await members(P)).body).toBe(success({ subscribers: [U, V, G] }));
    expect((await members(Q)).body).toBe(success({ subscribers: [V] }));
    expect((await members(S, 'A')).body).toBe(success({ subscribers: [V] }));
    expect((await members(W, 'G')).body).toBe(success({ subscribers: [V] }));
    expect((await members(Z)).body).toBe(success({ subscribers: [U] }));
    expect((await members(P, 'B')).body).toBe(success({ subscribers: [U, V, G] }));
  });

  it('refusals', async () => {
    expectError(await members(S), 'Invalid channel ID');
    expectError(await members(S, 'M'), 'Invalid channel ID');
    expectError(await members(Q, 'G'), 'Invalid channel ID');
    expectError(await members(99999999), 'Invalid channel ID');
    expectError(await members(C2), 'Invalid channel ID');
    expect((await members('x')).statusCode).toBe(404);
  });
});
