import { describe, expect, it } from 'vitest';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { OK } from './helpers/envelope.js';
import { register } from './helpers/events.js';
import { deleteUser } from '../src/cli/operations.js';
import { createQueue, type FixtureUser, ids, queueEvents, restrict } from './helpers/fixture.js';

/**
 * The subscription peer events of a deactivation (peer_remove) and a reactivation (peer_add), to
 * exactly the users Zulip sends them to (docs/management-api.md U.5, U.7; Zulip's
 * send_events_for_user_deactivation and do_reactivate_user).
 */

const ctx = useTestContext(createTestContext);

const deactivate = (userId: number, as: FixtureUser = 'A') => api(ctx.app, { method: 'DELETE', url: `/api/v1/users/${userId}`, as });
const reactivate = (userId: number, as: FixtureUser = 'A') =>
  api(ctx.app, { method: 'POST', url: `/api/v1/users/${userId}/reactivate`, as });
const peer = (op: 'peer_add' | 'peer_remove', streamIds: number[], userId: number, id: number) => ({
  type: 'subscription',
  op,
  stream_ids: streamIds,
  user_ids: [userId],
  id,
});
const isActiveEvent = (userId: number, isActive: boolean, id: number) => ({
  type: 'realm_user',
  op: 'update',
  person: { user_id: userId, is_active: isActive },
  id,
});
const subscribeRows = (rows: [number, number][]) =>
  ctx.db
    .insertInto('subscriptions')
    .values(rows.map(([userId, streamId]) => ({ realm_id: 1, user_id: userId, stream_id: streamId, color: '#c2c2c2' })))
    .execute();

/** A queue of every listed fixture user (all event types). */
async function queuesOf(users: FixtureUser[]): Promise<Record<string, string>> {
  return Object.fromEntries(await Promise.all(users.map(async (user) => [user, await createQueue(ctx.db, user)] as const)));
}

