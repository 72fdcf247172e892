import { createHash } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createTestContext, type TestContext } from './helpers/app.js';
import { success } from './helpers/envelope.js';
import { register } from './helpers/events.js';
import { createQueue, type FixtureUser, ids, queueEvents, restrict } from './helpers/fixture.js';
import { subscribe, unsubscribe } from './helpers/membership.js';
import { humanObject } from './helpers/users.js';

/**
 * Organizations that restrict guests (can_access_all_users_group = members): the realm_user/add
 * and realm_user/remove events of subscribing and unsubscribing (Zulip's
 * send_user_creation_events_on_adding_subscriptions and
 * send_user_remove_events_on_removing_subscriptions). Fixture: guest G shares P with U, V (and the
 * deactivated D); O, A, M and the bots share no channel with G.
 */

const { O, M, U, V, G, B, P, Q, Z } = ids;

let ctx: TestContext;
beforeEach(async () => {
  ctx = await createTestContext();
});
afterEach(() => ctx.close());

const withIds = (events: object[]) => JSON.stringify(events.map((event, id) => ({ ...event, id })));

const gravatar = (email: string) =>
  `https://secure.gravatar.com/avatar/${createHash('md5').update(email.toLowerCase()).digest('hex')}?d=identicon&version=1`;

/** A fixture human's user object in realm_user/add (no client_gravatar, empty profile_data). */
const person = (id: number, fullName: string, email: string, role: number) =>
  humanObject(id, fullName, email, role, { avatar_url: gravatar(email), profile_data: {} });
const M_PERSON = person(M, 'M Mod', 'mod@example.com', 300);
const O_PERSON = person(O, 'O Owner', 'owner@example.com', 100);
const G_PERSON = person(G, 'G Guest', 'guest@example.com', 600);

const added = (who: object) => ({ type: 'realm_user', op: 'add', person: who });
const removed = (userId: number) => ({ type: 'realm_user', op: 'remove', person: { user_id: userId, full_name: 'Unknown user' } });
const peer = (op: string, streamIds: number[], userIds: number[]) => ({
  type: 'subscription',
  op,
  stream_ids: streamIds,
  user_ids: userIds,
});

const subscribeRow = (user: number, stream: number) =>
  ctx.db.insertInto('subscriptions').values({ realm_id: 1, user_id: user, stream_id: stream, color: '#c2c2c2' }).execute();

/** The realm_users entry for `userId` in `as`'s register (full list, placeholders included). */
async function registeredUser(as: FixtureUser, userId: number) {
  const res = await register(ctx.app, { fetch_event_types: '["realm_user"]', client_gravatar: 'false' }, as);
  expect(res.statusCode, res.body).toBe(200);
  return (res.json().realm_users as { user_id: number }[]).find((user) => user.user_id === userId);
}

const { is_active: _omitted, ...M_REGISTERED } = M_PERSON;

