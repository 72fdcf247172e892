import { describe, expect, it } from 'vitest';
import type { Database } from '../src/db/database.js';
import { api, createTestContext, useSharedTestContext } from './helpers/app.js';
import { errorBody, expectError, success } from './helpers/envelope.js';
import { type FixtureUser, restrict } from './helpers/fixture.js';

/** GET /api/v1/users/{email} (docs/api.md §3.6, acceptance cases docs/api.md §5.9). */

const V_USER = {
  email: 'v@example.com',
  user_id: 14,
  avatar_version: 1,
  is_admin: false,
  is_owner: false,
  is_guest: false,
  role: 400,
  is_bot: false,
  full_name: 'V Member',
  timezone: '',
  is_active: true,
  date_joined: '2024-01-02T03:04+00:00',
  delivery_email: 'v@example.com',
  avatar_url: null,
  is_imported_stub: false,
};
const V_GRAVATAR = 'https://secure.gravatar.com/avatar/19eb9884e5d9ee1df522e134f90f6cea?d=identicon&version=1';

const ok = (user: object, extra: object = {}) => success({ user, ...extra });

async function snapshot(db: Database) {
  return {
    users: await db.selectFrom('users').selectAll().orderBy('id').execute(),
    realms: await db.selectFrom('realms').selectAll().orderBy('id').execute(),
  };
}

const setVisibility = (db: Database, userId: number, visibility: number) =>
  db.updateTable('users').set({ email_address_visibility: visibility }).where('id', '=', userId).execute();

// Shared by the tests that only read; those that change the fixture take their own.
const ctx = useSharedTestContext();

const get = (path: string, as: FixtureUser = 'U') => api(ctx.app, { url: `/api/v1/users/${path}`, as });

/** A 400 with `msg` that changed nothing. */
async function expectRefused(path: string, msg: string, as: FixtureUser = 'U') {
  const before = await snapshot(ctx.db);
  expectError(await get(path, as), msg);
  expect(await snapshot(ctx.db)).toEqual(before);
}

