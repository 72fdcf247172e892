import { describe, expect, it } from 'vitest';
import { hashApiKey } from '../src/lib/api-keys.js';
import { api, useSharedTestContext } from './helpers/app.js';
import { errorBody, expectError, success } from './helpers/envelope.js';
import { type FixtureUser, restrict } from './helpers/fixture.js';
import { humanObject } from './helpers/users.js';

/** GET /api/v1/users (docs/api.md §3.7, acceptance cases docs/api.md §5.10). */

const JOINED = '2024-01-02T03:04+00:00';
const human = humanObject;
const bot = (id: number, fullName: string, email: string, botType: number) => ({
  email,
  user_id: id,
  avatar_version: 1,
  is_admin: false,
  is_owner: false,
  is_guest: false,
  role: 400,
  is_bot: true,
  full_name: fullName,
  timezone: '',
  is_active: true,
  date_joined: JOINED,
  delivery_email: email,
  avatar_url: null,
  is_imported_stub: false,
  bot_type: botType,
  bot_owner_id: 13,
});

const O = human(10, 'O Owner', 'owner@example.com', 100);
const A = human(11, 'A Admin', 'admin@example.com', 200);
const M = human(12, 'M Mod', 'mod@example.com', 300);
const U = human(13, 'U Member', 'u@example.com', 400);
const V = human(14, 'V Member', 'v@example.com', 400);
const G = human(15, 'G Guest', 'guest@example.com', 600);
const B = bot(16, 'B Bot', 'b-bot@chat.example.com', 1);
const H = bot(17, 'H Hook', 'h-bot@chat.example.com', 2);
const D = human(18, 'D Gone', 'd@example.com', 400, { is_active: false });
const V_PROFILE_DATA = {
  1: { value: '**Lead**', rendered_value: '<p><strong>Lead</strong></p>' },
  2: { value: 'line1\nline2 <b>x</b>', rendered_value: '<p>line1<br>\nline2 &lt;b&gt;x&lt;/b&gt;</p>' },
  3: { value: 'opt1' },
  4: { value: '2000-01-01' },
};

const ok = (members: object[], extra: object = {}) => success({ members, ...extra });
const withProfile = (user: object, profile_data: object = {}) => ({ ...user, profile_data });

// Shared by the tests that only read; those that write take their own.
const ctx = useSharedTestContext();

const list = (query = '', as: FixtureUser = 'U') => api(ctx.app, { url: `/api/v1/users${query}`, as });

