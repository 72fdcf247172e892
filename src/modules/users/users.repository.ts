import { type Expression, type ExpressionBuilder, expressionBuilder, sql } from 'kysely';
import { jsonArrayFrom } from 'kysely/helpers/postgres';
import type { Database } from '../../db/database.js';
import { type AccountQuery, AuthLookupQuery } from '../../http/auth.repository.js';
import type { DB } from '../../db/types.js';
import { reusableStatement, type StatementRunner } from '../../db/reusable-statement.js';
import { USER_COLUMNS, type UserRecord, userRecordOf } from './users.serializers.js';

/** User lookups, each ONE statement: profile values and the guest-access fact are correlated subqueries. */

export interface UserLoadOptions {
  withProfileData: boolean;
  /** A restricted viewer (docs/api.md §2.4): also load whether each user shares an active subscription with them. */
  sharedChannelsWithUserId?: number;
}

// Without realm_id, which a lookup within one organization knows already.
const USER_COLUMNS_IN_REALM = USER_COLUMNS.filter((column) => column !== 'realm_id').map((column) => `users.${column}` as const);
const SELECTED_COLUMNS = [...USER_COLUMNS_IN_REALM, 'users.realm_id' as const];

/** The profile values of the row `users`, as ProfileFieldValue. */
export const PROFILE_VALUES = jsonArrayFrom(
  expressionBuilder<DB, never>()
    .selectFrom('custom_profile_field_values as v')
    .innerJoin('custom_profile_fields as f', 'f.id', 'v.field_id')
    .select(['v.field_id as fieldId', 'f.field_type as fieldType', 'v.value', 'v.rendered_value as renderedValue'])
    .where('v.user_id', '=', sql.ref<number>('users.id'))
    .where('v.realm_id', '=', sql.ref<number>('users.realm_id'))
    .orderBy('v.field_id'),
);

// Archived channels count too (docs/api.md §2.4 row 5), so the channel itself is not consulted.
const sharesActiveChannel = (eb: ExpressionBuilder<DB, 'users'>, viewerId: number) =>
  eb.exists(
    eb
      .selectFrom('subscriptions as mine')
      .innerJoin('subscriptions as theirs', 'theirs.stream_id', 'mine.stream_id')
      .select(eb.lit(1).as('one'))
      .where('mine.user_id', '=', viewerId)
      .where('mine.active', '=', true)
      .whereRef('mine.realm_id', '=', 'users.realm_id')
      .whereRef('theirs.user_id', '=', 'users.id')
      .where('theirs.active', '=', true),
  );

function selectUsers(db: Database, realmId: number, options: UserLoadOptions) {
  const viewerId = options.sharedChannelsWithUserId;
  return db
    .selectFrom('users')
    .select(SELECTED_COLUMNS)
    .$if(options.withProfileData, (qb) => qb.select(PROFILE_VALUES.as('profile_values')))
    .$if(viewerId !== undefined, (qb) => qb.select((eb) => sharesActiveChannel(eb, viewerId!).as('shares_channel')))
    .where('users.realm_id', '=', realmId);
}

type UserRow = Awaited<ReturnType<ReturnType<typeof selectUsers>['executeTakeFirstOrThrow']>>;

function toUserRecord(row: Omit<UserRow, 'realm_id'>, realmId: number): UserRecord {
  return userRecordOf(
    { ...row, realm_id: realmId },
    {
      ...(row.profile_values && { profileValues: row.profile_values }),
      ...(row.shares_channel !== undefined && { sharesActiveChannelWithViewer: row.shares_channel === true }),
    },
  );
}

interface UserByIdArgs extends Record<string, unknown> {
  realmId: number;
  userId: number;
  viewerId?: number;
}

const userByIdQuery = (withProfileData: boolean, restricted: boolean) =>
  reusableStatement<UserByIdArgs, UserRow>(restricted ? ['realmId', 'userId', 'viewerId'] : ['realmId', 'userId'], (db, args) =>
    selectUsers(db, args.realmId, { withProfileData, ...(restricted && { sharedChannelsWithUserId: args.viewerId! }) }).where(
      'users.id',
      '=',
      args.userId,
    ),
  );

