import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { realmUserRecord, selectRealmUsers } from '../src/modules/users/users.repository.js';
import { canBuildUsersInSql, selectRealmUsersJson, userJsonTexts } from '../src/modules/users/users.json.js';
import { buildUserObject, type UserObjectConfig, type UserObjectOptions } from '../src/modules/users/users.serializers.js';
import { createTestContext, type TestContext } from './helpers/app.js';
import { ids } from './helpers/fixture.js';

/**
 * The user objects' JSON built by PostgreSQL (src/modules/users/users.json.ts) is exactly
 * JSON.stringify(buildUserObject(...)), for every viewer role, option and avatar configuration,
 * and whatever the stored text holds; the users SQL cannot build are built by buildUserObject.
 */

let ctx: TestContext;
beforeAll(async () => {
  ctx = await createTestContext();
  // Every byte JSON escapes (control characters, quotes, backslashes), U+2028, astral characters,
  // addresses with capitals (ASCII and not), dates at the edges of what SQL formats.
  const controls = Array.from({ length: 31 }, (_, i) => String.fromCharCode(i + 1)).join('');
  const names = [controls, 'Quote " back \\ slash /', 'Line\u2028sep\u2029 é ✓ 😀', '', '<script>&amp;'];
  const emails = ['UPPER.Case@Example.COM', 'ÉMILE@exämple.com', 'İstanbul@example.com', 'plain@example.com', 'a"b\\c@example.com'];
  const dates = [
    '2024-02-29T23:59:59.999Z',
    '1000-01-01T00:00:00Z',
    '0999-12-31T23:59:00Z',
    '9999-12-31T23:59:59Z',
    '1970-01-01T00:00:30Z',
  ];
  for (let i = 0; i < 40; i++) {
    await sql`
      INSERT INTO users (realm_id, delivery_email, full_name, date_joined, is_active, role, bot_type, bot_owner_id, timezone,
                         avatar_source, avatar_version, email_address_visibility, is_imported_stub, is_deleted, api_key_hash)
      VALUES (1, ${`${i}.${emails[i % emails.length]}`}, ${names[i % names.length]}, ${dates[i % dates.length]}::timestamptz, ${i % 7 !== 0 && i % 11 !== 0},
              ${[100, 200, 300, 400, 600][i % 5]}, ${i % 6 === 0 ? 1 + (i % 4) : null}, ${i % 12 === 0 ? ids.U : null},
              ${names[(i + 2) % names.length]}, ${i % 4 === 0 ? 'U' : 'G'}, ${1 + (i % 3)}, ${1 + (i % 5)}, ${i % 9 === 0}, ${i % 11 === 0},
              encode(sha256(convert_to(${`json-${i}`}, 'UTF8')), 'hex'))
    `.execute(ctx.db);
  }
  // Every field type; Markdown values with and without their HTML (those users are built in JavaScript).
  await sql`
    INSERT INTO custom_profile_field_values (realm_id, user_id, field_id, value, rendered_value)
    SELECT 1, u.id, f.id, ${`value ${names.join(' | ')}`} || u.id,
           CASE WHEN f.field_type IN (1, 2) AND u.id % 5 <> 0 THEN ${'<p>"html" \\ \u2028</p>'} END
    FROM users u CROSS JOIN custom_profile_fields f
    WHERE u.realm_id = 1 AND u.id > 1000 AND u.id % 2 = 0 AND f.realm_id = 1
  `.execute(ctx.db);
});
afterAll(() => ctx.close());

const viewers = [100, 200, 300, 400, 600].map((role) => ({
  id: ids.U,
  role,
  realmSubdomain: '',
  realmCanAccessAllUsersGroup: 'everyone',
  realmId: 1,
}));

const configs: UserObjectConfig[] = [];
beforeAll(() => {
  configs.push(
    ctx.config,
    { ...ctx.config, enableGravatar: false },
    { ...ctx.config, enableGravatar: false, defaultAvatarUri: 'https://cdn.example.com/a.png?size=80&"q"' },
    { ...ctx.config, avatarSalt: 'sälte ✓' },
  );
});