describe('GET /api/v1/users', () => {
  it('case 115: every user of the organization in id order, the docs/api.md §3.7 example first', async () => {
    const res = await list();
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(ok([O, A, M, U, V, G, B, H, D]));
    expect(JSON.stringify(res.json().members.slice(0, 2))).toBe(JSON.stringify([O, A]));
  });

  it('case 116: client_gravatar decides between null and the full Gravatar URL', async () => {
    expect((await list('?client_gravatar=true')).json().members.map((m: { avatar_url: unknown }) => m.avatar_url)).toEqual(
      Array(9).fill(null),
    );
    const urls = (await list('?client_gravatar=false')).json().members.map((m: { avatar_url: string }) => m.avatar_url);
    expect(urls).toHaveLength(9);
    for (const url of urls) expect(url).toMatch(/^https:\/\/secure\.gravatar\.com\/avatar\/[0-9a-f]{32}\?d=identicon&version=1$/);
    expect(urls[4]).toBe('https://secure.gravatar.com/avatar/19eb9884e5d9ee1df522e134f90f6cea?d=identicon&version=1');
  });

  it('case 117: include_custom_profile_fields adds profile_data to humans only', async () => {
    const res = await list('?include_custom_profile_fields=true');
    expect(res.body).toBe(
      ok([
        withProfile(O),
        withProfile(A),
        withProfile(M),
        withProfile(U),
        withProfile(V, V_PROFILE_DATA),
        withProfile(G),
        B,
        H,
        withProfile(D),
      ]),
    );
  });

  it('case 118: a restricted guest does not get the users it cannot access (feature level 437: no placeholders)', async () => {
    await ctx.ownDatabase();
    await restrict(ctx.db);
    const res = await list('', 'G');
    expect(res.body).toBe(ok([U, V, G, B, H]));
    const profiles = await list('?include_custom_profile_fields=true', 'G');
    expect(profiles.body).toBe(ok([withProfile(U), withProfile(V, V_PROFILE_DATA), withProfile(G), B, H]));
    // Non-guests of the same organization are not restricted.
    expect((await list('', 'U')).body).toBe(ok([O, A, M, U, V, G, B, H, D]));
  });

  it('user_ids (feature level 384): only those users, ascending, each once; deactivated users and bots included', async () => {
    await ctx.ownDatabase();
    expect((await list(`?user_ids=${encodeURIComponent('[18, 13, 16, 13]')}`)).body).toBe(ok([U, B, D]));
    expect((await list('?user_ids=[11]&include_custom_profile_fields=true&client_gravatar=true')).body).toBe(ok([withProfile(A)]));
    // An empty list is no user, not every user.
    expect((await list('?user_ids=[]')).body).toBe(ok([]));
    // Unknown ids, ids of another organization (30 is X's) and ids no user can have are left out.
    expect((await list(`?user_ids=${encodeURIComponent('[14, 30, 999, 0, -5, 2147483648, 1e300]')}`)).body).toBe(ok([V]));
    // A restricted guest gets only the requested users it can access.
    await restrict(ctx.db);
    expect((await list('?user_ids=[10,13,18]', 'G')).body).toBe(ok([U]));
    // user_ids is a known parameter: only the unknown one is reported.
    expect((await list('?user_ids=[17]&foo=1')).body).toBe(ok([H], { ignored_parameters_unsupported: ['foo'] }));
  });

  it('user_ids: bad values are 400s, after the parameters declared before it', async () => {
    for (const [query, msg] of [
      ['?user_ids=1,2', 'user_ids is not valid JSON'],
      ['?user_ids=', 'user_ids is not valid JSON'],
      ['?user_ids=13', 'user_ids is not a list'],
      ['?user_ids={"a":1}', 'user_ids is not a list'],
      ['?user_ids=[13,"14"]', 'user_ids[1] is not an integer'],
      ['?user_ids=[1.5]', 'user_ids[0] is not an integer'],
      ['?user_ids=[null]', 'user_ids[0] is not an integer'],
      ['?user_ids=[1]x&client_gravatar=1', 'client_gravatar is not a boolean'],
      // The length is checked before the items, as for every list parameter.
      [`?user_ids=[${Array(10_001).fill(13).join(',')}]`, 'user_ids is too long (limit: 10000 items)'],
    ] as const) {
      const res = await list(query.replace(/[[\]{}"]/g, encodeURIComponent));
      expect(res.statusCode, query).toBe(400);
      expect(res.body).toBe(errorBody(msg));
    }
  });

  it('a guest of an unrestricted organization sees everyone', async () => {
    const members = (await list('', 'G')).json().members as { full_name: string }[];
    expect(members.map((m) => m.full_name)).not.toContain('Unknown user');
  });

  it('case 119: unknown parameters are reported last', async () => {
    const res = await list('?foo=1&client=web');
    expect(res.body).toBe(ok([O, A, M, U, V, G, B, H, D], { ignored_parameters_unsupported: ['foo'] }));
  });

  it("boolean parameters are validated Zulip's way", async () => {
    for (const [query, msg] of [
      ['?client_gravatar=yes', 'client_gravatar is not valid JSON'],
      ['?client_gravatar=1', 'client_gravatar is not a boolean'],
      ['?include_custom_profile_fields=True', 'include_custom_profile_fields is not valid JSON'],
      ['?include_custom_profile_fields=null', 'include_custom_profile_fields is not a boolean'],
    ] as const) {
      const res = await list(query);
      expectError(res, msg);
    }
  });

  it('visibility and dates apply per member; other organizations list only their own users', async () => {
    await ctx.ownDatabase();
    await ctx.db.updateTable('users').set({ email_address_visibility: 4 }).where('id', '=', 14).execute();
    const members = (await list()).json().members;
    expect(members[4]).toMatchObject({ email: 'user14@chat.example.com', delivery_email: null });
    for (const member of members) expect(member.date_joined).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d\+00:00$/);
    const other = await api(ctx.app, { url: '/api/v1/users', as: 'X', host: 'other.chat.example.com' });
    expect(other.json().members.map((m: { user_id: number }) => m.user_id)).toEqual([30]);
  });

  it('a constant number of statements whatever the number of users and profile values', async () => {
    await ctx.ownDatabase();
    const count = async (as: FixtureUser) => {
      ctx.database.statements.length = 0;
      const res = await list('?include_custom_profile_fields=true', as);
      expect(res.statusCode).toBe(200);
      return { statements: ctx.database.statements.length, members: res.json().members.length };
    };
    expect(await count('U')).toEqual({ statements: 2, members: 9 });
    const extra = Array.from({ length: 60 }, (_, i) => ({
      id: 100 + i,
      realm_id: 1,
      delivery_email: `extra${i}@example.com`,
      full_name: `Extra ${i}`,
      api_key_hash: hashApiKey(`extra${String(i).padStart(3, '0')}`.padEnd(32, 'x')),
    }));
    await ctx.db.insertInto('users').values(extra).execute();
    await ctx.db
      .insertInto('custom_profile_field_values')
      .values(
        extra.flatMap((user) =>
          [1, 3, 4].map((field) => ({
            realm_id: 1,
            user_id: user.id,
            field_id: field,
            value: 'x',
            rendered_value: field === 1 ? '<p>x</p>' : null,
          })),
        ),
      )
      .execute();
    await ctx.db
      .insertInto('subscriptions')
      .values(extra.slice(0, 30).map((user) => ({ realm_id: 1, user_id: user.id, stream_id: 100 })))
      .execute();
    expect(await count('U')).toEqual({ statements: 2, members: 69 });
    await restrict(ctx.db);
    // The guest shares channel 100 with the first 30 extra users only.
    expect(await count('G')).toEqual({ statements: 2, members: 35 });
    const members = (await list('', 'G')).json().members as { user_id: number }[];
    expect(members.map((m) => m.user_id)).toEqual([13, 14, 15, 16, 17, ...extra.slice(0, 30).map((user) => user.id)]);
  });
});