describe('deactivation sends peer_remove for each channel of the user, before realm_user/update', () => {
  it("to each channel's peers: a public channel with a guest alone, the others batched, a private one to its subscribers and administrators", async () => {
    // V: P (public, guest G subscribed), Q (public), S (private), W (web-public). M joins S so a subscriber hears of it.
    await subscribeRows([[ids.M, ids.S]]);
    const queues = await queuesOf(['O', 'A', 'M', 'U', 'G', 'B']);
    const res = await deactivate(ids.V);
    expect(res.body).toBe(OK);
    const gone = isActiveEvent(ids.V, false, 0);
    // Owners, administrators and S's subscriber M see the private channel; non-guests the public ones; everyone the web-public one.
    const seen = (streamIds: number[]) => [
      ...streamIds.map((streamId, id) => peer('peer_remove', [streamId], ids.V, id)),
      { ...gone, id: streamIds.length },
    ];
    for (const user of ['O', 'A', 'M'] as const) {
      expect(await queueEvents(ctx.db, queues[user]!), user).toEqual(seen([ids.P, ids.S, ids.Q, ids.W]));
    }
    for (const user of ['U', 'B'] as const) expect(await queueEvents(ctx.db, queues[user]!), user).toEqual(seen([ids.P, ids.Q, ids.W]));
    // A guest: the public channel it is subscribed to and the web-public one only.
    expect(await queueEvents(ctx.db, queues.G!)).toEqual(seen([ids.P, ids.W]));
  });

  it('public channels without guests share one event, archived channels included', async () => {
    // U: P (guest G) and Z (archived); V also joins Z and R (a new public channel).
    await ctx.db.insertInto('streams').values({ id: 110, realm_id: 1, name: 'R' }).execute();
    await subscribeRows([
      [ids.U, 110],
      [ids.V, ids.Z],
    ]);
    const queues = await queuesOf(['V', 'G']);
    expect((await api(ctx.app, { method: 'DELETE', url: '/api/v1/users/me', as: 'U' })).body).toBe(OK);
    // U's bots (B, H, subscribed nowhere) first, then U.
    expect(await queueEvents(ctx.db, queues.V!)).toEqual([
      isActiveEvent(ids.B, false, 0),
      isActiveEvent(ids.H, false, 1),
      peer('peer_remove', [ids.P], ids.U, 2),
      peer('peer_remove', [ids.Z, 110], ids.U, 3),
      isActiveEvent(ids.U, false, 4),
    ]);
    expect(await queueEvents(ctx.db, queues.G!)).toEqual([
      isActiveEvent(ids.B, false, 0),
      isActiveEvent(ids.H, false, 1),
      peer('peer_remove', [ids.P], ids.U, 2),
      isActiveEvent(ids.U, false, 3),
    ]);
  });

  it("each bot's events come before the next one's and its owner's; the users who go get none", async () => {
    // B in S (private, with V), H in Q (public, with V).
    await subscribeRows([
      [ids.B, ids.S],
      [ids.H, ids.Q],
    ]);
    const queues = await queuesOf(['V', 'M', 'A', 'U', 'B']);
    expect((await deactivate(ids.U)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queues.V!)).toEqual([
      peer('peer_remove', [ids.S], ids.B, 0),
      isActiveEvent(ids.B, false, 1),
      peer('peer_remove', [ids.Q], ids.H, 2),
      isActiveEvent(ids.H, false, 3),
      peer('peer_remove', [ids.P], ids.U, 4),
      peer('peer_remove', [ids.Z], ids.U, 5),
      isActiveEvent(ids.U, false, 6),
    ]);
    // M is no peer of the private channel S.
    expect((await queueEvents(ctx.db, queues.M!)).map((event) => event.op === 'peer_remove' && event.stream_ids)).toEqual([
      false,
      [ids.Q],
      false,
      [ids.P],
      [ids.Z],
      false,
    ]);
    expect(await queueEvents(ctx.db, queues.A!)).toHaveLength(7);
    // The queues of U and its bots are gone with them.
    expect(await ctx.db.selectFrom('event_queues').select('id').where('id', 'in', [queues.U!, queues.B!]).execute()).toEqual([]);
  });

  it('a queue that accepts only realm_user gets no peer events; subscriptions are kept', async () => {
    const queueU = await createQueue(ctx.db, 'U', ['realm_user']);
    expect((await deactivate(ids.V)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toEqual([isActiveEvent(ids.V, false, 0)]);
    const kept = await ctx.db
      .selectFrom('subscriptions')
      .select('stream_id')
      .where('user_id', '=', ids.V)
      .where('active', '=', true)
      .execute();
    expect(kept.map((row) => row.stream_id).sort()).toEqual([ids.P, ids.Q, ids.S, ids.W]);
  });

  it("the channel's members no longer include the user, in register's state and GET /streams/{id}/members", async () => {
    expect((await deactivate(ids.V)).body).toBe(OK);
    const members = await api(ctx.app, { url: `/api/v1/streams/${ids.P}/members`, as: 'U' });
    expect(members.json().subscribers).toEqual([ids.U, ids.G]);
    const state = (await register(ctx.app, { fetch_event_types: '["subscription"]', include_subscribers: 'true' }, 'U')).json();
    const p = (state.subscriptions as { stream_id: number; subscribers: number[] }[]).find((sub) => sub.stream_id === ids.P);
    expect(p?.subscribers).toEqual([ids.U, ids.G]);
  });

  it('costs the same number of statements whatever the number of channels, bots and queues', async () => {
    ctx.database.statements.length = 0;
    expect((await deactivate(ids.M)).body).toBe(OK);
    const none = ctx.database.statements.length;
    await queuesOf(['O', 'A', 'G', 'B']);
    await subscribeRows([
      [ids.B, ids.S],
      [ids.H, ids.Q],
    ]);
    ctx.database.statements.length = 0;
    expect((await deactivate(ids.U)).body).toBe(OK);
    expect(ctx.database.statements.length).toBe(none);
    ctx.database.statements.length = 0;
    expect((await reactivate(ids.U)).body).toBe(OK);
    const reactivation = ctx.database.statements.length;
    ctx.database.statements.length = 0;
    expect((await reactivate(ids.M)).body).toBe(OK);
    expect(ctx.database.statements.length).toBe(reactivation);
  });
});

const removal = (userId: number, id: number) => ({
  type: 'realm_user',
  op: 'remove',
  person: { user_id: userId, full_name: 'Unknown user' },
  id,
});
/** M becomes a guest too (a second one, beside G). */
const makeGuest = (userId: number) => ctx.db.updateTable('users').set({ role: 600 }).where('id', '=', userId).execute();

describe('deactivation in an organization that restricts guests (Zulip send_events_for_user_deactivation)', () => {
  it('non-guests get the update; a guest sharing a channel gets realm_user/remove after its peer_remove events, not the update', async () => {
    await restrict(ctx.db);
    const queues = await queuesOf(['A', 'U', 'G']);
    expect((await deactivate(ids.V)).body).toBe(OK);
    // V: P (with U and G), Q, S (private), W (web-public).
    expect(await queueEvents(ctx.db, queues.G!)).toEqual([
      peer('peer_remove', [ids.P], ids.V, 0),
      peer('peer_remove', [ids.W], ids.V, 1),
      removal(ids.V, 2),
    ]);
    expect(await queueEvents(ctx.db, queues.U!)).toEqual([
      peer('peer_remove', [ids.P], ids.V, 0),
      peer('peer_remove', [ids.Q], ids.V, 1),
      peer('peer_remove', [ids.W], ids.V, 2),
      isActiveEvent(ids.V, false, 3),
    ]);
    expect((await queueEvents(ctx.db, queues.A!)).at(-1)).toEqual(isActiveEvent(ids.V, false, 4));
  });

  it('an archived channel counts; a guest sharing nothing, or only a left channel, gets no remove', async () => {
    await restrict(ctx.db);
    // M, a guest, is subscribed to the archived Z (with U) and was subscribed to Q (with V) only.
    await makeGuest(ids.M);
    await subscribeRows([[ids.M, ids.Z]]);
    await ctx.db
      .insertInto('subscriptions')
      .values({ realm_id: 1, user_id: ids.M, stream_id: ids.Q, color: '#c2c2c2', active: false })
      .execute();
    const queues = await queuesOf(['M', 'G']);
    expect((await deactivate(ids.U)).body).toBe(OK);
    // U's bots B and H (accessible to everyone) first, then U: P (with G) and Z (archived, with M).
    expect(await queueEvents(ctx.db, queues.M!)).toEqual([
      isActiveEvent(ids.B, false, 0),
      isActiveEvent(ids.H, false, 1),
      peer('peer_remove', [ids.Z], ids.U, 2),
      removal(ids.U, 3),
    ]);
    expect(await queueEvents(ctx.db, queues.G!)).toEqual([
      isActiveEvent(ids.B, false, 0),
      isActiveEvent(ids.H, false, 1),
      peer('peer_remove', [ids.P], ids.U, 2),
      removal(ids.U, 3),
    ]);
    // V: M shares only the channel it left (Q) and gets the web-public channel's peer_remove alone.
    await ctx.db.deleteFrom('events').execute();
    expect((await deactivate(ids.V)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queues.M!)).toEqual([peer('peer_remove', [ids.W], ids.V, 4)]);
  });

  it("an owned bot stays accessible: its update goes to every guest, with no remove (only its owner's)", async () => {
    await restrict(ctx.db);
    await subscribeRows([[ids.B, ids.P]]);
    const queueG = await createQueue(ctx.db, 'G');
    expect((await deactivate(ids.U)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueG)).toEqual([
      peer('peer_remove', [ids.P], ids.B, 0),
      isActiveEvent(ids.B, false, 1),
      isActiveEvent(ids.H, false, 2),
      peer('peer_remove', [ids.P], ids.U, 3),
      removal(ids.U, 4),
    ]);
  });

  it("register agrees: the guest's realm_users has the user's placeholder after the remove, its object before", async () => {
    await restrict(ctx.db);
    const nameOfV = async () => {
      const state = (await register(ctx.app, { fetch_event_types: '["realm_user"]' }, 'G')).json();
      return (state.realm_users as { user_id: number; full_name: string }[]).find((user) => user.user_id === ids.V)?.full_name;
    };
    expect(await nameOfV()).toBe('V Member');
    expect((await deactivate(ids.V)).body).toBe(OK);
    expect(await nameOfV()).toBe('Unknown user');
    const incomplete = (
      await register(ctx.app, { fetch_event_types: '["realm_user"]', client_capabilities: '{"user_list_incomplete":true}' }, 'G')
    ).json();
    expect((incomplete.realm_users as { user_id: number }[]).map((user) => user.user_id)).not.toContain(ids.V);
    expect((incomplete.realm_non_active_users as { user_id: number }[]).map((user) => user.user_id)).not.toContain(ids.V);
  });

  it('costs the same number of statements whatever the number of guests sharing channels', async () => {
    await restrict(ctx.db);
    ctx.database.statements.length = 0;
    expect((await deactivate(ids.M)).body).toBe(OK);
    const none = ctx.database.statements.length;
    await makeGuest(ids.O);
    await subscribeRows([[ids.O, ids.Q]]);
    await queuesOf(['O', 'G', 'U']);
    ctx.database.statements.length = 0;
    expect((await deactivate(ids.V)).body).toBe(OK);
    expect(ctx.database.statements.length).toBe(none);
  });
});

describe('reactivation sends peer_add for each channel of the user that is not archived, after realm_user/update', () => {
  it("to each channel's peers", async () => {
    // D (deactivated): P (public, with guest G), Z (archived), S (private), Q (public).
    await subscribeRows([
      [ids.D, ids.Z],
      [ids.D, ids.S],
      [ids.D, ids.Q],
    ]);
    const queues = await queuesOf(['A', 'U', 'G', 'V']);
    expect((await reactivate(ids.D)).body).toBe(OK);
    const back = isActiveEvent(ids.D, true, 0);
    expect(await queueEvents(ctx.db, queues.A!)).toEqual([
      back,
      peer('peer_add', [ids.P], ids.D, 1),
      peer('peer_add', [ids.S], ids.D, 2),
      peer('peer_add', [ids.Q], ids.D, 3),
    ]);
    // V is subscribed to S; U is not.
    expect(await queueEvents(ctx.db, queues.V!)).toEqual([
      back,
      peer('peer_add', [ids.P], ids.D, 1),
      peer('peer_add', [ids.S], ids.D, 2),
      peer('peer_add', [ids.Q], ids.D, 3),
    ]);
    expect(await queueEvents(ctx.db, queues.U!)).toEqual([back, peer('peer_add', [ids.P], ids.D, 1), peer('peer_add', [ids.Q], ids.D, 2)]);
    expect(await queueEvents(ctx.db, queues.G!)).toEqual([back, peer('peer_add', [ids.P], ids.D, 1)]);
  });

  it("a bot's new owner comes before its peer_add", async () => {
    await subscribeRows([[ids.B, ids.Q]]);
    await ctx.db.updateTable('users').set({ is_active: false }).where('id', 'in', [ids.U, ids.B]).execute();
    const queueV = await createQueue(ctx.db, 'V');
    expect((await reactivate(ids.B)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueV)).toEqual([
      isActiveEvent(ids.B, true, 0),
      { type: 'realm_user', op: 'update', person: { user_id: ids.B, bot_owner_id: ids.A }, id: 1 },
      peer('peer_add', [ids.Q], ids.B, 2),
    ]);
  });

  it('a bot reactivated for a new owner keeps its private channels the owner is not on (Zulip 11.0 dropped remove_bot_from_inaccessible_private_streams)', async () => {
    // B: private S (V's) and public Q; its owner U is deactivated; A, its new owner, is on neither.
    await subscribeRows([
      [ids.B, ids.S],
      [ids.B, ids.Q],
    ]);
    await ctx.db.updateTable('users').set({ is_active: false }).where('id', 'in', [ids.U, ids.B]).execute();
    const queues = await queuesOf(['A', 'V']);
    expect((await reactivate(ids.B)).body).toBe(OK);
    const expected = [
      isActiveEvent(ids.B, true, 0),
      { type: 'realm_user', op: 'update', person: { user_id: ids.B, bot_owner_id: ids.A }, id: 1 },
      peer('peer_add', [ids.S], ids.B, 2),
      peer('peer_add', [ids.Q], ids.B, 3),
    ];
    // No subscription/remove, no peer_remove: the peers learn of the bot on S too.
    expect(await queueEvents(ctx.db, queues.A!)).toEqual(expected);
    expect(await queueEvents(ctx.db, queues.V!)).toEqual(expected);
    const rows = await ctx.db
      .selectFrom('subscriptions')
      .select(['stream_id', 'active'])
      .where('user_id', '=', ids.B)
      .orderBy('stream_id')
      .execute();
    expect(rows).toEqual([
      { stream_id: ids.Q, active: true },
      { stream_id: ids.S, active: true },
    ]);
    const owner = await ctx.db.selectFrom('users').select('bot_owner_id').where('id', '=', ids.B).executeTakeFirstOrThrow();
    expect(owner.bot_owner_id).toBe(ids.A);
  });

  it('an active user: nothing is sent', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    expect((await reactivate(ids.V)).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toEqual([]);
  });
});

describe("the admin command line's user delete: the service's deactivation, then the personal data goes", () => {
  it('sends the deactivation events, ends the queues, deletes the subscriptions and profile values, scrubs the row', async () => {
    await ctx.db
      .insertInto('custom_profile_field_values')
      .values([{ realm_id: 1, user_id: ids.U, field_id: 1, value: 'Lead' }])
      .execute();
    const queues = await queuesOf(['V', 'U', 'B']);
    expect(await deleteUser(ctx.database, ctx.config, '', 'u@example.com')).toEqual({ user_id: ids.U, is_deleted: true });
    expect(await queueEvents(ctx.db, queues.V!)).toEqual([
      isActiveEvent(ids.B, false, 0),
      isActiveEvent(ids.H, false, 1),
      peer('peer_remove', [ids.P], ids.U, 2),
      peer('peer_remove', [ids.Z], ids.U, 3),
      isActiveEvent(ids.U, false, 4),
    ]);
    expect(await ctx.db.selectFrom('event_queues').select('id').where('id', 'in', [queues.U!, queues.B!]).execute()).toEqual([]);
    const row = await ctx.db
      .selectFrom('users')
      .select(['is_active', 'is_deleted', 'full_name', 'delivery_email', 'timezone', 'email_address_visibility', 'avatar_source'])
      .where('id', '=', ids.U)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({
      is_active: false,
      is_deleted: true,
      full_name: `Deleted User ${ids.U}`,
      delivery_email: `deleteduser${ids.U}@chat.example.com`,
      timezone: '',
      email_address_visibility: 1,
      avatar_source: 'G',
    });
    expect(await ctx.db.selectFrom('subscriptions').select('stream_id').where('user_id', '=', ids.U).execute()).toEqual([]);
    expect(await ctx.db.selectFrom('custom_profile_field_values').select('field_id').where('user_id', '=', ids.U).execute()).toEqual([]);
    // The bots are deactivated, not deleted.
    expect(await ctx.db.selectFrom('users').select(['is_active', 'is_deleted']).where('id', '=', ids.B).executeTakeFirstOrThrow()).toEqual({
      is_active: false,
      is_deleted: false,
    });
  });

  it('a deactivated user: nothing is sent, the data still goes', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    expect(await deleteUser(ctx.database, ctx.config, '', 'd@example.com')).toEqual({ user_id: ids.D, is_deleted: true });
    expect(await queueEvents(ctx.db, queueU)).toEqual([]);
    expect(await ctx.db.selectFrom('subscriptions').select('stream_id').where('user_id', '=', ids.D).execute()).toEqual([]);
    expect(await ctx.db.selectFrom('users').select(['is_deleted', 'full_name']).where('id', '=', ids.D).executeTakeFirstOrThrow()).toEqual({
      is_deleted: true,
      full_name: `Deleted User ${ids.D}`,
    });
  });
});
