import type { Updateable } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { Database } from '../src/db/database.js';
import type { Users } from '../src/db/types.js';
import { renderMarkdown } from '../src/lib/markdown.js';
import { api, createTestContext, useSharedTestContext } from './helpers/app.js';
import { errorBody, expectError, success } from './helpers/envelope.js';
import { basicAuth, type FixtureUser, restrict } from './helpers/fixture.js';

/** GET /api/v1/users/{user_id} (docs/api.md §3.5, acceptance cases 8, 9 and docs/api.md §5.8). */

const V_GRAVATAR = 'https://secure.gravatar.com/avatar/19eb9884e5d9ee1df522e134f90f6cea?d=identicon&version=1';

/** The user object of the docs/api.md §3.5 example (V seen by U, default parameters). */
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
const V_PROFILE_DATA = {
  1: { value: '**Lead**', rendered_value: '<p><strong>Lead</strong></p>' },
  2: { value: 'line1\nline2 <b>x</b>', rendered_value: '<p>line1<br>\nline2 &lt;b&gt;x&lt;/b&gt;</p>' },
  3: { value: 'opt1' },
  4: { value: '2000-01-01' },
};

const ok = (user: object, extra: object = {}) => success({ user, ...extra });

/** Everything these endpoints could conceivably touch, to prove a failed request changed nothing. */
async function snapshot(db: Database) {
  return {
    users: await db.selectFrom('users').selectAll().orderBy('id').execute(),
    values: await db.selectFrom('custom_profile_field_values').selectAll().orderBy('user_id').orderBy('field_id').execute(),
    realms: await db.selectFrom('realms').selectAll().orderBy('id').execute(),
  };
}

const setV = (db: Database, values: Updateable<Users>) => db.updateTable('users').set(values).where('id', '=', 14).execute();

// Shared by the tests that only read; those that write take their own.
const ctx = useSharedTestContext();

const get = (url: string, as: FixtureUser = 'U') => api(ctx.app, { url, as });

/** A 400 with `msg` that changed nothing. */
async function expectRefused(url: string, msg: string, as: FixtureUser = 'U') {
  const before = await snapshot(ctx.db);
  expectError(await get(url, as), msg);
  expect(await snapshot(ctx.db)).toEqual(before);
}