const optionSets: UserObjectOptions[] = [
  { clientGravatar: false, includeCustomProfileFields: false },
  { clientGravatar: true, includeCustomProfileFields: true },
  { clientGravatar: false, includeCustomProfileFields: true, omitIsActive: true },
];

describe('user objects built by PostgreSQL', () => {
  it('are exactly the bytes of buildUserObject, for every viewer, option and configuration', async () => {
    let checked = 0;
    let builtInSql = 0;
    for (const config of configs) {
      for (const viewer of viewers) {
        expect(canBuildUsersInSql(viewer, config)).toBe(true);
        for (const options of optionSets) {
          const expected = (await selectRealmUsers(ctx.db, 1, { withProfileData: options.includeCustomProfileFields }).execute()).map(
            (row) => ({ active: row.is_active, json: JSON.stringify(buildUserObject(viewer, realmUserRecord(row), options, config)) }),
          );
          const rows = await selectRealmUsersJson(ctx.db, viewer, options, config).execute();
          builtInSql += expected.length - rows.filter((row) => row.json === null).length;
          const { all = [] } = await userJsonTexts(rows, viewer, options, config, () => 'all');
          expect(all.join(',')).toBe(expected.map((user) => user.json).join(','));
          // register's lists: active and deactivated users apart, each ascending.
          const split = await selectRealmUsersJson(ctx.db, viewer, options, config, { split: true }).execute();
          const lists = await userJsonTexts(split, viewer, options, config, (row) => (row.active ? 'active' : 'nonActive'));
          expect(lists.active?.join(',')).toBe(
            expected
              .filter((user) => user.active)
              .map((user) => user.json)
              .join(','),
          );
          expect(lists.nonActive?.join(',')).toBe(
            expected
              .filter((user) => !user.active)
              .map((user) => user.json)
              .join(','),
          );
          checked += expected.length;
        }
      }
    }
    // Most users were built by SQL, not by the fallback.
    expect(builtInSql).toBeGreaterThan(checked / 2);
  });

  it('leave to JavaScript a Markdown value without HTML, a non-ASCII Gravatar address and a year before 1000', async () => {
    const viewer = viewers[0]!;
    const options = { clientGravatar: false, includeCustomProfileFields: true };
    const rows = await selectRealmUsersJson(ctx.db, viewer, options, ctx.config).execute();
    const fallbackIds = new Set(rows.filter((row) => row.json === null).map((row) => row.fallback!.id));
    const fallback = (await selectRealmUsers(ctx.db, 1, { withProfileData: true }).execute())
      .filter((row) => fallbackIds.has(row.id))
      .map((row) => realmUserRecord(row));
    expect(fallback).toHaveLength(fallbackIds.size);
    expect(fallback.some((user) => user.profileValues?.some((value) => value.renderedValue === null && value.fieldType <= 2))).toBe(true);
    expect(fallback.some((user) => /\P{ASCII}/u.test(user.deliveryEmail) && user.avatarSource === 'G')).toBe(true);
    expect(fallback.some((user) => user.dateJoined.getUTCFullYear() < 1000)).toBe(true);
    // And nothing else: a user with none of these is built by SQL.
    for (const user of fallback) {
      const unrendered = user.profileValues?.some((value) => value.renderedValue === null && value.fieldType <= 2) ?? false;
      const nonAscii = /\P{ASCII}/u.test(user.deliveryEmail) && user.avatarSource === 'G';
      expect(unrendered || nonAscii || user.dateJoined.getUTCFullYear() < 1000).toBe(true);
    }
  });

  it('are not used for a restricted guest, or a configuration a statement cannot carry', () => {
    expect(canBuildUsersInSql({ ...viewers[4]!, realmCanAccessAllUsersGroup: 'members' }, ctx.config)).toBe(false);
    expect(canBuildUsersInSql({ ...viewers[3]!, realmCanAccessAllUsersGroup: 'members' }, ctx.config)).toBe(true);
    expect(canBuildUsersInSql(viewers[0]!, { ...ctx.config, avatarSalt: 'a\0b' })).toBe(false);
  });
});
