import { sql } from 'kysely';
import { jsonArrayFrom } from 'kysely/helpers/postgres';
import { type Database, parseTimestamptz } from '../../db/database.js';
import { forEachInSlices } from '../../lib/slices.js';
import { isStorableText } from '../../lib/text.js';
import { isRestrictedViewer, type UserViewer } from './users.access.js';
import { realmUserRecord } from './users.repository.js';
import { buildUserObject, USER_COLUMNS, type UserObjectConfig, type UserObjectOptions, userJsonSql } from './users.serializers.js';

/**
 * A whole organization's user objects with their JSON text built by PostgreSQL: the
 * event loop then decodes one text column per 256 users instead of fifteen typed ones per user,
 * builds no objects and serializes nothing, which was most of the time a large organization's
 * GET /users and register held the loop that every other request of the instance shares.
 *
 * The text is exactly JSON.stringify(buildUserObject(...)): both come from one table
 * (users.serializers.ts, USER_FIELDS; PostgreSQL escapes strings as JSON.stringify does). What SQL
 * cannot reproduce exactly, it leaves to buildUserObject: a user whose statement gives no text (a
 * Markdown profile value stored without its HTML, which renderMarkdown renders; a Gravatar hash of a
 * non-ASCII address, which JavaScript lowercases by Unicode's rules; a date outside years 1000–9999)
 * comes with its columns instead, from the same statement (the same snapshot), and is built as
 * before. test/users-json.test.ts compares the two. Only for viewers who may access every user: a
 * restricted guest's list (docs/api.md §2.4) is built as before.
 */

/** Whether the SQL-built text can serve this viewer and configuration (else: buildUserObject). */
export function canBuildUsersInSql(viewer: UserViewer, config: UserObjectConfig): boolean {
  // A NUL cannot be a statement's parameter.
  return !isRestrictedViewer(viewer) && isStorableText(config.avatarSalt) && isStorableText(config.defaultAvatarUri);
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
  const json = sql<{ json: string | null }>`(SELECT ${userJsonSql(viewer, options, config)} AS json OFFSET 0)`.as('j');
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
          .select(['v.field_id as fieldId', 'f.field_type as fieldType', 'v.value', 'v.rendered_value as renderedValue'])
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
