import { describe, expect, it } from 'vitest';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { OK } from './helpers/envelope.js';
import { createQueue, type FixtureUser, ids, queueEvents } from './helpers/fixture.js';
import { streamObject } from './helpers/membership.js';

/**
 * PATCH /users/{id} role: the channels a role change gives or takes the sight of (Zulip's
 * send_stream_events_for_role_update). Fixture channels: P public (U, V, G subscribed), Q public
 * (V), S private (V), Z archived public (U), W web-public (V).
 */

const ctx = useTestContext(createTestContext);

const patchRole = (user: FixtureUser, role: number) =>
  api(ctx.app, { method: 'PATCH', url: `/api/v1/users/${ids[user]}`, as: 'O', form: { role: String(role) } });

const channelRow = (id: number) => ctx.db.selectFrom('streams').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

/** The stream object of stream events, from the channel's row. */
const streamObjectOf = async (id: number) => streamObject(await channelRow(id));

const roleUpdate = (user: FixtureUser, role: number, id: number) => ({
  type: 'realm_user',
  op: 'update',
  person: { user_id: ids[user], role },
  id,
});
const peerAdd = (streamId: number, userIds: number[], id: number) => ({
  type: 'subscription',
  op: 'peer_add',
  stream_ids: [streamId],
  user_ids: userIds,
  id,
});
const deletion = (streamIds: number[], id: number) => ({
  type: 'stream',
  op: 'delete',
  streams: streamIds.map((streamId) => ({ stream_id: streamId })),
  stream_ids: streamIds,
  for_archiving: false,
  id,
});

describe('PATCH /users/{id} role: stream events for the channels the user starts or stops seeing', () => {
  it('guest to member: stream/create and peer_add of the public channels it is not on, to the user only', async () => {
    const queueG = await createQueue(ctx.db, 'G');
    const queueU = await createQueue(ctx.db, 'U');
    expect((await patchRole('G', 400)).body).toBe(OK);
    // Q only: G is on P, sees W (web-public) already, not S (private), and Z is archived.
    expect(await queueEvents(ctx.db, queueG)).toEqual([
      roleUpdate('G', 400, 0),
      { type: 'stream', op: 'create', streams: [await streamObjectOf(ids.Q)], id: 1 },
      peerAdd(ids.Q, [ids.V], 2),
    ]);
    expect(await queueEvents(ctx.db, queueU)).toEqual([roleUpdate('G', 400, 0)]);
  });

  it('guest to administrator: the public and private channels, created in id order, private peer_add first', async () => {
    // A deactivated subscriber is not among the subscribers.
    await ctx.db.insertInto('subscriptions').values({ realm_id: 1, user_id: ids.D, stream_id: ids.S, color: '#c2c2c2' }).execute();
    const queueG = await createQueue(ctx.db, 'G');
    expect((await patchRole('G', 200)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueG)).toEqual([
      roleUpdate('G', 200, 0),
      { type: 'stream', op: 'create', streams: [await streamObjectOf(ids.Q), await streamObjectOf(ids.S)], id: 1 },
      peerAdd(ids.S, [ids.V], 2),
      peerAdd(ids.Q, [ids.V], 3),
    ]);
  });

  it('member to guest: stream/delete of the public channels it is not on; its own public channel stays', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    const queueV = await createQueue(ctx.db, 'V');
    expect((await patchRole('U', 600)).body).toBe(OK);
    // U is on P (kept) and on archived Z; Q goes.
    expect(await queueEvents(ctx.db, queueU)).toEqual([roleUpdate('U', 600, 0), deletion([ids.Q], 1)]);
    expect(await queueEvents(ctx.db, queueV)).toEqual([roleUpdate('U', 600, 0)]);
  });

  it('member to administrator gains the private channel; administrator to guest loses it and the public one in one event', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    expect((await patchRole('U', 200)).body).toBe(OK);
    expect((await patchRole('U', 600)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toEqual([
      roleUpdate('U', 200, 0),
      { type: 'stream', op: 'create', streams: [await streamObjectOf(ids.S)], id: 1 },
      peerAdd(ids.S, [ids.V], 2),
      roleUpdate('U', 600, 3),
      deletion([ids.Q, ids.S], 4),
    ]);
  });

  it('nothing more when the sight does not change: member to moderator, a subscriber, the creator of a private channel', async () => {
    await ctx.db.updateTable('streams').set({ creator_id: ids.U }).where('id', '=', ids.S).execute();
    const queueU = await createQueue(ctx.db, 'U');
    const queueV = await createQueue(ctx.db, 'V');
    expect((await patchRole('U', 300)).body).toBe(OK);
    // U created S: it sees it whatever its role; as an administrator it gains nothing else.
    expect((await patchRole('U', 200)).body).toBe(OK);
    // V is on every channel but archived Z: nothing as a guest.
    expect((await patchRole('V', 600)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toEqual([roleUpdate('U', 300, 0), roleUpdate('U', 200, 1), roleUpdate('V', 600, 2)]);
    expect(await queueEvents(ctx.db, queueV)).toEqual([roleUpdate('U', 300, 0), roleUpdate('U', 200, 1), roleUpdate('V', 600, 2)]);
  });

  it('costs the statements of a change without channels', async () => {
    ctx.database.statements.length = 0;
    expect((await patchRole('U', 300)).body).toBe(OK);
    const one = ctx.database.statements.length;
    ctx.database.statements.length = 0;
    expect((await patchRole('G', 200)).body).toBe(OK);
    expect(ctx.database.statements.length).toBe(one);
  });
});
