import { describe, expect, it } from 'vitest';
import { createTestContext, useTestContext } from './helpers/app.js';
import { missingArgument, success } from './helpers/envelope.js';
import { createQueue, ids, queueEvents } from './helpers/fixture.js';
import { activeChannelsOf, expectMembershipUnchanged, subscribe, unsubscribe } from './helpers/membership.js';

const { U, V, G, B, D, X, P, Q, S, W } = ids;

const ctx = useTestContext(createTestContext);

const rejects = (form: Record<string, unknown>, msg: string, as: Parameters<typeof unsubscribe>[2] = 'U') =>
  expectMembershipUnchanged(ctx, () => unsubscribe(ctx, form, as), msg);

const withIds = (events: object[]) => JSON.stringify(events.map((event, id) => ({ ...event, id })));

/** A queue's events as `type/op`. */
const ops = async (queue: string) => (await queueEvents(ctx.db, queue)).map((event) => `${String(event.type)}/${String(event.op)}`);

describe('DELETE /users/me/subscriptions', () => {
  it('removes the caller: exact body, the row kept inactive with its settings, subscription/remove to it, peer_remove to peers', async () => {
    const [qU, qV, qG, qA] = [
      await createQueue(ctx.db, 'U'),
      await createQueue(ctx.db, 'V'),
      await createQueue(ctx.db, 'G'),
      await createQueue(ctx.db, 'A'),
    ];
    const res = await unsubscribe(ctx, { subscriptions: [' p '] });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(success({ removed: ['P'], not_removed: [] }));
    const row = await ctx.db
      .selectFrom('subscriptions')
      .select(['active', 'color'])
      .where('user_id', '=', U)
      .where('stream_id', '=', P)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ active: false, color: '#76ce90' });
    const peerRemove = { type: 'subscription', op: 'peer_remove', stream_ids: [P], user_ids: [U] };
    expect(JSON.stringify(await queueEvents(ctx.db, qU))).toBe(
      withIds([{ type: 'subscription', op: 'remove', subscriptions: [{ name: 'P', stream_id: P }] }]),
    );
    expect(JSON.stringify(await queueEvents(ctx.db, qV))).toBe(withIds([peerRemove]));
    expect(JSON.stringify(await queueEvents(ctx.db, qA))).toBe(withIds([peerRemove]));
    // G is a subscriber of P: a public channel's guest subscribers see its subscribers.
    expect(JSON.stringify(await queueEvents(ctx.db, qG))).toBe(withIds([peerRemove]));
    // Again: not subscribed.
    const again = await unsubscribe(ctx, { subscriptions: ['P'] });
    expect(again.body).toBe(success({ removed: [], not_removed: ['P'] }));
  });

  it('a member loses sight of a private channel: subscription/remove then stream/delete, then the peer events', async () => {
    const [qU, qV, qA, qVsubs] = [
      await createQueue(ctx.db, 'U'),
      await createQueue(ctx.db, 'V'),
      await createQueue(ctx.db, 'A'),
      await createQueue(ctx.db, 'V', ['subscription']),
    ];
    const res = await unsubscribe(ctx, { subscriptions: ['P', 'Q', 'S', 'W'], principals: [U, V] }, 'A');
    expect(res.body).toBe(success({ removed: ['P', 'P', 'Q', 'S', 'W'], not_removed: ['Q', 'S', 'W'] }));
    const removal = (...channels: [string, number][]) => ({
      type: 'subscription',
      op: 'remove',
      subscriptions: channels.map(([name, stream_id]) => ({ name, stream_id })),
    });
    const vRemoval = removal(['P', P], ['Q', Q], ['S', S], ['W', W]);
    // Only the private channel is lost: the public and web-public ones stay visible.
    const deletion = { type: 'stream', op: 'delete', streams: [{ stream_id: S }], stream_ids: [S], for_archiving: false };
    expect(JSON.stringify(await queueEvents(ctx.db, qV))).toBe(withIds([vRemoval, deletion]));
    // A queue that does not want stream events does not get it.
    expect(JSON.stringify(await queueEvents(ctx.db, qVsubs))).toBe(withIds([vRemoval]));
    // Zulip's order: each removed user's own events first, then the peers' (U's removal before Q's peer_remove).
    const peerRemove = (streamIds: number[], userIds: number[]) => ({
      type: 'subscription',
      op: 'peer_remove',
      stream_ids: streamIds,
      user_ids: userIds,
    });
    expect(JSON.stringify(await queueEvents(ctx.db, qU))).toBe(withIds([removal(['P', P]), peerRemove([Q], [V]), peerRemove([W], [V])]));
    expect(JSON.stringify(await queueEvents(ctx.db, qA))).toBe(
      withIds([peerRemove([P], [U, V]), peerRemove([S], [V]), peerRemove([Q], [V]), peerRemove([W], [V])]),
    );
  });

  it('no stream/delete for an administrator, the private channel creator, or a public channel; a guest loses a public one', async () => {
    await ctx.db.insertInto('subscriptions').values({ realm_id: 1, user_id: ids.A, stream_id: S, color: '#c2c2c2' }).execute();
    await subscribe(ctx, { subscriptions: [{ name: 'mine' }], invite_only: true });
    const [qA, qU, qG] = [await createQueue(ctx.db, 'A'), await createQueue(ctx.db, 'U'), await createQueue(ctx.db, 'G')];
    expect((await unsubscribe(ctx, { subscriptions: ['S'] }, 'A')).body).toBe(success({ removed: ['S'], not_removed: [] }));
    expect((await unsubscribe(ctx, { subscriptions: ['mine', 'P'] })).body).toBe(success({ removed: ['mine', 'P'], not_removed: [] }));
    expect((await unsubscribe(ctx, { subscriptions: ['P'] }, 'G')).body).toBe(success({ removed: ['P'], not_removed: [] }));
    // Its own removal, then the peers' events of 'mine' (an administrator sees it), U's and G's leaving P.
    expect(await ops(qA)).toEqual(['subscription/remove', ...Array<string>(3).fill('subscription/peer_remove')]);
    const mine = await ctx.db.selectFrom('streams').select('id').where('name', '=', 'mine').executeTakeFirstOrThrow();
    expect(JSON.stringify(await queueEvents(ctx.db, qU))).toBe(
      withIds([
        {
          type: 'subscription',
          op: 'remove',
          subscriptions: [
            { name: 'mine', stream_id: mine.id },
            { name: 'P', stream_id: P },
          ],
        },
        { type: 'subscription', op: 'peer_remove', stream_ids: [P], user_ids: [G] },
      ]),
    );
    // Zulip's check_basic_stream_access: a guest sees a public channel only while subscribed.
    expect(JSON.stringify(await queueEvents(ctx.db, qG))).toBe(
      withIds([
        { type: 'subscription', op: 'peer_remove', stream_ids: [P], user_ids: [U] },
        { type: 'subscription', op: 'remove', subscriptions: [{ name: 'P', stream_id: P }] },
        { type: 'stream', op: 'delete', streams: [{ stream_id: P }], stream_ids: [P], for_archiving: false },
      ]),
    );
  });

  it('one entry per user and channel; a private channel one is not on is simply not removed; archived channels too', async () => {
    const res = await unsubscribe(ctx, { subscriptions: ['P', 'S', 'Z', 'P'] });
    expect(res.body).toBe(success({ removed: ['P', 'Z'], not_removed: ['S'] }));
    expect(await activeChannelsOf(ctx, U)).toEqual([]);
  });

  it('guests and bots may remove themselves', async () => {
    expect((await unsubscribe(ctx, { subscriptions: ['P'] }, 'G')).body).toBe(success({ removed: ['P'], not_removed: [] }));
    expect((await unsubscribe(ctx, { subscriptions: ['P'] }, 'B')).body).toBe(success({ removed: [], not_removed: ['P'] }));
  });

  it('principals: administrators may remove anyone, private channels included', async () => {
    const qV = await createQueue(ctx.db, 'V');
    const res = await unsubscribe(ctx, { subscriptions: ['S', 'W'], principals: [V] }, 'A');
    expect(res.body).toBe(success({ removed: ['S', 'W'], not_removed: [] }));
    expect(await activeChannelsOf(ctx, V)).toEqual([P, Q]);
    // S is private: V no longer sees it.
    expect(await ops(qV)).toEqual(['subscription/remove', 'stream/delete']);
    const byEmail = await unsubscribe(ctx, { subscriptions: ['P', 'Q'], principals: ['v@example.com', 'u@example.com'] }, 'A');
    expect(byEmail.body).toBe(success({ removed: ['P', 'Q', 'P'], not_removed: ['Q'] }));
  });

  it("principals: one's own bot, and others from channels one created", async () => {
    await subscribe(ctx, { subscriptions: [{ name: 'mine' }], principals: [U, V, B] });
    expect((await unsubscribe(ctx, { subscriptions: ['mine'], principals: [B] })).body).toBe(
      success({ removed: ['mine'], not_removed: [] }),
    );
    expect((await unsubscribe(ctx, { subscriptions: ['mine'], principals: [V, U] })).body).toBe(
      success({ removed: ['mine', 'mine'], not_removed: [] }),
    );
  });

  it("refusals, in Zulip's order, change nothing", async () => {
    expect((await unsubscribe(ctx, {})).body).toBe(missingArgument('subscriptions'));
    await rejects({ subscriptions: 'P' }, 'subscriptions is not valid JSON');
    await rejects({ subscriptions: [1] }, 'subscriptions[0] is not a string');
    await rejects({ subscriptions: ['P'], principals: [{}] }, 'principals["list[str]"][0] is not a string');
    await rejects({ subscriptions: ['nope', 'P', 'Nope2'] }, 'Channel(s) (nope, Nope2) do not exist');
    await rejects({ subscriptions: ['P'], principals: [999999] }, 'No such user');
    await rejects({ subscriptions: ['P'], principals: [X] }, 'No such user');
    await rejects({ subscriptions: ['P'], principals: [D] }, 'User is deactivated');
    // The principals come first, then the names, then the permission, then existence.
    await rejects({ subscriptions: [''], principals: [999999] }, 'No such user');
    await rejects({ subscriptions: ['', 'nope'], principals: [V] }, "Channel name can't be empty.");
    await rejects({ subscriptions: ['x'.repeat(61)] }, 'Channel name too long (limit: 60 characters).');
    await rejects({ subscriptions: ['a\u0000b'] }, 'Invalid character in channel name, at position 2.');
    await rejects({ subscriptions: ['P', 'nope'], principals: [V] }, 'Insufficient permission');
    await rejects({ subscriptions: ['P'], principals: ['v@example.com'] }, 'Insufficient permission');
    await rejects({ subscriptions: ['P'], principals: [U] }, 'Insufficient permission', 'G');
    await rejects({ subscriptions: ['nope'], principals: [V] }, 'Channel(s) (nope) do not exist');
    await rejects({ subscriptions: ['nope'], principals: [U] }, 'Insufficient permission', 'G');
    await rejects(
      { subscriptions: ['P'], principals: Array.from({ length: 1001 }, () => U) },
      'principals is too long (limit: 1000 items)',
    );
  });

  it('a constant number of statements whatever the number of channels and principals', async () => {
    const count = async (form: Record<string, unknown>) => {
      ctx.database.statements.length = 0;
      const res = await unsubscribe(ctx, form, 'A');
      expect(res.statusCode).toBe(200);
      return ctx.database.statements.length;
    };
    const one = await count({ subscriptions: ['P'], principals: [U] });
    await subscribe(ctx, { subscriptions: Array.from({ length: 40 }, (_, i) => ({ name: `c${i}` })), principals: [U, V, B] }, 'A');
    const qV = await createQueue(ctx.db, 'V');
    const many = await count({
      subscriptions: Array.from({ length: 40 }, (_, i) => `c${i}`).concat(['Q', 'W', 'S']),
      principals: [U, V, B, G],
    });
    expect(many).toBe(one);
    // The stream/delete events (V leaves private S) come with the same write.
    expect((await queueEvents(ctx.db, qV)).filter((event) => event.type === 'stream')).toEqual([
      { id: 1, type: 'stream', op: 'delete', streams: [{ stream_id: S }], stream_ids: [S], for_archiving: false },
    ]);
    expect(one).toBe(7);
  });
});