describe('subscribing, in an organization that restricts guests', () => {
  beforeEach(() => restrict(ctx.db));

  it('a guest who newly shares a channel with the subscribed user gets its object, after subscription/add, before peer_add', async () => {
    expect(await registeredUser('G', M)).toMatchObject({ full_name: 'Unknown user' });
    const [qG, qM, qU] = [await createQueue(ctx.db, 'G'), await createQueue(ctx.db, 'M'), await createQueue(ctx.db, 'U')];
    const res = await subscribe(ctx, { subscriptions: [{ name: 'P' }], principals: [M] }, 'A');
    expect(res.body).toBe(success({ subscribed: { [M]: ['P'] }, already_subscribed: {}, new_subscription_messages_sent: true }));
    expect(JSON.stringify(await queueEvents(ctx.db, qG))).toBe(withIds([added(M_PERSON), peer('peer_add', [P], [M])]));
    // The subscribed user and the non-guests get nothing new about anyone.
    expect((await queueEvents(ctx.db, qM)).map((event) => `${String(event.type)}/${String(event.op)}`)).toEqual(['subscription/add']);
    expect(JSON.stringify(await queueEvents(ctx.db, qU))).toBe(withIds([peer('peer_add', [P], [M])]));
    // register agrees: the object instead of the placeholder (register leaves is_active out).
    expect(await registeredUser('G', M)).toEqual(M_REGISTERED);
  });

  it('a subscribed guest gets the objects of the subscribers it newly shares a channel with, not of those it already saw', async () => {
    // Q: V (already seen through P) and O (not).
    await subscribeRow(O, Q);
    const qG = await createQueue(ctx.db, 'G');
    const res = await subscribe(ctx, { subscriptions: [{ name: 'Q' }], principals: [G] }, 'A');
    expect(res.body).toBe(success({ subscribed: { [G]: ['Q'] }, already_subscribed: {}, new_subscription_messages_sent: true }));
    const events = await queueEvents(ctx.db, qG);
    expect(events.map((event) => `${String(event.type)}/${String(event.op)}`)).toEqual([
      'stream/create',
      'subscription/add',
      'realm_user/add',
    ]);
    expect(JSON.stringify(events[2])).toBe(JSON.stringify({ ...added(O_PERSON), id: 2 }));
    expect(await registeredUser('G', O)).toMatchObject({ user_id: O, full_name: 'O Owner' });
  });

  it("a guest's address visibility decides the delivery_email the other guest gets; two new guests get each other's, twice, as Zulip sends them", async () => {
    // M becomes a second guest, with an address only administrators see.
    await ctx.db.updateTable('users').set({ role: 600, email_address_visibility: 3 }).where('id', '=', M).execute();
    const [qG, qM] = [await createQueue(ctx.db, 'G'), await createQueue(ctx.db, 'M')];
    const res = await subscribe(ctx, { subscriptions: [{ name: 'new1' }], principals: [G, M] }, 'A');
    expect(res.statusCode, res.body).toBe(200);
    const guestM = {
      ...person(M, 'M Mod', 'mod@example.com', 600),
      email: `user${M}@chat.example.com`,
      delivery_email: null,
    };
    // For each new subscriber in id order: its object to the guests newly meeting it, then (a guest) the others' objects to it.
    const gOnly = (await queueEvents(ctx.db, qG)).filter((event) => event.type === 'realm_user');
    expect(JSON.stringify(gOnly)).toBe(JSON.stringify([added(guestM), added(guestM)].map((event, i) => ({ ...event, id: 2 + i }))));
    const mOnly = (await queueEvents(ctx.db, qM)).filter((event) => event.type === 'realm_user');
    expect(JSON.stringify(mOnly)).toBe(JSON.stringify([added(G_PERSON), added(G_PERSON)].map((event, i) => ({ ...event, id: 2 + i }))));
  });

  it('nothing when every guest already shared a channel with the subscribed users', async () => {
    const qG = await createQueue(ctx.db, 'G');
    // V already shares P with G; U and V meet no guest on Q.
    await subscribe(ctx, { subscriptions: [{ name: 'Q' }], principals: [U] }, 'A');
    await subscribe(ctx, { subscriptions: [{ name: 'P' }], principals: [G] }, 'A');
    // G subscribed to a channel whose subscribers it all sees already: only its own events.
    await subscribe(ctx, { subscriptions: [{ name: 'Q' }], principals: [G] }, 'A');
    // M joins P, where G is, but already shared Q (named too) with G.
    await subscribeRow(M, Q);
    const res = await subscribe(ctx, { subscriptions: [{ name: 'P' }, { name: 'Q' }], principals: [M] }, 'A');
    expect(res.body).toBe(
      success({ subscribed: { [M]: ['P'] }, already_subscribed: { [M]: ['Q'] }, new_subscription_messages_sent: true }),
    );
    expect((await queueEvents(ctx.db, qG)).map((event) => `${String(event.type)}/${String(event.op)}`)).toEqual([
      'stream/create',
      'subscription/add',
      'subscription/peer_add',
    ]);
  });

  it('a constant number of statements whatever the number of channels, principals and guests', async () => {
    const count = async (form: Record<string, unknown>) => {
      ctx.database.statements.length = 0;
      const res = await subscribe(ctx, form, 'A');
      expect(res.statusCode).toBe(200);
      return ctx.database.statements.length;
    };
    await createQueue(ctx.db, 'G');
    const one = await count({ subscriptions: [{ name: 'one' }], principals: [G] });
    const many = await count({
      subscriptions: Array.from({ length: 40 }, (_, i) => ({ name: `many${i}` })).concat([{ name: 'P' }, { name: 'Q' }]),
      principals: [O, U, V, M, B, G],
    });
    expect(many).toBe(one);
    expect(one).toBe(7);
  });
});