describe('GET /api/v1/users/{user_id}', () => {
  it('case 93: /users/14 answers the docs/api.md §3.5 example exactly', async () => {
    const res = await get('/api/v1/users/14');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.body).toBe(ok(V_USER));
  });

  it('leading zeros name the same id; HEAD answers without a body', async () => {
    expect((await get('/api/v1/users/0014')).body).toBe(ok(V_USER));
    const head = await api(ctx.app, { method: 'HEAD', url: '/api/v1/users/14', as: 'U' });
    expect(head.statusCode).toBe(200);
    expect(head.body).toBe('');
  });

  it('case 8: unknown parameters are reported last, client never', async () => {
    const res = await get('/api/v1/users/14?foo=1&bar=2&foo=3&client=x');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(ok(V_USER, { ignored_parameters_unsupported: ['bar', 'foo'] }));
  });

  it('case 9: an unknown id is an error without ignored_parameters_unsupported', async () => {
    await expectRefused('/api/v1/users/999999?foo=1', 'No such user');
  });

  it('case 94: client_gravatar=false gives the full Gravatar URL', async () => {
    const res = await get('/api/v1/users/14?client_gravatar=false');
    expect(res.body).toBe(ok({ ...V_USER, avatar_url: V_GRAVATAR }));
  });

  it('case 95: a hidden address gives the dummy email, and avatar_url follows what the caller can see', async () => {
    await ctx.ownDatabase();
    await setV(ctx.db, { email_address_visibility: 3 });
    const hidden = { ...V_USER, email: 'user14@chat.example.com' };
    expect((await get('/api/v1/users/14')).body).toBe(ok({ ...hidden, delivery_email: null, avatar_url: V_GRAVATAR }));
    expect((await get('/api/v1/users/14', 'A')).body).toBe(ok({ ...hidden, avatar_url: null }));
    const full = await api(ctx.app, { url: '/api/v1/users/14?client_gravatar=false', as: 'A' });
    expect(full.body).toBe(ok({ ...hidden, avatar_url: V_GRAVATAR }));
  });

  it('case 96: an uploaded avatar has the salted path whatever client_gravatar says', async () => {
    await ctx.ownDatabase();
    await setV(ctx.db, { avatar_source: 'U' });
    const url = '/user_avatars/1/fd0d7ed260c31dfffddb45a43fe12ceeb335119b.png';
    for (const query of ['', '?client_gravatar=true', '?client_gravatar=false']) {
      expect((await get(`/api/v1/users/14${query}`)).json().user.avatar_url).toBe(url);
    }
    // The version is part of the hash, so a new upload gets a new path.
    await setV(ctx.db, { avatar_version: 2 });
    const next = (await get('/api/v1/users/14')).json().user;
    expect(next.avatar_version).toBe(2);
    expect(next.avatar_url).toMatch(/^\/user_avatars\/1\/[0-9a-f]{40}\.png$/);
    expect(next.avatar_url).not.toBe(url);
  });

  it('the Gravatar hash uses the lowercased address and the URL carries the version', async () => {
    await ctx.ownDatabase();
    await setV(ctx.db, { delivery_email: 'V@Example.COM', avatar_version: 3 });
    const user = (await get('/api/v1/users/14?client_gravatar=false')).json().user;
    expect(user.avatar_url).toBe(V_GRAVATAR.replace('version=1', 'version=3'));
    expect(user.delivery_email).toBe('V@Example.COM');
  });

  it('case 97: a bot carries bot keys, never profile_data, and its real address', async () => {
    const res = await get('/api/v1/users/16?include_custom_profile_fields=true');
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
    expect(res.body.endsWith('"avatar_url":null,"is_imported_stub":false,"bot_type":1,"bot_owner_id":13}}')).toBe(true);
  });

  it('a bot keeps its real address even if its stored visibility says otherwise; an ownerless bot has null', async () => {
    await ctx.ownDatabase();
    await ctx.db.updateTable('users').set({ email_address_visibility: 4, bot_owner_id: null }).where('id', '=', 16).execute();
    const user = (await get('/api/v1/users/16', 'G')).json().user;
    expect(user).toMatchObject({ email: 'b-bot@chat.example.com', delivery_email: 'b-bot@chat.example.com', bot_owner_id: null });
  });

  it('case 98: profile_data follows is_imported_stub, rendered_value only for types 1 and 2', async () => {
    const res = await get('/api/v1/users/14?include_custom_profile_fields=true');
    expect(res.body).toBe(ok({ ...V_USER, profile_data: V_PROFILE_DATA }));
    expect(res.body).toContain(
      '"is_imported_stub":false,"profile_data":{"1":{"value":"**Lead**","rendered_value":"<p><strong>Lead</strong></p>"},' +
        '"2":{"value":"line1\\nline2 <b>x</b>","rendered_value":"<p>line1<br>\\nline2 &lt;b&gt;x&lt;/b&gt;</p>"},' +
        '"3":{"value":"opt1"},"4":{"value":"2000-01-01"}}}}',
    );
  });

  it('case 99: a user without values gets {}; omitted or false means no profile_data key', async () => {
    const res = await get('/api/v1/users/13?include_custom_profile_fields=true');
    expect(res.json().user.profile_data).toEqual({});
    expect(res.body.endsWith('"is_imported_stub":false,"profile_data":{}}}')).toBe(true);
    for (const url of ['/api/v1/users/14', '/api/v1/users/14?include_custom_profile_fields=false']) {
      expect((await get(url)).body).toBe(ok(V_USER));
    }
  });

  it('case 100: unknown, zero, out-of-range and other-organization ids are No such user', async () => {
    for (const id of ['999999', '0', '30', '000', '2147483648', '99999999999999999999999999']) {
      await expectRefused(`/api/v1/users/${id}`, 'No such user');
    }
  });

  it('an id beyond the integer range never reaches PostgreSQL', async () => {
    ctx.database.statements.length = 0;
    const res = await get('/api/v1/users/2147483648');
    expect(res.statusCode).toBe(400);
    expect(ctx.database.statements).toHaveLength(1); // authentication only
  });

  it('case 101: a deactivated user is returned with is_active false', async () => {
    const res = await get('/api/v1/users/18');
    expect(res.statusCode).toBe(200);
    expect(res.json().user).toMatchObject({ user_id: 18, is_active: false, full_name: 'D Gone' });
  });

  it('case 102: a guest in a restricted organization sees only users sharing a channel, bots and itself', async () => {
    await ctx.ownDatabase();
    await restrict(ctx.db);
    await expectRefused('/api/v1/users/10', 'Insufficient permission', 'G');
    expect((await get('/api/v1/users/14', 'G')).json().user.user_id).toBe(14);
    expect((await get('/api/v1/users/16', 'G')).json().user.user_id).toBe(16);
    expect((await get('/api/v1/users/15', 'G')).json().user.user_id).toBe(15);
    await expectRefused('/api/v1/users/18', 'Insufficient permission', 'G');
    expect((await get('/api/v1/users/10')).statusCode).toBe(200);
    // Unknown ids stay unknown (checked before access).
    await expectRefused('/api/v1/users/999', 'No such user', 'G');
  });

  it('restricted access: archived channels count, inactive subscriptions do not', async () => {
    await ctx.ownDatabase();
    await restrict(ctx.db);
    // U and G share only P; U's Z subscription (archived) is the other candidate.
    await ctx.db.updateTable('subscriptions').set({ active: false }).where('user_id', '=', 13).where('stream_id', '=', 100).execute();
    await expectRefused('/api/v1/users/13', 'Insufficient permission', 'G');
    await ctx.db.insertInto('subscriptions').values({ realm_id: 1, user_id: 15, stream_id: 103 }).execute();
    expect((await get('/api/v1/users/13', 'G')).statusCode).toBe(200);
    await ctx.db.updateTable('subscriptions').set({ active: false }).where('user_id', '=', 15).where('stream_id', '=', 103).execute();
    await expectRefused('/api/v1/users/13', 'Insufficient permission', 'G');
  });

  it('case 103: boolean parameters are parsed as JSON with the exact messages', async () => {
    await expectRefused('/api/v1/users/14?client_gravatar=yes', 'client_gravatar is not valid JSON');
    await expectRefused('/api/v1/users/14?client_gravatar=1', 'client_gravatar is not a boolean');
    await expectRefused('/api/v1/users/14?include_custom_profile_fields=True', 'include_custom_profile_fields is not valid JSON');
    await expectRefused('/api/v1/users/14?include_custom_profile_fields=%22true%22', 'include_custom_profile_fields is not a boolean');
    await expectRefused('/api/v1/users/14?client_gravatar=', 'client_gravatar is not valid JSON');
    // Parameters are parsed before the lookup.
    await expectRefused('/api/v1/users/999999?client_gravatar=1', 'client_gravatar is not a boolean');
  });

  it('case 104: date_joined is UTC truncated to minutes', async () => {
    await ctx.ownDatabase();
    await ctx.db
      .updateTable('users')
      .set({ date_joined: new Date('2023-12-31T23:59:59.999Z') })
      .where('id', '=', 13)
      .execute();
    expect((await get('/api/v1/users/14')).json().user.date_joined).toBe('2024-01-02T03:04+00:00');
    const mine = (await get('/api/v1/users/13')).json().user.date_joined;
    expect(mine).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d\+00:00$/);
    expect(mine).toBe('2023-12-31T23:59+00:00');
  });

  it('case 105: the visibility cases of docs/api.md for target 14', async () => {
    await ctx.ownDatabase();
    const cases: [number, FixtureUser, string | null][] = [
      [4, 'A', null],
      [4, 'O', null],
      [4, 'V', 'v@example.com'],
      [3, 'A', 'v@example.com'],
      [3, 'M', null],
      [5, 'M', 'v@example.com'],
      [5, 'U', null],
      [2, 'U', 'v@example.com'],
      [2, 'G', null],
      [1, 'G', 'v@example.com'],
    ];
    for (const [visibility, caller, deliveryEmail] of cases) {
      await setV(ctx.db, { email_address_visibility: visibility });
      const user = (await get('/api/v1/users/14', caller)).json().user;
      expect({ visibility, caller, delivery: user.delivery_email, email: user.email }).toEqual({
        visibility,
        caller,
        delivery: deliveryEmail,
        email: visibility === 1 ? 'v@example.com' : 'user14@chat.example.com',
      });
    }
  });

  it('the full matrix: caller role × target visibility, for delivery_email, email and avatar_url', async () => {
    await ctx.ownDatabase();
    const visibleTo: Record<string, number[]> = {
      O: [1, 2, 3, 5],
      A: [1, 2, 3, 5],
      M: [1, 2, 5],
      U: [1, 2],
      G: [1],
      V: [1, 2, 3, 4, 5],
    };
    for (const visibility of [1, 2, 3, 4, 5]) {
      await setV(ctx.db, { email_address_visibility: visibility });
      for (const caller of ['O', 'A', 'M', 'U', 'G', 'V'] as const) {
        const user = (await get('/api/v1/users/14', caller)).json().user;
        const sees = visibleTo[caller]!.includes(visibility);
        expect({ visibility, caller, user }).toEqual({
          visibility,
          caller,
          user: {
            ...V_USER,
            email: visibility === 1 ? 'v@example.com' : 'user14@chat.example.com',
            delivery_email: sees ? 'v@example.com' : null,
            avatar_url: sees ? null : V_GRAVATAR,
          },
        });
      }
    }
  });

  it('case 106: a non-digit segment that is no address is No such user', async () => {
    await expectRefused('/api/v1/users/abc', 'No such user');
    await expectRefused('/api/v1/users/-1', 'No such user');
  });

  it('case 107: a deleted user ends with is_deleted; an import stub has no is_deleted key', async () => {
    await ctx.ownDatabase();
    await setV(ctx.db, { is_active: false, is_deleted: true });
    const deleted = await get('/api/v1/users/14');
    expect(deleted.body).toBe(ok({ ...V_USER, is_active: false, is_deleted: true }));
    expect(deleted.body.endsWith('"is_imported_stub":false,"is_deleted":true}}')).toBe(true);
    await setV(ctx.db, { is_active: true, is_deleted: false, is_imported_stub: true });
    const stub = await get('/api/v1/users/14?include_custom_profile_fields=true');
    expect(stub.body).toBe(ok({ ...V_USER, is_imported_stub: true, profile_data: V_PROFILE_DATA }));
  });

  it('roles: owner implies admin, moderator is neither, guest is flagged; timezone as stored', async () => {
    await ctx.ownDatabase();
    await ctx.db.updateTable('users').set({ timezone: 'Europe/Paris' }).where('id', '=', 10).execute();
    const flags = async (id: number) => {
      const { is_admin, is_owner, is_guest, role, timezone } = (await get(`/api/v1/users/${id}`)).json().user;
      return { is_admin, is_owner, is_guest, role, timezone };
    };
    expect(await flags(10)).toEqual({ is_admin: true, is_owner: true, is_guest: false, role: 100, timezone: 'Europe/Paris' });
    expect(await flags(11)).toEqual({ is_admin: true, is_owner: false, is_guest: false, role: 200, timezone: '' });
    expect(await flags(12)).toEqual({ is_admin: false, is_owner: false, is_guest: false, role: 300, timezone: '' });
    expect(await flags(15)).toEqual({ is_admin: false, is_owner: false, is_guest: true, role: 600, timezone: '' });
  });

  it('a constant number of statements whatever the number of profile values', async () => {
    await ctx.ownDatabase();
    const count = async () => {
      ctx.database.statements.length = 0;
      const res = await get('/api/v1/users/14?include_custom_profile_fields=true');
      expect(res.statusCode).toBe(200);
      return { statements: ctx.database.statements.length, fields: Object.keys(res.json().user.profile_data).length };
    };
    const small = await count();
    const extra = Array.from({ length: 36 }, (_, i) => ({ id: 5 + i, realm_id: 1, name: `Field ${5 + i}`, field_type: 1 + (i % 8) }));
    await ctx.db.insertInto('custom_profile_fields').values(extra).execute();
    await ctx.db
      .insertInto('custom_profile_field_values')
      .values(
        extra.map((field) => ({
          realm_id: 1,
          user_id: 14,
          field_id: field.id,
          value: `v${field.id}`,
          rendered_value: field.field_type <= 2 ? renderMarkdown(`v${field.id}`) : null,
        })),
      )
      .execute();
    const large = await count();
    // The lookup by id rides in the authentication statement: one round trip.
    expect(small).toEqual({ statements: 1, fields: 4 });
    expect(large).toEqual({ statements: 1, fields: 40 });
    // Lookups by address, and restricted guests (who need the shared-channel fact): a second one.
    ctx.database.statements.length = 0;
    expect((await get('/api/v1/users/user14@chat.example.com?include_custom_profile_fields=true')).statusCode).toBe(200);
    expect(ctx.database.statements).toHaveLength(2);
    await restrict(ctx.db);
    ctx.database.statements.length = 0;
    expect((await get('/api/v1/users/14?include_custom_profile_fields=true', 'G')).statusCode).toBe(200);
    expect(ctx.database.statements).toHaveLength(2);
  });

  it('the lookup folded into authentication is used only once the credentials are accepted', async () => {
    const wrongKey = await api(ctx.app, {
      url: '/api/v1/users/14',
      headers: { authorization: basicAuth('user13@chat.example.com', 'x'.repeat(32)) },
    });
    expect(wrongKey.statusCode).toBe(401);
    expect(wrongKey.json().msg).toBe('Invalid API key');
    // A bad include_custom_profile_fields skips the lookup; the credentials are still checked first.
    const both = await api(ctx.app, {
      url: '/api/v1/users/14?include_custom_profile_fields=maybe',
      headers: { authorization: basicAuth('user13@chat.example.com', 'x'.repeat(32)) },
    });
    expect(both.statusCode).toBe(401);
    const badParam = await get('/api/v1/users/14?include_custom_profile_fields=maybe');
    expect(badParam.statusCode).toBe(400);
    expect(badParam.json().msg).toBe('include_custom_profile_fields is not valid JSON');
  });

  it('rendered values never carry live HTML through the endpoint', async () => {
    await ctx.ownDatabase();
    const hostile = [
      '<script>alert(1)</script>',
      '<b onclick="x()">raw</b> <iframe src="https://evil.example"></iframe>',
      '[x](javascript:alert(1)) and <a href="javascript:alert(2)">y</a>',
      '<img src=x onerror=alert(1)> ![i](javascript:alert(3))',
      '<div style="background:url(javascript:alert(4))">d</div>\n\n<svg onload=alert(5)>',
    ];
    // One extra Markdown field (types 1 and 2 alternating) per hostile value, stored as admin tooling would.
    const fields = hostile.map((_, i) => ({ id: 50 + i, realm_id: 1, name: `Hostile ${i}`, field_type: 1 + (i % 2) }));
    await ctx.db.insertInto('custom_profile_fields').values(fields).execute();
    await ctx.db
      .insertInto('custom_profile_field_values')
      .values(
        hostile.map((value, i) => ({
          realm_id: 1,
          user_id: 14,
          field_id: 50 + i,
          value,
          rendered_value: renderMarkdown(value),
        })),
      )
      .execute();
    const data = (await get('/api/v1/users/14?include_custom_profile_fields=true')).json().user.profile_data;
    const rendered: string[] = hostile.map((value, i) => {
      expect(data[String(50 + i)].value).toBe(value);
      return data[String(50 + i)].rendered_value;
    });
    for (const html of rendered) {
      const tags = [...html.matchAll(/<\/?([a-zA-Z][a-zA-Z0-9]*)([^>]*)>/g)];
      for (const [, tag, attributes] of tags) {
        expect(['p', 'br', 'a', 'strong', 'em', 'code']).toContain(tag!.toLowerCase());
        expect(attributes).not.toMatch(/\bon\w+\s*=|style\s*=|javascript:/i);
      }
      expect(html).not.toMatch(/<(script|img|iframe|svg|div|b)\b/i);
      expect(html).not.toMatch(/href="(?!https?:|mailto:)/);
    }
    expect(rendered[0]).toBe('<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>');
  });

  it('Gravatar disabled: the default avatar URI with the version, even when the client could compute it', async () => {
    const off = await createTestContext({ env: { ENABLE_GRAVATAR: 'false' } });
    const withQuery = await createTestContext({ env: { ENABLE_GRAVATAR: 'false', DEFAULT_AVATAR_URI: '/avatar?size=big' } });
    try {
      const user = (await api(off.app, { url: '/api/v1/users/14', as: 'U' })).json().user;
      expect(user.avatar_url).toBe('/static/images/default-avatar.png?version=1');
      const other = (await api(withQuery.app, { url: '/api/v1/users/14?client_gravatar=false', as: 'U' })).json().user;
      expect(other.avatar_url).toBe('/avatar?size=big&version=1');
    } finally {
      await off.close();
      await withQuery.close();
    }
  });

  it('case 108: with EXTERNAL_HOST=localhost:9991 the dummy domain falls back to localhost', async () => {
    const local = await createTestContext({ env: { EXTERNAL_HOST: 'localhost:9991' } });
    try {
      await local.db.updateTable('users').set({ email_address_visibility: 3 }).where('id', '=', 14).execute();
      const res = await api(local.app, { url: '/api/v1/users/14', as: 'U', host: 'localhost:9991' });
      expect(res.statusCode).toBe(200);
      expect(res.json().user).toMatchObject({ email: 'user14@localhost', delivery_email: null });
    } finally {
      await local.close();
    }
  });

  it('an organization on a subdomain uses its own host for dummy addresses and sees only its users', async () => {
    await ctx.ownDatabase();
    await ctx.db.updateTable('users').set({ email_address_visibility: 2 }).where('id', '=', 30).execute();
    const res = await api(ctx.app, { url: '/api/v1/users/30', as: 'X', host: 'other.chat.example.com' });
    expect(res.json().user).toMatchObject({ email: 'user30@other.chat.example.com', delivery_email: 'x@example.com' });
    const foreign = await api(ctx.app, { url: '/api/v1/users/14', as: 'X', host: 'other.chat.example.com' });
    expect(foreign.body).toBe(errorBody('No such user'));
  });
});