// GET /users/{id}'s statements, one per shape of the load options (src/db/reusable-statement.ts).
export const userByIdStatements = {
  plain: userByIdQuery(false, false),
  withProfileData: userByIdQuery(true, false),
  restricted: userByIdQuery(false, true),
  restrictedWithProfileData: userByIdQuery(true, true),
};

export async function findUserById(
  statements: StatementRunner,
  realmId: number,
  userId: number,
  options: UserLoadOptions,
): Promise<UserRecord | undefined> {
  const restricted = options.sharedChannelsWithUserId !== undefined;
  const query = restricted
    ? options.withProfileData
      ? userByIdStatements.restrictedWithProfileData
      : userByIdStatements.restricted
    : options.withProfileData
      ? userByIdStatements.withProfileData
      : userByIdStatements.plain;
  const [row] = await query(statements, { realmId, userId, viewerId: options.sharedChannelsWithUserId });
  return row && toUserRecord(row, row.realm_id);
}

/**
 * Extends the authentication query (AuthLookup) with one user by id of the caller's organization,
 * under the table's own names (LATERAL with OFFSET 0: one index probe); no restricted-viewer fact.
 */
const joinUserById = (withProfileData: boolean) => (account: AccountQuery, userId: Expression<number>) =>
  account
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom('users')
          .select(USER_COLUMNS_IN_REALM)
          .$if(withProfileData, (qb) => qb.select(PROFILE_VALUES.as('profile_values')))
          .where('users.id', '=', userId)
          .whereRef('users.realm_id', '=', 'caller.realm_id')
          .offset(sql.lit(0))
          .as('users'),
      (join) => join.onTrue(),
    )
    .select(USER_COLUMNS_IN_REALM)
    .$if(withProfileData, (qb) => qb.select('users.profile_values'));

/** The columns joinUserById adds to the authentication row: the user's, null when it found none. */
export type JoinedUser = { [column in keyof Omit<UserRow, 'realm_id'>]: UserRow[column] | null };

/** GET /users/{user_id}'s lookups (userByIdAuthLookup), with and without the profile data. */
export const userByIdLookupQueries = {
  plain: new AuthLookupQuery<JoinedUser>('user-by-id', joinUserById(false)),
  withProfileData: new AuthLookupQuery<JoinedUser>('user-by-id-with-profile-data', joinUserById(true)),
};

/** The user of a joinUserById row, if the join found one (in the caller's organization). */
export function userRecordFromJoinedRow(row: JoinedUser & { caller_realm_id: number }): UserRecord | undefined {
  return row.id === null ? undefined : toUserRecord(row as Omit<UserRow, 'realm_id'>, row.caller_realm_id);
}

/** By delivery email, ignoring case (served by the users_realm_email_key index). */
export async function findUserByDeliveryEmail(
  db: Database,
  realmId: number,
  email: string,
  options: UserLoadOptions,
): Promise<UserRecord | undefined> {
  const row = await selectUsers(db, realmId, options)
    .where((eb) => eb(eb.fn('lower', ['users.delivery_email']), '=', eb.fn('lower', [eb.val(email)])))
    .executeTakeFirst();
  return row && toUserRecord(row, row.realm_id);
}

/** Every user of the organization (active, deactivated, bots), or those of `userIds`, ascending by id. */
export const selectRealmUsers = (db: Database, realmId: number, options: UserLoadOptions, userIds?: readonly number[]) =>
  selectUsers(db, realmId, options)
    .$if(userIds !== undefined, (qb) => qb.where((eb) => eb('users.id', '=', eb.fn.any(eb.val(userIds!)))))
    .orderBy('users.id');

/** The record of one of selectRealmUsers' rows. */
export const realmUserRecord = (row: UserRow): UserRecord => toUserRecord(row, row.realm_id);
