import type { Config } from '../../config.js';
import type { Database } from '../../db/database.js';
import type { StatementRunner } from '../../db/reusable-statement.js';
import type { AuthLookup } from '../../http/auth.js';
import { badRequest } from '../../http/errors.js';
import { fakeEmailDomain } from '../../lib/hosts.js';
import { JsonTextList, mapInSlices } from '../../lib/slices.js';
import { isStorableText } from '../../lib/text.js';
import { isIdInRange } from '../../zulip.js';
import { canAccessUser, canSeeDeliveryEmail, isRestrictedViewer, type UserViewer } from './users.access.js';
import { canBuildUsersInSql, selectRealmUsersJson, userJsonTexts } from './users.json.js';
import {
  findUserByDeliveryEmail,
  findUserById,
  realmUserRecord,
  selectRealmUsers,
  type UserLoadOptions,
  type JoinedUser,
  userByIdLookupQueries,
  userRecordFromJoinedRow,
} from './users.repository.js';
import { type ApiUser, buildUserObject, type UserObjectOptions, type UserRecord } from './users.serializers.js';

/** The lookups of GET /users/{user_id}, /users/{email} and /users (docs/api.md §3.5–§3.7). */

export type UserViewerInRealm = UserViewer & { realmId: number };

const DIGITS = /^[0-9]+$/;

const noSuchUser = () => badRequest('No such user');

/** A path's digit string as a user id, or undefined when outside PostgreSQL's integer range. */
export function parseUserId(digits: string): number | undefined {
  const value = Number(digits);
  return isIdInRange(value) ? value : undefined;
}

/** The id digits of a dummy address `user<id>@<fake domain>` (exact, case-sensitive), if it is one. */
export function dummyAddressDigits(value: string, fakeDomain: string): string | undefined {
  const domain = fakeDomain.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^user([0-9]+)@${domain}$`).exec(value)?.[1];
}

function loadOptions(viewer: UserViewerInRealm, options: UserObjectOptions): UserLoadOptions {
  return {
    withProfileData: options.includeCustomProfileFields,
    ...(isRestrictedViewer(viewer) && { sharedChannelsWithUserId: viewer.id }),
  };
}

async function findTarget(
  db: Database,
  shortStatements: StatementRunner,
  config: Config,
  viewer: UserViewerInRealm,
  pathValue: string,
  load: UserLoadOptions,
): Promise<UserRecord | undefined> {
  const idDigits = DIGITS.test(pathValue) ? pathValue : dummyAddressDigits(pathValue, fakeEmailDomain(viewer.realmSubdomain, config));
  if (idDigits !== undefined) {
    const userId = parseUserId(idDigits);
    return userId === undefined ? undefined : findUserById(shortStatements, viewer.realmId, userId, load);
  }
  if (!isStorableText(pathValue)) return undefined;
  // A hidden address behaves exactly like an unknown one (docs/api.md §3.6 step 2).
  const target = await findUserByDeliveryEmail(db, viewer.realmId, pathValue.trim(), load);
  return target && canSeeDeliveryEmail(viewer, target) ? target : undefined;
}

/** GET /users/{user_id}'s lookup, in the authentication statement (one round trip); id paths, unrestricted viewers only. */
export function userByIdAuthLookup(pathValue: string, withProfileData: boolean): AuthLookup<JoinedUser> | undefined {
  const userId = DIGITS.test(pathValue) ? parseUserId(pathValue) : undefined;
  if (userId === undefined) return undefined;
  return { query: withProfileData ? userByIdLookupQueries.withProfileData : userByIdLookupQueries.plain, argument: userId };
}

/**
 * One user by id digits, dummy address or delivery email, as the path segment names it.
 * `prefetched` is the result of userByIdAuthLookup for this path and options, when it ran.
 */
export async function getUserForViewer(
  db: Database,
  shortStatements: StatementRunner,
  config: Config,
  viewer: UserViewerInRealm,
  pathValue: string,
  options: UserObjectOptions,
  prefetched?: JoinedUser & { caller_realm_id: number },
): Promise<ApiUser> {
  // A restricted viewer also needs the shared-channel fact, which the lookup leaves out.
  const target =
    prefetched !== undefined && !isRestrictedViewer(viewer)
      ? userRecordFromJoinedRow(prefetched)
      : await findTarget(db, shortStatements, config, viewer, pathValue, loadOptions(viewer, options));
  if (!target) throw noSuchUser();
  if (!canAccessUser(viewer, target)) throw badRequest('Insufficient permission');
  return buildUserObject(viewer, target, options, config);
}

/** The users of the organization (or of `userIds`) the viewer can access; since feature level 437 without placeholders (docs/api.md §3.7). */
export async function listUsersForViewer(
  db: Database,
  config: Config,
  viewer: UserViewerInRealm,
  options: UserObjectOptions,
  userIds?: readonly number[],
): Promise<ApiUser[] | JsonTextList> {
  // An id outside PostgreSQL's integer range names no user; bound, it would fail the statement.
  const ids = userIds?.filter(isIdInRange);
  if (canBuildUsersInSql(viewer, config)) {
    // Every user is accessible to this viewer: their JSON built by PostgreSQL (users.json.ts).
    const rows = await selectRealmUsersJson(db, viewer, options, config, { userIds: ids }).execute();
    const { members = [] } = await userJsonTexts(rows, viewer, options, config, () => 'members');
    return new JsonTextList(members);
  }
  const rows = await selectRealmUsers(db, viewer.realmId, loadOptions(viewer, options), ids).execute();
  // In slices: a whole large organization's objects would hold the event loop (src/lib/slices.ts).
  return mapInSlices(rows, (row) => {
    const user = realmUserRecord(row);
    return canAccessUser(viewer, user) ? buildUserObject(viewer, user, options, config) : undefined;
  });
}

/**
 * The id of the user a path segment names, as GET /users/{user_id | email} resolves it (PATCH
 * /users/{email}, feature level 313); undefined when it names no user the viewer may know of.
 */
export async function resolveUserPath(
  db: Database,
  shortStatements: StatementRunner,
  config: Config,
  viewer: UserViewerInRealm,
  pathValue: string,
): Promise<number | undefined> {
  if (DIGITS.test(pathValue)) return parseUserId(pathValue);
  return (await findTarget(db, shortStatements, config, viewer, pathValue, { withProfileData: false }))?.id;
}
