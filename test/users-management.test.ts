import { createHash } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../src/db/database.js';
import { formatDateJoined } from '../src/modules/users/users.serializers.js';
import { api, useSharedTestContext } from './helpers/app.js';
import { errorBody, OK, success } from './helpers/envelope.js';
import { register } from './helpers/events.js';
import { apiKeys, basicAuth, createQueue, type FixtureUser, ids, queueEvents, restrict } from './helpers/fixture.js';
import { humanObject, placeholderObject } from './helpers/users.js';

/** User management (docs/management-api.md "Users"): GET /users/me, POST /users, DELETE, reactivate. */

const ctx = useSharedTestContext();

const gravatar = (email: string) =>
  `https://secure.gravatar.com/avatar/${createHash('md5').update(email.toLowerCase()).digest('hex')}?d=identicon&version=1`;

/** Every row a refused request could touch. */
async function snapshot(db: Database) {
  return {
    users: await db.selectFrom('users').selectAll().orderBy('id').execute(),
    queues: await db.selectFrom('event_queues').select(['id', 'next_event_id']).orderBy('id').execute(),
    events: await db.selectFrom('events').select(['queue_id', 'id']).orderBy('queue_id').orderBy('id').execute(),
  };
}

/** Runs a request that must be refused with `body` and change nothing. */
async function expectRefused(request: () => ReturnType<typeof api>, body: string, status = 400) {
  const before = await snapshot(ctx.db);
  const res = await request();
  expect(res.statusCode, res.body).toBe(status);
  expect(res.body).toBe(body);
  expect(await snapshot(ctx.db)).toEqual(before);
}

const grantCreateUsers = (user: FixtureUser) =>
  ctx.db.updateTable('users').set({ can_create_users: true }).where('id', '=', ids[user]).execute();

const createUser = (form: Record<string, string>, as: FixtureUser = 'A') =>
  api(ctx.app, { method: 'POST', url: '/api/v1/users', as, form });
const deactivate = (userId: number | string, as: FixtureUser = 'A', form?: Record<string, string>) =>
  api(ctx.app, { method: 'DELETE', url: `/api/v1/users/${userId}`, as, ...(form && { form }) });
const reactivate = (userId: number | string, as: FixtureUser = 'A') =>
  api(ctx.app, { method: 'POST', url: `/api/v1/users/${userId}/reactivate`, as });
const isActive = async (userId: number) =>
  (await ctx.db.selectFrom('users').select('is_active').where('id', '=', userId).executeTakeFirstOrThrow()).is_active;

/** The new user's object in realm_user/add (`date_joined` is the creation's minute). */
const newPerson = (userId: number, dateJoined: unknown) =>
  humanObject(userId, 'New Person', 'New.Person@example.com', 400, {
    date_joined: dateJoined,
    avatar_url: gravatar('New.Person@example.com'),
    profile_data: {},
  });

const NEW_USER = { email: 'New.Person@Example.COM', password: 'long enough', full_name: '  New Person ' };
const adminRequired = errorBody('Must be an organization administrator', 'UNAUTHORIZED_PRINCIPAL');

