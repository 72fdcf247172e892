import { type RawBuilder, sql } from 'kysely';
import pg from 'pg';
import { jsonArrayFrom } from 'kysely/helpers/postgres';
import type { Database } from '../../db/database.js';
import { fakeEmailDomain } from '../../lib/hosts.js';
import { forEachInSlices } from '../../lib/slices.js';
import { isStorableText } from '../../lib/text.js';
import { EMAIL_ADDRESS_VISIBILITY, MARKDOWN_PROFILE_FIELD_TYPES, ROLES } from '../../zulip.js';
import { allowedVisibilities, isRestrictedViewer, type UserViewer } from './users.access.js';
import { realmUserRecord } from './users.repository.js';
import { buildUserObject, type UserObjectConfig, type UserObjectOptions } from './users.serializers.js';

/**
 * A whole organization's user objects with their JSON text built by PostgreSQL (issue 31): the
 * event loop then decodes one text column per 256 users instead of fifteen typed ones per user,
 * builds no objects and serializes nothing, which was most of the time a large organization's
 * GET /users and register held the loop that every other request of the instance shares.
 *
 * The text is exactly JSON.stringify(buildUserObject(...)) (users.serializers.ts: the same keys in
 * the same order; PostgreSQL escapes strings as JSON.stringify does). What SQL cannot reproduce
 * exactly, it leaves to buildUserObject: a user whose statement gives no text (a Markdown profile
 * value stored without its HTML, which renderMarkdown renders; a Gravatar hash of a non-ASCII
 * address, which JavaScript lowercases by Unicode's rules; a date outside years 1000–9999) comes
 * with its columns instead, from the same statement (the same snapshot), and is built as before.
 * Any change to buildUserObject must be made here too: test/users-json.test.ts compares the two.
 * Only for viewers who may access every user: a restricted guest's list (docs/api.md §2.4) is built as
 * before.
 */

/** Whether the SQL-built text can serve this viewer and configuration (else: buildUserObject). */
export function canBuildUsersInSql(viewer: UserViewer, config: UserObjectConfig): boolean {
  // A NUL cannot be a statement's parameter.
  return !isRestrictedViewer(viewer) && isStorableText(config.avatarSalt) && isStorableText(config.defaultAvatarUri);
}

const USER_COLUMNS = [
  'id',
  'realm_id',
  'delivery_email',
  'full_name',
  'date_joined',
  'is_active',
  'role',
  'bot_type',
  'bot_owner_id',
  'timezone',
  'avatar_source',
  'avatar_version',
  'email_address_visibility',
  'is_imported_stub',
  'is_deleted',
] as const;

const text = (value: string) => sql`${value}::text`;
const bool = (value: boolean) => sql`${value}::boolean`;