describe('unsubscribing, in an organization that restricts guests', () => {
  beforeEach(() => restrict(ctx.db));

  it('a guest who no longer shares a channel with the removed user gets realm_user/remove, after the peer events', async () => {
    await subscribeRow(M, P);
    expect(await registeredUser('G', M)).toEqual(M_REGISTERED);
    const [qG, qM] = [await createQueue(ctx.db, 'G'), await createQueue(ctx.db, 'M')];
    const res = await unsubscribe(ctx, { subscriptions: ['P'], principals: [M] }, 'A');
    expect(res.body).toBe(success({ removed: ['P'], not_removed: [] }));
    expect(JSON.stringify(await queueEvents(ctx.db, qG))).toBe(withIds([peer('peer_remove', [P], [M]), removed(M)]));
    expect((await queueEvents(ctx.db, qM)).map((event) => `${String(event.type)}/${String(event.op)}`)).toEqual(['subscription/remove']);
    expect(await registeredUser('G', M)).toMatchObject({ user_id: M, full_name: 'Unknown user', delivery_email: null });
  });

  it('a removed guest gets realm_user/remove for each subscriber it no longer shares a channel with', async () => {
    // G and V also share Q; G and U nothing else.
    await subscribeRow(G, Q);
    const qG = await createQueue(ctx.db, 'G');
    const res = await unsubscribe(ctx, { subscriptions: ['P'] }, 'G');
    expect(res.body).toBe(success({ removed: ['P'], not_removed: [] }));
    expect(JSON.stringify(await queueEvents(ctx.db, qG))).toBe(
      withIds([
        { type: 'subscription', op: 'remove', subscriptions: [{ name: 'P', stream_id: P }] },
        { type: 'stream', op: 'delete', streams: [{ stream_id: P }], stream_ids: [P], for_archiving: false },
        removed(U),
      ]),
    );
    expect(await registeredUser('G', U)).toMatchObject({ full_name: 'Unknown user' });
    expect(await registeredUser('G', V)).toMatchObject({ full_name: 'V Member' });
  });

  it('nothing about a user still shared elsewhere (an archived channel counts), nor when a channel without guests loses one', async () => {
    // G and U also share the archived Z.
    await subscribeRow(G, Z);
    const [qG, qU] = [await createQueue(ctx.db, 'G'), await createQueue(ctx.db, 'U')];
    await unsubscribe(ctx, { subscriptions: ['P'] }, 'G');
    const events = await queueEvents(ctx.db, qG);
    expect(events.map((event) => `${String(event.type)}/${String(event.op)}`)).toEqual([
      'subscription/remove',
      'stream/delete',
      'realm_user/remove',
    ]);
    // V only: G still shares Z with U.
    expect(JSON.stringify(events[2])).toBe(JSON.stringify({ ...removed(V), id: 2 }));
    // V leaves Q, which has no guest: only the non-guests' peer_remove.
    await unsubscribe(ctx, { subscriptions: ['Q'] }, 'V');
    expect(await queueEvents(ctx.db, qG)).toHaveLength(3);
    expect(JSON.stringify(await queueEvents(ctx.db, qU))).toBe(withIds([peer('peer_remove', [P], [G]), peer('peer_remove', [Q], [V])]));
  });

  it("a bot's departure too, as Zulip sends it (guests still see every bot: register keeps it)", async () => {
    await subscribeRow(B, P);
    const qG = await createQueue(ctx.db, 'G');
    expect((await unsubscribe(ctx, { subscriptions: ['P'], principals: [B] }, 'U')).body).toBe(
      success({ removed: ['P'], not_removed: [] }),
    );
    expect(JSON.stringify(await queueEvents(ctx.db, qG))).toBe(withIds([peer('peer_remove', [P], [B]), removed(B)]));
    expect(await registeredUser('G', B)).toMatchObject({ user_id: B, full_name: 'B Bot' });
  });

  it('a constant number of statements whatever the number of channels, principals and guests', async () => {
    const count = async (form: Record<string, unknown>) => {
      ctx.database.statements.length = 0;
      const res = await unsubscribe(ctx, form, 'A');
      expect(res.statusCode).toBe(200);
      return ctx.database.statements.length;
    };
    await createQueue(ctx.db, 'G');
    const one = await count({ subscriptions: ['P'], principals: [U] });
    await subscribe(ctx, { subscriptions: Array.from({ length: 40 }, (_, i) => ({ name: `c${i}` })), principals: [U, V, M, G, B] }, 'A');
    const many = await count({ subscriptions: Array.from({ length: 40 }, (_, i) => `c${i}`).concat(['P', 'Q']), principals: [V, M, G, B] });
    expect(many).toBe(one);
    expect(one).toBe(7);
  });
});

describe('an organization that does not restrict guests', () => {
  it('sends no realm_user/add or remove on subscribing or unsubscribing', async () => {
    const qG = await createQueue(ctx.db, 'G');
    await subscribe(ctx, { subscriptions: [{ name: 'P' }], principals: [M] }, 'A');
    await subscribeRow(O, Q);
    await subscribe(ctx, { subscriptions: [{ name: 'Q' }], principals: [G] }, 'A');
    await unsubscribe(ctx, { subscriptions: ['P'], principals: [M] }, 'A');
    await unsubscribe(ctx, { subscriptions: ['P'] }, 'G');
    expect((await queueEvents(ctx.db, qG)).map((event) => `${String(event.type)}/${String(event.op)}`)).toEqual([
      'subscription/peer_add',
      'stream/create',
      'subscription/add',
      'subscription/peer_remove',
      'subscription/remove',
      'stream/delete',
    ]);
  });
});
