import { sql } from 'kysely';
import { type Database, parseTimestamptz } from '../../db/database.js';
import { forEachInSlices } from '../../lib/slices.js';
import { isStorableText } from '../../lib/text.js';
import { isRestrictedViewer, type UserViewer } from './users.access.js';
import { PROFILE_VALUES, realmUserRecord } from './users.repository.js';
import { buildUserObject, USER_COLUMNS, type UserObjectConfig, type UserObjectOptions, userJsonSql } from './users.serializers.js';

/**
 * A whole organization's user objects as JSON text built by PostgreSQL, so a large GET /users or
 * register does not hold the event loop. The text is exactly JSON.stringify(buildUserObject(...))
 * (test/users-json.test.ts); a user SQL cannot build exactly comes with its columns instead.
 */

/** Whether the SQL-built text can serve this viewer and configuration (else: buildUserObject). */
export function canBuildUsersInSql(viewer: UserViewer, config: UserObjectConfig): boolean {
  // A NUL cannot be a statement's parameter.
  return !isRestrictedViewer(viewer) && isStorableText(config.avatarSalt) && isStorableText(config.defaultAvatarUri);
}

/** Users per row of selectRealmUsersJson: a few hundred kilobytes of text, not 21,000 rows. */
const USERS_PER_ROW = 256;

/**
 * The organization's users (or those of `userIds`) by id: each row the texts of up to USERS_PER_ROW
 * users, or one user's columns (fallback). `split`: active and deactivated users apart (`active`).
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
  if (options.includeCustomProfileFields) columns.push(sql.lit('profile_values'), PROFILE_VALUES);
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

type RealmUserJsonRow = Awaited<ReturnType<ReturnType<typeof selectRealmUsersJson>['execute']>>[number];

/** The rows' JSON texts (buildUserObject's for fallback users), a slice at a time, each in the list `listOf` names. */
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