describe('GET /api/v1/users/me', () => {
  it("is the caller's object at the top level, full avatar URL, profile_data, max_message_id -1, no ignored parameters", async () => {
    await ctx.ownDatabase();
    await ctx.db
      .insertInto('custom_profile_field_values')
      .values({ realm_id: 1, user_id: ids.U, field_id: 4, value: '1999-12-31' })
      .execute();
    const res = await api(ctx.app, { url: '/api/v1/users/me?client_gravatar=true&foo=1', as: 'U' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(
      success({
        email: 'u@example.com',
        user_id: ids.U,
        avatar_version: 1,
        is_admin: false,
        is_owner: false,
        is_guest: false,
        role: 400,
        is_bot: false,
        full_name: 'U Member',
        timezone: '',
        is_active: true,
        date_joined: '2024-01-02T03:04+00:00',
        delivery_email: 'u@example.com',
        avatar_url: gravatar('u@example.com'),
        is_imported_stub: false,
        profile_data: { 4: { value: '1999-12-31' } },
        max_message_id: -1,
      }),
    );
  });

  it('a bot gets bot_type and bot_owner_id, no profile_data; a guest and an owner their roles', async () => {
    const bot = (await api(ctx.app, { url: '/api/v1/users/me', as: 'B' })).json();
    expect(Object.keys(bot).slice(-4)).toEqual(['is_imported_stub', 'bot_type', 'bot_owner_id', 'max_message_id']);
    expect(bot).toMatchObject({ user_id: ids.B, is_bot: true, bot_type: 1, bot_owner_id: ids.U });
    expect((await api(ctx.app, { url: '/api/v1/users/me', as: 'G' })).json()).toMatchObject({
      role: 600,
      is_guest: true,
      profile_data: {},
    });
    expect((await api(ctx.app, { url: '/api/v1/users/me', as: 'O' })).json()).toMatchObject({ role: 100, is_owner: true, is_admin: true });
  });

  it('needs credentials', async () => {
    const res = await api(ctx.app, { url: '/api/v1/users/me' });
    expect(res.statusCode).toBe(401);
  });
});

describe('POST /api/v1/users', () => {
  it('is refused to non-administrators before the parameters are read', async () => {
    for (const as of ['U', 'M', 'G', 'B'] as const) {
      await expectRefused(() => createUser({}, as), adminRequired);
      await expectRefused(() => createUser({ ...NEW_USER, full_name: 'a|1' }, as), adminRequired);
    }
  });

  it('needs the can_create_users permission, which no one has by default', async () => {
    await expectRefused(() => createUser(NEW_USER, 'O'), errorBody('User not authorized to create users'));
    await expectRefused(() => createUser(NEW_USER, 'A'), errorBody('User not authorized to create users'));
  });

  it("checks, in Zulip's order, with Zulip's messages, and changes nothing", async () => {
    await ctx.ownDatabase();
    await grantCreateUsers('A');
    const missing = (name: string) =>
      JSON.stringify({ result: 'error', msg: `Missing '${name}' argument`, var_name: name, code: 'REQUEST_VARIABLE_MISSING' });
    await expectRefused(() => createUser({}), missing('email'));
    await expectRefused(() => createUser({ email: 'a@b.co' }), missing('password'));
    await expectRefused(() => createUser({ email: 'a@b.co', password: 'secret1' }), missing('full_name'));
    const cases: [Record<string, string>, string][] = [
      [{ full_name: 'x'.repeat(101) }, 'Name too long!'],
      [{ full_name: '   ' }, 'Name must not be empty!'],
      [{ full_name: 'Opheli*' }, 'Invalid characters in name!'],
      [{ full_name: 'a\u0000b' }, 'Invalid characters in name!'],
      [{ full_name: 'iago|72' }, 'Invalid format!'],
      [{ email: 'broken' }, 'Bad name or username'],
      [{ email: 'a b@example.com' }, 'Bad name or username'],
      [{ email: `${'x'.repeat(250)}@e.co` }, 'Bad name or username'],
      [{ email: 'U@EXAMPLE.com' }, 'Email is already in use.'],
      // A deactivated user's address is taken too; the address comes before the password.
      [{ email: 'd@example.com', password: '' }, 'Email is already in use.'],
      [{ password: '' }, 'The password is too weak.'],
      [{ password: 'five5' }, 'The password is too weak.'],
    ];
    for (const [change, msg] of cases) await expectRefused(() => createUser({ ...NEW_USER, ...change }), errorBody(msg));
  });

  it('creates a member and sends realm_user/add to every active user, with the queue numbering', async () => {
    await ctx.ownDatabase();
    await grantCreateUsers('A');
    const queueU = await createQueue(ctx.db, 'U');
    const queueG = await createQueue(ctx.db, 'G', ['realm_user']);
    const queueOther = await createQueue(ctx.db, 'X');
    const queueNoUsers = await createQueue(ctx.db, 'V', ['subscription']);
    const res = await createUser({ ...NEW_USER, short_name: 'np' });
    expect(res.statusCode).toBe(200);
    const userId = res.json().user_id as number;
    expect(userId).toBeGreaterThan(1000);
    expect(res.body).toBe(success({ user_id: userId, ignored_parameters_unsupported: ['short_name'] }));
    const row = await ctx.db.selectFrom('users').selectAll().where('id', '=', userId).executeTakeFirstOrThrow();
    expect(row).toMatchObject({
      realm_id: 1,
      delivery_email: 'New.Person@example.com',
      full_name: 'New Person',
      role: 400,
      is_active: true,
      bot_type: null,
      timezone: '',
      email_address_visibility: 1,
      can_create_users: false,
    });
    const person = newPerson(userId, expect.any(String));
    expect(await queueEvents(ctx.db, queueU)).toEqual([{ type: 'realm_user', op: 'add', person, id: 0 }]);
    expect(await queueEvents(ctx.db, queueG)).toEqual([{ type: 'realm_user', op: 'add', person, id: 0 }]);
    expect(await queueEvents(ctx.db, queueOther)).toEqual([]);
    expect(await queueEvents(ctx.db, queueNoUsers)).toEqual([]);
    const [event] = await queueEvents(ctx.db, queueU);
    expect(Object.keys(event!.person as object)).toEqual(Object.keys(person));
    // The same address again, in another case, is taken.
    await expectRefused(() => createUser({ ...NEW_USER, email: 'new.person@EXAMPLE.com' }), errorBody('Email is already in use.'));
    // register shows the new user.
    const state = (await register(ctx.app, { fetch_event_types: '["realm_user"]' })).json();
    expect(state.realm_users.map((user: { user_id: number }) => user.user_id)).toContain(userId);
  });

  it('costs a constant number of statements, whatever the number of queues or the guest access', async () => {
    await ctx.ownDatabase();
    await grantCreateUsers('A');
    ctx.database.statements.length = 0;
    expect((await createUser({ ...NEW_USER, email: 'one@example.com' })).statusCode).toBe(200);
    const one = ctx.database.statements.length;
    for (const user of ['U', 'V', 'G', 'M', 'O'] as const) await createQueue(ctx.db, user);
    ctx.database.statements.length = 0;
    expect((await createUser({ ...NEW_USER, email: 'two@example.com' })).statusCode).toBe(200);
    expect(ctx.database.statements.length).toBe(one);
    // The same in an organization that restricts guests (placeholders, user_list_incomplete).
    await restrict(ctx.db);
    await createQueue(ctx.db, 'G', null, true);
    ctx.database.statements.length = 0;
    expect((await createUser({ ...NEW_USER, email: 'three@example.com' })).statusCode).toBe(200);
    expect(ctx.database.statements.length).toBe(one);
  });

  it('in a restricted organization guests get the placeholder, except clients with user_list_incomplete', async () => {
    await ctx.ownDatabase();
    await restrict(ctx.db);
    await grantCreateUsers('A');
    const queueU = await createQueue(ctx.db, 'U');
    const queueA = await createQueue(ctx.db, 'A');
    const queueG = await createQueue(ctx.db, 'G');
    const queueGIncomplete = await createQueue(ctx.db, 'G', null, true);
    const res = await createUser(NEW_USER);
    expect(res.statusCode).toBe(200);
    const userId = res.json().user_id as number;
    const joined = await ctx.db.selectFrom('users').select('date_joined').where('id', '=', userId).executeTakeFirstOrThrow();
    const person = newPerson(userId, formatDateJoined(joined.date_joined));
    // Zulip's get_data_for_inaccessible_user, with Tornado's inaccessible_user flag removed.
    const placeholder = placeholderObject(userId, true);
    const full = JSON.stringify([{ type: 'realm_user', op: 'add', person, id: 0 }]);
    expect(JSON.stringify(await queueEvents(ctx.db, queueU))).toBe(full);
    expect(JSON.stringify(await queueEvents(ctx.db, queueA))).toBe(full);
    expect(JSON.stringify(await queueEvents(ctx.db, queueG))).toBe(
      JSON.stringify([{ type: 'realm_user', op: 'add', person: placeholder, id: 0 }]),
    );
    expect(await queueEvents(ctx.db, queueGIncomplete)).toEqual([]);
    const queues = await ctx.db.selectFrom('event_queues').select(['id', 'next_event_id']).where('user_id', '=', ids.G).execute();
    expect(Object.fromEntries(queues.map((q) => [q.id, q.next_event_id]))).toEqual({ [queueG]: 1, [queueGIncomplete]: 0 });

    // register agrees: the placeholder (without is_active) for the guest, nothing with
    // user_list_incomplete; the capability is stored with the queue.
    const registered = async (form: Record<string, string>) => {
      const body = (await register(ctx.app, { fetch_event_types: '["realm_user"]', ...form }, 'G')).json();
      const row = await ctx.db
        .selectFrom('event_queues')
        .select('user_list_incomplete')
        .where('id', '=', body.queue_id)
        .executeTakeFirstOrThrow();
      return {
        users: (body.realm_users as { user_id: number }[]).filter((user) => user.user_id === userId),
        incomplete: row.user_list_incomplete,
      };
    };
    const complete = await registered({});
    expect(JSON.stringify(complete.users)).toBe(JSON.stringify([placeholderObject(userId, false)]));
    expect(complete.incomplete).toBe(false);
    expect(await registered({ client_capabilities: '{"user_list_incomplete":true}' })).toEqual({ users: [], incomplete: true });
  });
});

describe('DELETE /api/v1/users/{user_id}', () => {
  it('deactivates, ends the queues and API access of the user at once, and tells everyone else', async () => {
    await ctx.ownDatabase();
    const queueV = await createQueue(ctx.db, 'V');
    const queueU = await createQueue(ctx.db, 'U');
    const queueO = await createQueue(ctx.db, 'O', ['subscription']);
    const res = await deactivate(ids.V, 'A', { deactivation_notification_comment: 'bye' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect(await isActive(ids.V)).toBe(false);
    expect(await ctx.db.selectFrom('event_queues').select('id').where('id', '=', queueV).executeTakeFirst()).toBeUndefined();
    // V's channels' peers first (test/users-management-peers.test.ts details them), then the deactivation.
    const peerRemove = (streamIds: number[], id: number) => ({
      type: 'subscription',
      op: 'peer_remove',
      stream_ids: streamIds,
      user_ids: [ids.V],
      id,
    });
    expect(await queueEvents(ctx.db, queueU)).toEqual([
      peerRemove([ids.P], 0),
      peerRemove([ids.Q], 1),
      peerRemove([ids.W], 2),
      { type: 'realm_user', op: 'update', person: { user_id: ids.V, is_active: false }, id: 3 },
    ]);
    expect(await queueEvents(ctx.db, queueO)).toEqual([
      peerRemove([ids.P], 0),
      peerRemove([ids.S], 1),
      peerRemove([ids.Q], 2),
      peerRemove([ids.W], 3),
    ]);
    const asV = await api(ctx.app, { url: '/api/v1/users/me', headers: { authorization: basicAuth('v@example.com', apiKeys.V) } });
    expect(asV.statusCode).toBe(401);
    expect(asV.body).toBe(errorBody('Account is deactivated', 'UNAUTHORIZED'));
    await expectRefused(() => deactivate(ids.V), errorBody('User is deactivated'));
  });

  it("deactivates the user's active bots first, each with its event", async () => {
    await ctx.ownDatabase();
    const queueA = await createQueue(ctx.db, 'A');
    expect((await deactivate(ids.U)).statusCode).toBe(200);
    expect(await isActive(ids.B)).toBe(false);
    expect(await isActive(ids.H)).toBe(false);
    const realmUser = (await queueEvents(ctx.db, queueA)).filter((event) => event.type === 'realm_user');
    expect(realmUser.map((event) => (event.person as { user_id: number }).user_id)).toEqual([ids.B, ids.H, ids.U]);
  });

  it('actions.delete_profile renames and resets the avatar of the bots, then the user, each before its deactivation', async () => {
    await ctx.ownDatabase();
    await ctx.db.updateTable('users').set({ avatar_source: 'U', avatar_version: 3 }).where('id', '=', ids.U).execute();
    // A name that is already the placeholder changes nothing and sends nothing (Zulip's do_change_full_name).
    await ctx.db.updateTable('users').set({ full_name: 'Deactivated bot' }).where('id', '=', ids.H).execute();
    const queueA = await createQueue(ctx.db, 'A');
    const res = await deactivate(ids.U, 'A', { actions: JSON.stringify({ delete_profile: true }) });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    const rows = await ctx.db
      .selectFrom('users')
      .select(['id', 'full_name', 'avatar_source', 'avatar_version', 'is_active', 'delivery_email', 'is_deleted'])
      .where('id', 'in', [ids.U, ids.B, ids.H])
      .orderBy('id')
      .execute();
    expect(rows).toEqual([
      {
        id: ids.U,
        full_name: 'Deleted user',
        avatar_source: 'G',
        avatar_version: 4,
        is_active: false,
        delivery_email: 'u@example.com',
        is_deleted: false,
      },
      {
        id: ids.B,
        full_name: 'Deactivated bot',
        avatar_source: 'G',
        avatar_version: 1,
        is_active: false,
        delivery_email: 'b-bot@chat.example.com',
        is_deleted: false,
      },
      {
        id: ids.H,
        full_name: 'Deactivated bot',
        avatar_source: 'G',
        avatar_version: 1,
        is_active: false,
        delivery_email: 'h-bot@chat.example.com',
        is_deleted: false,
      },
    ]);
    const update = (person: Record<string, unknown>) => ({ type: 'realm_user', op: 'update', person });
    const hash = createHash('md5').update('u@example.com').digest('hex');
    const events = (await queueEvents(ctx.db, queueA)).map(({ id: _id, ...event }) =>
      event.type === 'subscription' ? `peer_remove ${JSON.stringify(event.user_ids)}` : event,
    );
    expect(events.filter((event) => typeof event === 'string')).toEqual([`peer_remove [${ids.U}]`, `peer_remove [${ids.U}]`]);
    expect(events).toEqual([
      update({ user_id: ids.B, full_name: 'Deactivated bot' }),
      update({ user_id: ids.B, is_active: false }),
      update({ user_id: ids.H, is_active: false }),
      update({ user_id: ids.U, full_name: 'Deleted user' }),
      update({
        avatar_source: 'G',
        avatar_url: `https://secure.gravatar.com/avatar/${hash}?d=identicon&version=4`,
        avatar_url_medium: `https://secure.gravatar.com/avatar/${hash}?d=identicon&s=500&version=4`,
        avatar_version: 4,
        user_id: ids.U,
      }),
      ...events.filter((event) => typeof event === 'string'),
      update({ user_id: ids.U, is_active: false }),
    ]);
  });

  it('accepts the message deletions (nothing to delete here) and ignores unknown keys of actions', async () => {
    await ctx.ownDatabase();
    const actions = { delete_public_channel_messages: true, delete_private_channel_messages: true, delete_direct_messages: true, foo: 1 };
    const res = await deactivate(ids.V, 'A', { actions: JSON.stringify(actions) });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    const row = await ctx.db.selectFrom('users').select(['full_name', 'is_active']).where('id', '=', ids.V).executeTakeFirstOrThrow();
    expect(row).toEqual({ full_name: 'V Member', is_active: false });
  });

  it("refuses a bad actions value with Zulip's messages and changes nothing", async () => {
    const notObject = errorBody('Invalid actions: Input should be a valid dictionary or instance of DeactivateUserActions');
    await expectRefused(() => deactivate(ids.V, 'A', { actions: '{' }), errorBody('actions is not valid JSON'));
    for (const value of ['[]', 'null', '"delete_profile"', 'true', '1']) {
      await expectRefused(() => deactivate(ids.V, 'A', { actions: value }), notObject);
    }
    await expectRefused(
      () => deactivate(ids.V, 'A', { actions: '{"delete_profile": "true"}' }),
      errorBody('actions["delete_profile"] is not a boolean'),
    );
    await expectRefused(
      () => deactivate(ids.V, 'A', { actions: '{"delete_profile": true, "delete_direct_messages": null}' }),
      errorBody('actions["delete_direct_messages"] is not a boolean'),
    );
    // The parameters are read before the target is looked up.
    await expectRefused(() => deactivate(999999, 'A', { actions: '[]' }), notObject);
  });

  it("refuses with Zulip's messages and changes nothing", async () => {
    await expectRefused(() => deactivate(ids.B), errorBody('No such user'));
    await expectRefused(() => deactivate(999999), errorBody('No such user'));
    await expectRefused(() => deactivate('99999999999'), errorBody('No such user'));
    await expectRefused(() => deactivate(ids.X), errorBody('No such user'));
    await expectRefused(() => deactivate(ids.D), errorBody('User is deactivated'));
    await expectRefused(() => deactivate(ids.V, 'U'), errorBody('Insufficient permission'));
    await expectRefused(() => deactivate(ids.V, 'M'), errorBody('Insufficient permission'));
    await expectRefused(() => deactivate(ids.O, 'A'), errorBody('Must be an organization owner', 'UNAUTHORIZED_PRINCIPAL'));
    await expectRefused(() => deactivate(ids.O, 'O'), errorBody('Cannot deactivate the only organization owner'));
    await expectRefused(
      () => deactivate(ids.V, 'A', { deactivation_notification_comment: 'x'.repeat(2001) }),
      errorBody('deactivation_notification_comment is too long (limit: 2000 characters)'),
    );
  });

  it('a non-numeric path is not this route', async () => {
    const res = await deactivate('abc');
    expect(res.statusCode).toBe(405);
    expect(res.body).toBe(JSON.stringify({ result: 'error', msg: 'Method Not Allowed', allowed_methods: ['GET', 'HEAD', 'PATCH'] }));
  });

  it('costs a constant number of statements', async () => {
    await ctx.ownDatabase();
    ctx.database.statements.length = 0;
    expect((await deactivate(ids.V)).statusCode).toBe(200);
    const one = ctx.database.statements.length;
    ctx.database.statements.length = 0;
    expect((await deactivate(ids.U)).statusCode).toBe(200);
    expect(ctx.database.statements.length).toBe(one);
    // Deleting the profiles too costs nothing more.
    await reactivate(ids.U);
    ctx.database.statements.length = 0;
    expect((await deactivate(ids.U, 'A', { actions: '{"delete_profile":true}' })).statusCode).toBe(200);
    expect(ctx.database.statements.length).toBe(one);
  });
});

describe('DELETE /api/v1/users/me', () => {
  beforeEach(() => ctx.ownDatabase());

  it('the only owner stays', async () => {
    await expectRefused(
      () => api(ctx.app, { method: 'DELETE', url: '/api/v1/users/me', as: 'O' }),
      JSON.stringify({
        result: 'error',
        msg: 'Cannot deactivate the only organization owner.',
        is_last_owner: true,
        entity: 'organization owner',
        code: 'CANNOT_DEACTIVATE_LAST_USER',
      }),
    );
  });

  it('the last user stays', async () => {
    await expectRefused(
      () => api(ctx.app, { method: 'DELETE', url: '/api/v1/users/me', as: 'X', host: 'other.chat.example.com' }),
      JSON.stringify({
        result: 'error',
        msg: 'Cannot deactivate the only user.',
        is_last_owner: false,
        entity: 'user',
        code: 'CANNOT_DEACTIVATE_LAST_USER',
      }),
    );
  });

  it('a member deactivates themselves and their bots; parameters are not reported', async () => {
    const queueV = await createQueue(ctx.db, 'V');
    const res = await api(ctx.app, { method: 'DELETE', url: '/api/v1/users/me', as: 'U', form: { foo: '1' } });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect(await isActive(ids.U)).toBe(false);
    expect(await isActive(ids.B)).toBe(false);
    const realmUser = (await queueEvents(ctx.db, queueV)).filter((event) => event.type === 'realm_user');
    expect(realmUser.map((event) => event.person)).toEqual([
      { user_id: ids.B, is_active: false },
      { user_id: ids.H, is_active: false },
      { user_id: ids.U, is_active: false },
    ]);
  });

  it('an owner may leave when another owner remains', async () => {
    await ctx.db.updateTable('users').set({ role: 100 }).where('id', '=', ids.A).execute();
    expect((await api(ctx.app, { method: 'DELETE', url: '/api/v1/users/me', as: 'O' })).statusCode).toBe(200);
    await expectRefused(
      () => api(ctx.app, { method: 'DELETE', url: '/api/v1/users/me', as: 'A' }),
      JSON.stringify({
        result: 'error',
        msg: 'Cannot deactivate the only organization owner.',
        is_last_owner: true,
        entity: 'organization owner',
        code: 'CANNOT_DEACTIVATE_LAST_USER',
      }),
    );
  });
});

describe('POST /api/v1/users/{user_id}/reactivate', () => {
  beforeEach(() => ctx.ownDatabase());

  it('reactivates and tells everyone', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    const res = await reactivate(ids.D);
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect(await isActive(ids.D)).toBe(true);
    expect(await queueEvents(ctx.db, queueU)).toEqual([
      { type: 'realm_user', op: 'update', person: { user_id: ids.D, is_active: true }, id: 0 },
      // D is subscribed to P: its peers hear of it again.
      { type: 'subscription', op: 'peer_add', stream_ids: [ids.P], user_ids: [ids.D], id: 1 },
    ]);
  });

  it('an active user: success, nothing sent', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    const res = await api(ctx.app, { method: 'POST', url: `/api/v1/users/${ids.V}/reactivate`, as: 'A', form: { foo: '1' } });
    expect(res.body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toEqual([]);
  });

  it("refuses with Zulip's messages and changes nothing", async () => {
    await expectRefused(() => reactivate(ids.D, 'U'), errorBody('Insufficient permission'));
    await expectRefused(() => reactivate(999999), errorBody('No such user'));
    await expectRefused(() => reactivate(ids.X), errorBody('No such user'));
    await expectRefused(
      () => reactivate(ids.B),
      errorBody(
        'There is already an active bot named "B Bot" in this organization. To reactivate this bot, you must rename or deactivate the other one first.',
      ),
    );
  });

  it("an imported stub (Zulip's mirror dummy) is a placeholder: refused, nothing changed (test_api_with_mirrordummy_user)", async () => {
    await ctx.db.updateTable('users').set({ is_imported_stub: true }).where('id', '=', ids.D).execute();
    const queueU = await createQueue(ctx.db, 'U');
    await expectRefused(() => reactivate(ids.D), errorBody('Cannot activate a placeholder account; ask the user to sign up, instead.'));
    expect(await isActive(ids.D)).toBe(false);
    expect(await queueEvents(ctx.db, queueU)).toEqual([]);
  });

  it("a bot's owner may reactivate it; a bot of a deactivated owner gets the caller as its owner", async () => {
    await ctx.db.updateTable('users').set({ is_active: false }).where('id', '=', ids.B).execute();
    expect((await reactivate(ids.B, 'U')).statusCode).toBe(200);
    expect(await isActive(ids.B)).toBe(true);
    expect((await deactivate(ids.U)).statusCode).toBe(200);
    const queueM = await createQueue(ctx.db, 'M');
    expect((await reactivate(ids.B, 'A')).statusCode).toBe(200);
    const bot = await ctx.db.selectFrom('users').select(['is_active', 'bot_owner_id']).where('id', '=', ids.B).executeTakeFirstOrThrow();
    expect(bot).toEqual({ is_active: true, bot_owner_id: ids.A });
    expect((await queueEvents(ctx.db, queueM)).map((event) => event.person)).toEqual([
      { user_id: ids.B, is_active: true },
      { user_id: ids.B, bot_owner_id: ids.A },
    ]);
  });
});

describe('PATCH /api/v1/users/{user_id | email}', () => {
  beforeEach(() => ctx.ownDatabase());

  const patch = (user: number | string, form: Record<string, string>, as: FixtureUser = 'A') =>
    api(ctx.app, { method: 'PATCH', url: `/api/v1/users/${user}`, as, form });
  const row = (userId: number) =>
    ctx.db.selectFrom('users').select(['full_name', 'role']).where('id', '=', userId).executeTakeFirstOrThrow();
  const update = (userId: number, person: object, id: number) => ({
    type: 'realm_user',
    op: 'update',
    person: { user_id: userId, ...person },
    id,
  });

  it('changes the role, and everyone (the user too) gets realm_user/update', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    const queueV = await createQueue(ctx.db, 'V');
    const res = await patch(ids.V, { role: '200' });
    expect(res.body).toBe(OK);
    expect((await row(ids.V)).role).toBe(200);
    expect(await queueEvents(ctx.db, queueU)).toEqual([update(ids.V, { role: 200 }, 0)]);
    expect(await queueEvents(ctx.db, queueV)).toEqual([update(ids.V, { role: 200 }, 0)]);
    // The same role again: nothing.
    expect((await patch(ids.V, { role: '200' })).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toHaveLength(1);
  });

  it('role rules: only owners grant or remove ownership; the only owner stays; parsing comes first', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    await expectRefused(
      () => patch(ids.V, { role: '1000' }, 'U'),
      errorBody('Invalid role: Value error, Not in the list of possible values'),
    );
    await expectRefused(() => patch(ids.V, { role: '"200"' }), errorBody('role is not an integer'));
    await expectRefused(() => patch(ids.V, { role: 'x' }), errorBody('role is not valid JSON'));
    await expectRefused(() => patch(ids.V, { role: '200' }, 'U'), errorBody('Insufficient permission'));
    await expectRefused(() => patch(ids.U, { role: '200' }, 'U'), errorBody('Insufficient permission'));
    await expectRefused(() => patch(ids.V, { role: '100' }), errorBody('Must be an organization owner', 'UNAUTHORIZED_PRINCIPAL'));
    await expectRefused(() => patch(ids.O, { role: '200' }), errorBody('Must be an organization owner', 'UNAUTHORIZED_PRINCIPAL'));
    await expectRefused(
      () => patch(ids.O, { role: '400' }, 'O'),
      errorBody('The owner permission cannot be removed from the only organization owner.'),
    );
    await expectRefused(
      () => patch(ids.B, { role: '200' }, 'U'),
      errorBody('Must be an organization administrator', 'UNAUTHORIZED_PRINCIPAL'),
    );
    await expectRefused(() => patch(ids.X, { full_name: 'x' }), errorBody('No such user'));
    await expectRefused(() => patch(999999, { full_name: 'x' }), errorBody('No such user'));
    await expectRefused(() => patch(ids.V, { new_email: 'v2@example.com' }, 'O'), errorBody('User not authorized to change user emails'));
    expect(await queueEvents(ctx.db, queueU)).toEqual([]);
    // An owner makes another owner, who may then be demoted.
    expect((await patch(ids.A, { role: '100' }, 'O')).body).toBe(OK);
    expect((await patch(ids.O, { role: '200' }, 'A')).body).toBe(OK);
    expect((await row(ids.O)).role).toBe(200);
  });

  it('full_name: blank or unchanged is ignored; otherwise checked as at creation', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    expect((await patch(ids.V, { full_name: '   ' })).body).toBe(OK);
    expect((await patch(ids.V, { full_name: 'V Member' })).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toEqual([]);
    await expectRefused(() => patch(ids.V, { full_name: 'Opheli*' }), errorBody('Invalid characters in name!'));
    await expectRefused(() => patch(ids.V, { full_name: 'x'.repeat(101) }), errorBody('Name too long!'));
    await expectRefused(() => patch(ids.V, { full_name: 'iago|72' }), errorBody('Invalid format!'));
    expect((await patch('v@example.com', { full_name: ' Vera ', extra: '1' })).body).toBe(
      success({ ignored_parameters_unsupported: ['extra'] }),
    );
    expect((await row(ids.V)).full_name).toBe('Vera');
    // A bot's owner may rename it; a deactivated user may be renamed.
    expect((await patch(ids.B, { full_name: 'Robo' }, 'U')).body).toBe(OK);
    expect((await patch(ids.D, { full_name: 'Dee' })).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toEqual([
      update(ids.V, { full_name: 'Vera' }, 0),
      update(ids.B, { full_name: 'Robo' }, 1),
      update(ids.D, { full_name: 'Dee' }, 2),
    ]);
  });

  it('profile_data: set, remove, validate by field type; one event per changed field', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    await expectRefused(() => patch(ids.V, { profile_data: '[{"id":9001,"value":"x"}]' }), errorBody('Field id 9001 not found.'));
    await expectRefused(() => patch(ids.V, { profile_data: '[{"id":9001,"value":null}]' }), errorBody('Field id 9001 not found.'));
    await expectRefused(
      () => patch(ids.V, { profile_data: '[{"id":3,"value":"bad"}]' }),
      errorBody("'bad' is not a valid choice for 'Team'."),
    );
    await expectRefused(() => patch(ids.V, { profile_data: '[{"id":4,"value":"soon"}]' }), errorBody('Birthday is not a date'));
    // A lone surrogate cannot reach PostgreSQL inside JSON (it failed there as a 500).
    await expectRefused(
      () => patch(ids.V, { profile_data: '[{"id":2,"value":"a\\ud800b"}]' }),
      errorBody('Invalid characters in Biography'),
    );
    await expectRefused(
      () => patch(ids.V, { profile_data: '[{"id":1,"value":"x"},{"id":4,"value":"soon"}]' }),
      errorBody('Birthday is not a date'),
    );
    await expectRefused(() => patch(ids.V, { profile_data: '{}' }), errorBody('profile_data is not a list'));
    await expectRefused(
      () => patch(ids.V, { profile_data: '[{"value":"x"}]' }),
      errorBody('profile_data[0]["id"] field is missing: Field required'),
    );
    const res = await patch(ids.V, { profile_data: '[{"id":1,"value":"**New**"},{"id":4,"value":null},{"id":3,"value":"opt1"}]' });
    expect(res.body).toBe(OK);
    const values = await ctx.db
      .selectFrom('custom_profile_field_values')
      .select(['field_id', 'value', 'rendered_value'])
      .where('user_id', '=', ids.V)
      .orderBy('field_id')
      .execute();
    expect(values).toEqual([
      { field_id: 1, value: '**New**', rendered_value: '<p><strong>New</strong></p>' },
      { field_id: 2, value: 'line1\nline2 <b>x</b>', rendered_value: expect.any(String) as unknown },
      { field_id: 3, value: 'opt1', rendered_value: null },
    ]);
    // The removal first (Zulip removes before it sets); the unchanged select value sends nothing.
    expect(await queueEvents(ctx.db, queueU)).toEqual([
      update(ids.V, { custom_profile_field: { id: 4, value: null } }, 0),
      update(ids.V, { custom_profile_field: { id: 1, value: '**New**', rendered_value: '<p><strong>New</strong></p>' } }, 1),
    ]);
  });

  it("profile_data: a user-list field takes ids of the organization's active humans, checked as Zulip's check_valid_user_ids", async () => {
    await ctx.db.insertInto('custom_profile_fields').values({ id: 5, realm_id: 1, name: 'Mentor', field_type: 6 }).execute();
    await ctx.db
      .insertInto('custom_profile_field_values')
      .values({ realm_id: 1, user_id: ids.V, field_id: 5, value: `[${ids.U}]` })
      .execute();
    const queueU = await createQueue(ctx.db, 'U');
    const values = () => ctx.db.selectFrom('custom_profile_field_values').selectAll().orderBy('user_id').orderBy('field_id').execute();
    const before = await values();
    const refused = async (value: string, msg: string) => {
      // Another field's valid change in the same request is not kept either.
      await expectRefused(() => patch(ids.V, { profile_data: `[{"id":1,"value":"kept?"},{"id":5,"value":${value}}]` }), errorBody(msg));
      expect(await values()).toEqual(before);
    };
    // The validator's own name for the value, not the field's (Zulip's test: "User IDs is not a list" for "Mentor").
    await refused('"not a list"', 'User IDs is not a list');
    // Every id that names no user of the organization, in request order: unknown, another organization's, beyond integers.
    await refused(`[${ids.U},999999,${ids.X},99999999999,999999]`, `Invalid user IDs: 999999, ${ids.X}, 99999999999, 999999`);
    await refused('[-1]', 'Invalid user IDs: -1');
    // Then the first user, by id, who is deactivated or a bot.
    await refused(`[${ids.U},${ids.D},${ids.B}]`, `User with ID ${ids.B} is a bot`);
    await refused(`[${ids.D},${ids.U}]`, `User with ID ${ids.D} is deactivated`);
    await refused(`[${ids.H}]`, `User with ID ${ids.H} is a bot`);
    // Active humans, guests included, in the order given.
    expect((await patch(ids.V, { profile_data: `[{"id":5,"value":[${ids.G},${ids.O}]}]` })).body).toBe(OK);
    const stored = await ctx.db
      .selectFrom('custom_profile_field_values')
      .select('value')
      .where('user_id', '=', ids.V)
      .where('field_id', '=', 5)
      .executeTakeFirstOrThrow();
    expect(stored.value).toBe(`[${ids.G},${ids.O}]`);
    expect(await queueEvents(ctx.db, queueU)).toEqual([
      update(ids.V, { custom_profile_field: { id: 5, value: `[${ids.G},${ids.O}]` } }, 0),
    ]);
  });

  it('costs a constant number of statements, whatever the number of fields and changes', async () => {
    ctx.database.statements.length = 0;
    expect((await patch(ids.V, { full_name: 'One', profile_data: '[{"id":1,"value":"a"}]' })).body).toBe(OK);
    const one = ctx.database.statements.length;
    ctx.database.statements.length = 0;
    const many = '[{"id":1,"value":"b"},{"id":2,"value":"c"},{"id":3,"value":"opt1"},{"id":4,"value":null}]';
    expect((await patch(ids.V, { full_name: 'Two', role: '300', profile_data: many })).body).toBe(OK);
    expect(ctx.database.statements.length).toBe(one);
  });

  it('an empty PATCH succeeds and sends nothing; PATCH /users/me is not a route', async () => {
    const queueU = await createQueue(ctx.db, 'U');
    expect((await patch(ids.V, {})).body).toBe(OK);
    expect(await queueEvents(ctx.db, queueU)).toEqual([]);
    expect((await patch('me', { full_name: 'x' })).statusCode).toBe(405);
  });
});