describe('GET /api/v1/users/{email}', () => {
  it('case 109: the delivery email finds the user, ignoring case', async () => {
    for (const path of ['v@example.com', 'V@EXAMPLE.COM', 'V%40Example.Com']) {
      const res = await get(path);
      expect(res.statusCode).toBe(200);
      expect(res.body).toBe(ok(V_USER));
    }
  });

  it('the address is whitespace-trimmed; parameters and ignored names work as on the id route', async () => {
    expect((await get('%20v@example.com%09')).body).toBe(ok(V_USER));
    const res = await get('v@example.com?client_gravatar=false&include_custom_profile_fields=true&zz=1');
    expect(res.json()).toMatchObject({ user: { avatar_url: V_GRAVATAR, profile_data: { 3: { value: 'opt1' } } } });
    expect(res.json().ignored_parameters_unsupported).toEqual(['zz']);
    await expectRefused('v@example.com?client_gravatar=yes', 'client_gravatar is not valid JSON');
  });

  it('case 110: a hidden address is not found; the dummy address always is', async () => {
    await ctx.ownDatabase();
    await setVisibility(ctx.db, 14, 3);
    await expectRefused('v@example.com', 'No such user');
    const dummy = await get('user14@chat.example.com');
    expect(dummy.statusCode).toBe(200);
    expect(dummy.body).toBe(ok({ ...V_USER, email: 'user14@chat.example.com', delivery_email: null, avatar_url: V_GRAVATAR }));
    const admin = await get('v@example.com', 'A');
    expect(admin.body).toBe(ok({ ...V_USER, email: 'user14@chat.example.com' }));
  });

  it('case 111: visibility 4 hides the address from admins but not from the user itself', async () => {
    await ctx.ownDatabase();
    await setVisibility(ctx.db, 14, 4);
    await expectRefused('v@example.com', 'No such user', 'A');
    await expectRefused('v@example.com', 'No such user', 'O');
    const self = await get('v@example.com', 'V');
    expect(self.statusCode).toBe(200);
    expect(self.json().user).toMatchObject({ user_id: 14, email: 'user14@chat.example.com', delivery_email: 'v@example.com' });
  });

  it('the lookup by address follows the visibility matrix for each role', async () => {
    await ctx.ownDatabase();
    const visibleTo: Record<string, number[]> = { O: [1, 2, 3, 5], A: [1, 2, 3, 5], M: [1, 2, 5], U: [1, 2], G: [1] };
    for (const visibility of [1, 2, 3, 4, 5]) {
      await setVisibility(ctx.db, 14, visibility);
      for (const caller of ['O', 'A', 'M', 'U', 'G'] as const) {
        const res = await get('v@example.com', caller);
        const found = visibleTo[caller]!.includes(visibility);
        expect({ visibility, caller, status: res.statusCode }).toEqual({ visibility, caller, status: found ? 200 : 400 });
      }
    }
  });

  it('case 112: unknown, foreign, out-of-range dummy and wrongly-cased dummy addresses are not found', async () => {
    for (const path of [
      'nobody@example.com',
      'x@example.com',
      'user999999@chat.example.com',
      'USER14@chat.example.com',
      'user30@chat.example.com',
      'user99999999999999999999@chat.example.com',
      'user14@CHAT.EXAMPLE.COM',
      'user14@other.chat.example.com',
      'user@chat.example.com',
      'user14@chat.example.com.evil',
      // PostgreSQL text cannot hold NUL: no address has one, and the lookup must not fail.
      'v%00@example.com',
      'v@example.com%00',
    ]) {
      await expectRefused(path, 'No such user');
    }
  });

  it('a dummy address with leading zeros is a lookup by that id; any user is found by it', async () => {
    expect((await get('user014@chat.example.com')).body).toBe(ok(V_USER));
    expect((await get('user10@chat.example.com')).json().user.user_id).toBe(10);
    expect((await get('user16@chat.example.com')).json().user.user_id).toBe(16);
  });

  it('case 113: a restricted guest gets Insufficient permission for a visible address it cannot access', async () => {
    await ctx.ownDatabase();
    await restrict(ctx.db);
    await expectRefused('owner@example.com', 'Insufficient permission', 'G');
    await expectRefused('user10@chat.example.com', 'Insufficient permission', 'G');
    expect((await get('v@example.com', 'G')).statusCode).toBe(200);
    expect((await get('b-bot@chat.example.com', 'G')).statusCode).toBe(200);
  });

  it('case 114: a bot is found by its address', async () => {
    const res = await get('b-bot@chat.example.com');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(
      ok({
        email: 'b-bot@chat.example.com',
        user_id: 16,
        avatar_version: 1,
        is_admin: false,
        is_owner: false,
        is_guest: false,
        role: 400,
        is_bot: true,
        full_name: 'B Bot',
        timezone: '',
        is_active: true,
        date_joined: '2024-01-02T03:04+00:00',
        delivery_email: 'b-bot@chat.example.com',
        avatar_url: null,
        is_imported_stub: false,
        bot_type: 1,
        bot_owner_id: 13,
      }),
    );
  });

  it('a deactivated user is found by address', async () => {
    expect((await get('d@example.com')).json().user).toMatchObject({ user_id: 18, is_active: false });
  });

  it('lookups cost two statements (authentication and one query)', async () => {
    for (const path of ['v@example.com', 'user14@chat.example.com']) {
      ctx.database.statements.length = 0;
      expect((await get(`${path}?include_custom_profile_fields=true`)).statusCode).toBe(200);
      expect(ctx.database.statements).toHaveLength(2);
    }
  });

  it('with EXTERNAL_HOST=localhost:9991 dummy addresses use FAKE_EMAIL_DOMAIN', async () => {
    const local = await createTestContext({ env: { EXTERNAL_HOST: 'localhost:9991' } });
    try {
      const found = await api(local.app, { url: '/api/v1/users/user14@localhost', as: 'U', host: 'localhost:9991' });
      expect(found.json().user.user_id).toBe(14);
      const other = await api(local.app, { url: '/api/v1/users/user14@localhost:9991', as: 'U', host: 'localhost:9991' });
      expect(other.body).toBe(errorBody('No such user'));
    } finally {
      await local.close();
    }
  });
});