function userJsonExpression(viewer: UserViewer, options: UserObjectOptions, config: UserObjectConfig): RawBuilder<string | null> {
  const isBot = sql`users.bot_type IS NOT NULL`;
  const publicAddress = sql`(${isBot} OR users.email_address_visibility = ${sql.lit(EMAIL_ADDRESS_VISIBILITY.everyone)})`;
  const effectiveVisibility = sql`CASE WHEN ${isBot} THEN ${sql.lit(EMAIL_ADDRESS_VISIBILITY.everyone)} ELSE users.email_address_visibility END`;
  const emailVisible = sql`(users.id = ${viewer.id}::integer OR ${effectiveVisibility} = ANY(${[...allowedVisibilities(viewer)]}::smallint[]))`;
  const separator = config.defaultAvatarUri.includes('?') ? '&' : '?';
  // avatarUrl (users.serializers.ts), row by row.
  const avatarUrl = sql`CASE
    WHEN ${bool(options.clientGravatar && config.enableGravatar)} AND ${emailVisible} AND users.avatar_source = 'G' THEN 'null'
    WHEN users.avatar_source = 'U' THEN '"/user_avatars/' || users.realm_id || '/'
      || left(encode(sha256(convert_to(users.id || ':' || users.avatar_version || ':' || ${text(config.avatarSalt)}, 'UTF8')), 'hex'), 40) || '.png"'
    WHEN ${bool(config.enableGravatar)} THEN CASE WHEN octet_length(users.delivery_email) = length(users.delivery_email)
      THEN '"https://secure.gravatar.com/avatar/' || md5(lower(users.delivery_email COLLATE "C"))
        || '?d=identicon&version=' || users.avatar_version || '"' END
    ELSE to_json(${text(`${config.defaultAvatarUri}${separator}version=`)} || users.avatar_version)::text
  END`;
  const markdownTypes = [...MARKDOWN_PROFILE_FIELD_TYPES];
  // buildProfileData: keys ascending, as JavaScript orders integer keys. A Markdown value without
  // its HTML gives null (the user is built by buildUserObject, which renders it).
  const profileData = sql`(SELECT CASE
      WHEN count(*) = 0 THEN '{}'
      WHEN bool_or(f.field_type = ANY(${markdownTypes}::smallint[]) AND v.rendered_value IS NULL) THEN NULL
      ELSE '{' || string_agg('"' || v.field_id || '":{"value":' || to_json(v.value)::text
        || CASE WHEN f.field_type = ANY(${markdownTypes}::smallint[]) THEN ',"rendered_value":' || to_json(v.rendered_value)::text ELSE '' END
        || '}', ',' ORDER BY v.field_id) || '}'
    END
    FROM custom_profile_field_values v JOIN custom_profile_fields f ON f.id = v.field_id
    WHERE v.user_id = users.id AND v.realm_id = users.realm_id)`;
  const fakeDomain = fakeEmailDomain(viewer.realmSubdomain, config);
  // is_admin, is_owner, is_guest and role: one constant per role (fewer concatenations per row).
  const roleFields = sql`CASE users.role ${sql.join(
    Object.values(ROLES).map((role) => {
      const fields = `,"is_admin":${role === ROLES.owner || role === ROLES.admin},"is_owner":${role === ROLES.owner},"is_guest":${role === ROLES.guest},"role":${role}`;
      return sql`WHEN ${sql.lit(role)} THEN ${sql.lit(fields)}`;
    }),
    sql` `,
  )} END`;
  // Any NULL makes the whole text NULL: that user is built by buildUserObject.
  return sql<
    string | null
  >`'{"email":' || to_json(CASE WHEN ${publicAddress} THEN users.delivery_email ELSE 'user' || users.id || '@' || ${text(fakeDomain)} END)::text
    || ',"user_id":' || users.id
    || ',"avatar_version":' || users.avatar_version
    || ${roleFields}
    || CASE WHEN ${isBot} THEN ',"is_bot":true' ELSE ',"is_bot":false' END
    || ',"full_name":' || to_json(users.full_name)::text
    || ',"timezone":' || to_json(users.timezone)::text
    || ${options.omitIsActive ? sql`''` : sql`',"is_active":' || users.is_active::text`}
    || ',"date_joined":' || CASE WHEN users.date_joined >= '0001-01-01T00:00:00Z' AND users.date_joined < '10000-01-01T00:00:00Z'
      THEN '"' || to_char(users.date_joined AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI') || '+00:00"' END
    || ',"delivery_email":' || CASE WHEN ${emailVisible} THEN to_json(users.delivery_email)::text ELSE 'null' END
    || ',"avatar_url":' || ${avatarUrl}
    || ',"is_imported_stub":' || users.is_imported_stub::text
    || CASE WHEN users.is_deleted THEN ',"is_deleted":true' ELSE '' END
    || CASE WHEN ${isBot} THEN ',"bot_type":' || users.bot_type || ',"bot_owner_id":' || coalesce(users.bot_owner_id::text, 'null')
      ${options.includeCustomProfileFields ? sql`ELSE ',"profile_data":' || ${profileData}` : sql`ELSE ''`} END
    || '}'`;
}

/** Users per row of selectRealmUsersJson: a few hundred kilobytes of text, not 21,000 rows. */
const USERS_PER_ROW = 256;

/**
 * Every user of the viewer's organization (only those of `userIds` when given), ascending by id,
 * USERS_PER_ROW at a time: each row the comma-separated JSON texts of consecutive users, or
 * (json null) one user that buildUserObject builds, with its columns as JSON (fallback). With
 * `split`, active and deactivated users are listed apart (`active`), each list ascending by id.
 */
export function selectRealmUsersJson(
  db: Database,
  viewer: UserViewer & { realmId: number },
  options: UserObjectOptions,
  config: UserObjectConfig,
  { userIds, split = false }: { userIds?: readonly number[]; split?: boolean } = {},
) {
  // OFFSET 0 keeps the planner from copying the expression into the fallback column.
  const json = sql<{ json: string | null }>`(SELECT ${userJsonExpression(viewer, options, config)} AS json OFFSET 0)`.as('j');
  const columns = USER_COLUMNS.flatMap((column) => [
    sql.lit(column),
    column === 'date_joined' ? sql`users.date_joined::text` : sql.ref(`users.${column}`),
  ]);
  if (options.includeCustomProfileFields) {
    columns.push(
      sql.lit('profile_values'),
      jsonArrayFrom(
        db
          .selectFrom('custom_profile_field_values as v')
          .innerJoin('custom_profile_fields as f', 'f.id', 'v.field_id')
          .select(['v.field_id', 'f.field_type', 'v.value', 'v.rendered_value'])
          .where('v.user_id', '=', sql.ref<number>('users.id'))
          .where('v.realm_id', '=', sql.ref<number>('users.realm_id'))
          .orderBy('v.field_id'),
      ),
    );
  }
  const list = split ? sql<boolean>`users.is_active` : sql<boolean>`true`;
  const users = db
    .selectFrom('users')
    .innerJoinLateral(json, (join) => join.onTrue())
    .select([
      'users.id',
      'j.json',
      list.as('active'),
      sql<FallbackColumns | null>`CASE WHEN j.json IS NULL THEN json_build_object(${sql.join(columns)}) END`.as('fallback'),
      // A row ends every USERS_PER_ROW users of a list, and around each fallback user.
      sql<number>`(row_number() OVER (PARTITION BY ${list} ORDER BY users.id) - 1) / ${sql.lit(USERS_PER_ROW)}`.as('part'),
      sql<number>`sum((j.json IS NULL)::integer) OVER (PARTITION BY ${list} ORDER BY users.id)`.as('fallbacks_before'),
    ])
    .where('users.realm_id', '=', viewer.realmId)
    .$if(userIds !== undefined, (qb) => qb.where((eb) => eb('users.id', '=', eb.fn.any(eb.val(userIds!)))));
  return db
    .selectFrom(users.as('u'))
    .select([
      'u.active',
      sql<string | null>`string_agg(u.json, ',' ORDER BY u.id)`.as('json'),
      sql<FallbackColumns | null>`(array_agg(u.fallback) FILTER (WHERE u.fallback IS NOT NULL))[1]`.as('fallback'),
    ])
    .groupBy(['u.active', 'u.part', 'u.fallbacks_before', sql`CASE WHEN u.json IS NULL THEN u.id END`])
    .orderBy(sql`min(u.id)`);
}

/** A fallback user's columns, as selectRealmUsers reads them but for date_joined (text). */
type FallbackColumns = Omit<RealmUserRow, 'date_joined'> & { date_joined: string };

/** One row of selectRealmUsersJson. */
export interface RealmUserJsonRow {
  json: string | null;
  fallback: FallbackColumns | null;
  active: boolean;
}

/** node-postgres's own parser of timestamptz text: the Date selectRealmUsers' rows carry. */
const parseTimestamptz = pg.types.getTypeParser(pg.types.builtins.TIMESTAMPTZ) as (text: string) => Date;

/**
 * The JSON texts of the rows (buildUserObject's for the fallback users), a slice at a time, each
 * in the list `listOf` names (register puts active and deactivated users apart). One text may
 * hold several users, comma-separated, as JsonTextList takes them.
 */
export async function userJsonTexts<Name extends string>(
  rows: readonly RealmUserJsonRow[],
  viewer: UserViewer,
  options: UserObjectOptions,
  config: UserObjectConfig,
  listOf: (row: RealmUserJsonRow) => Name,
): Promise<Partial<Record<Name, string[]>>> {
  const lists: Partial<Record<Name, string[]>> = {};
  await forEachInSlices(rows, (row) => {
    let json = row.json;
    if (json === null) {
      const columns = row.fallback!;
      const record = realmUserRecord({ ...columns, date_joined: parseTimestamptz(columns.date_joined) });
      json = JSON.stringify(buildUserObject(viewer, record, options, config));
    }
    (lists[listOf(row)] ??= []).push(json);
  });
  return lists;
}

type RealmUserRow = Parameters<typeof realmUserRecord>[0];
