import { sql } from 'kysely';
import type { Database } from '../../db/database.js';
import type { AppDeps } from '../../deps.js';
import type { Caller } from '../../http/auth.js';
import type { Departure } from '../../lib/departure.js';
import { ApiError, badRequest } from '../../http/errors.js';
import { EMAIL_ADDRESS_VISIBILITY, ROLES } from '../../zulip.js';
import type { ChannelRow } from '../subscriptions/membership.repository.js';
import { findUserById } from '../users/users.repository.js';
import { type ApiUser, buildUserObject } from '../users/users.serializers.js';
import { REFUSALS } from './users.writes.js';
import {
  createUserWithEvents,
  deactivateUserWithEvents,
  type ManagementContext,
  ManagementRefusal,
  reactivateUserWithEvents,
} from './users-management.service.js';
import { checkFullName, isPasswordTooWeak, isValidEmail, normalizeEmail } from './users.validation.js';

/** GET /users/me, POST /users, DELETE /users/{id} and /users/me, reactivate (docs/management-api.md "Users"). */

export type UserAdminDeps = Pick<AppDeps, 'db' | 'shortStatements' | 'transactions' | 'config'>;

export const isAdmin = (role: number): boolean => role === ROLES.owner || role === ROLES.admin;

export const noSuchUser = (): ApiError => badRequest('No such user');
export const insufficientPermission = (): ApiError => badRequest('Insufficient permission');
export const adminRequired = (): ApiError => new ApiError(400, 'Must be an organization administrator', 'UNAUTHORIZED_PRINCIPAL');
export const ownerRequired = (): ApiError => new ApiError(400, 'Must be an organization owner', 'UNAUTHORIZED_PRINCIPAL');

export function contextOf(deps: UserAdminDeps, caller: Caller, departure: Departure | undefined): ManagementContext {
  return {
    db: deps.db,
    transactions: { run: deps.transactions, actingUserId: caller.id, ...(departure && { departure }) },
    realm: { id: caller.realmId, subdomain: caller.realmSubdomain, canAccessAllUsersGroup: caller.realmCanAccessAllUsersGroup },
    maxPendingEvents: deps.config.queueMaxPendingEvents,
    config: deps.config,
  };
}

/** GET /users/me: the caller's own user object, flat, with max_message_id (docs/management-api.md U.2). */
export async function getOwnUser(deps: UserAdminDeps, caller: Caller): Promise<ApiUser & { max_message_id: number }> {
  const own = await findUserById(deps.shortStatements, caller.realmId, caller.id, { withProfileData: true });
  if (!own) throw noSuchUser();
  // No messages are stored here: the highest message id of the caller's is always -1.
  return { ...buildUserObject(caller, own, { clientGravatar: false, includeCustomProfileFields: true }, deps.config), max_message_id: -1 };
}

/** POST /users' first check, before its parameters are read (Zulip's @require_realm_admin). */
export function requireRealmAdmin(caller: Caller): void {
  if (!isAdmin(caller.role)) throw adminRequired();
}

/** POST /users (docs/management-api.md U.3), after requireRealmAdmin and the parameters. */
export async function createUserByApi(
  deps: UserAdminDeps,
  caller: Caller,
  canCreateUsers: boolean,
  input: { email: string; password: string; full_name: string },
  departure?: Departure,
): Promise<number> {
  if (!canCreateUsers) throw badRequest('User not authorized to create users');
  const fullName = checkFullName(input.full_name);
  if (!isValidEmail(input.email)) throw badRequest('Bad name or username');
  try {
    const { userId } = await createUserWithEvents(contextOf(deps, caller, departure), {
      email: normalizeEmail(input.email),
      fullName,
      role: ROLES.member,
      timezone: '',
      emailAddressVisibility: EMAIL_ADDRESS_VISIBILITY.everyone,
      isImportedStub: false,
      canCreateUsers: false,
      passwordTooWeak: isPasswordTooWeak(input.password),
    });
    return userId;
  } catch (error) {
    throw apiErrorOfRefusal(error, 'delete-other');
  }
}

/** What the user-management checks read of a user, in one statement. */
export type ManagedUser = NonNullable<Awaited<ReturnType<typeof findManagedUser>>>;

/** A channel the target starts or stops seeing with a new role, and its active subscribers that are active users. */
export interface RoleChannel extends ChannelRow {
  subscribers: number[];
}

/**
 * The active channels the target sees with exactly one of its role and `newRole`, in id order (Zulip's
 * send_stream_events_for_role_update): not web-public, not subscribed to, public ones when only one
 * role is a guest's, private ones the target did not create when only one is an administrator's.
 */
const roleChannelsSql = (newRole: number) => sql<RoleChannel[]>`(SELECT coalesce(json_agg(json_build_object(
    'id', c.id, 'name', c.name, 'description', c.description, 'rendered_description', c.rendered_description,
    'invite_only', c.invite_only, 'is_web_public', c.is_web_public, 'history_public_to_subscribers', c.history_public_to_subscribers,
    'creator_id', c.creator_id, 'date_created', floor(extract(epoch FROM c.date_created))::bigint, 'deactivated', c.deactivated,
    'message_retention_days', c.message_retention_days,
    'subscribers', ARRAY(SELECT sub.user_id FROM subscriptions sub JOIN users u ON u.id = sub.user_id
      WHERE sub.stream_id = c.id AND sub.active AND u.is_active ORDER BY sub.user_id)) ORDER BY c.id), '[]')
  FROM streams c
  WHERE c.realm_id = t.realm_id AND NOT c.deactivated AND NOT c.is_web_public
    AND NOT EXISTS (SELECT 1 FROM subscriptions own WHERE own.stream_id = c.id AND own.user_id = t.id AND own.active)
    AND CASE WHEN c.invite_only THEN c.creator_id IS DISTINCT FROM t.id AND (t.role <= ${ROLES.admin}) <> (${newRole}::smallint <= ${ROLES.admin})
      ELSE (t.role = ${ROLES.guest}) <> (${newRole}::smallint = ${ROLES.guest}) END)`;

/** The target of a management request; with `newRole` (a role change), the channels it changes the sight of. */
export function findManagedUser(db: Database, realmId: number, userId: number, newRole?: number) {
  return db
    .selectFrom('users as t')
    .select(['t.id', 't.role', 't.is_active', 't.bot_type', 't.bot_owner_id', 't.full_name', 't.is_imported_stub'])
    .select([
      sql<boolean | null>`(SELECT o.is_active FROM users o WHERE o.id = t.bot_owner_id)`.as('owner_is_active'),
      sql<number>`(SELECT count(*) FROM users o WHERE o.realm_id = t.realm_id AND o.is_active AND o.role = ${ROLES.owner} AND o.bot_type IS NULL)::integer`.as(
        'active_human_owners',
      ),
      sql<number[]>`ARRAY(SELECT b.id FROM users b WHERE b.bot_owner_id = t.id AND b.is_active ORDER BY b.id)`.as('active_bot_ids'),
      (newRole === undefined ? sql<RoleChannel[]>`'[]'::json` : roleChannelsSql(newRole)).as('role_channels'),
    ])
    .where('t.id', '=', userId)
    .where('t.realm_id', '=', realmId)
    .executeTakeFirst();
}

/** Zulip's check_last_owner: an owner, human, and the only active human owner (deactivated targets included). */
export const isLastOwner = (user: ManagedUser): boolean =>
  user.role === ROLES.owner && user.bot_type === null && user.active_human_owners === 1;

type Operation = 'delete-other' | 'delete-me' | 'update';

/** The API's error for a refusal of the statement (the state changed since it was read, or a check only the statement makes). */
export function apiErrorOfRefusal(error: unknown, operation: Operation): unknown {
  if (!(error instanceof ManagementRefusal)) return error;
  switch (error.reason) {
    case REFUSALS.emailInUse:
      return badRequest('Email is already in use.');
    case REFUSALS.weakPassword:
      return badRequest('The password is too weak.');
    case REFUSALS.deactivated:
      return badRequest('User is deactivated');
    case REFUSALS.lastUser:
      return cannotDeactivateLast('user');
    case REFUSALS.lastOwner:
      if (operation === 'delete-me') return cannotDeactivateLast('organization owner');
      return badRequest(
        operation === 'update'
          ? 'The owner permission cannot be removed from the only organization owner.'
          : 'Cannot deactivate the only organization owner',
      );
    case REFUSALS.botNameTaken:
      return badRequest(
        `There is already an active bot named "${error.detail}" in this organization. ` +
          'To reactivate this bot, you must rename or deactivate the other one first.',
      );
    default:
      return error;
  }
}

const cannotDeactivateLast = (entity: 'user' | 'organization owner'): ApiError =>
  new ApiError(400, `Cannot deactivate the only ${entity}.`, 'CANNOT_DEACTIVATE_LAST_USER', { is_last_owner: entity !== 'user', entity });

/** DELETE /users/{user_id} (docs/management-api.md U.5) with actions.delete_profile or not. */
export async function deactivateUserByApi(
  deps: UserAdminDeps,
  caller: Caller,
  userId: number | undefined,
  deleteProfile: boolean,
  departure?: Departure,
): Promise<void> {
  const target = userId === undefined ? undefined : await findManagedUser(deps.db, caller.realmId, userId);
  if (!target || target.bot_type !== null) throw noSuchUser();
  if (!target.is_active) throw badRequest('User is deactivated');
  if (!isAdmin(caller.role)) throw insufficientPermission();
  if (target.role === ROLES.owner && caller.role !== ROLES.owner) throw ownerRequired();
  if (isLastOwner(target)) throw badRequest('Cannot deactivate the only organization owner');
  try {
    await deactivateUserWithEvents(
      contextOf(deps, caller, departure),
      { id: target.id, botType: null, activeBotIds: target.active_bot_ids },
      { self: false, keepLastOwner: true, deleteProfile },
    );
  } catch (error) {
    throw apiErrorOfRefusal(error, 'delete-other');
  }
}

/** DELETE /users/me (docs/management-api.md U.6): the checks are the statement's (the last user, then the last owner). */
export async function deactivateOwnUser(deps: UserAdminDeps, caller: Caller, departure?: Departure): Promise<void> {
  const own = await findManagedUser(deps.db, caller.realmId, caller.id);
  if (!own) throw noSuchUser();
  try {
    await deactivateUserWithEvents(
      contextOf(deps, caller, departure),
      { id: own.id, botType: own.bot_type, activeBotIds: own.active_bot_ids },
      { self: true, keepLastOwner: true },
    );
  } catch (error) {
    throw apiErrorOfRefusal(error, 'delete-me');
  }
}

/** POST /users/{user_id}/reactivate (docs/management-api.md U.7). An active human: success, nothing sent. */
export async function reactivateUserByApi(
  deps: UserAdminDeps,
  caller: Caller,
  userId: number | undefined,
  departure?: Departure,
): Promise<void> {
  const target = userId === undefined ? undefined : await findManagedUser(deps.db, caller.realmId, userId);
  if (!target) throw noSuchUser();
  const ownsBot = target.bot_type !== null && target.bot_owner_id === caller.id;
  if (!isAdmin(caller.role) && !ownsBot) throw insufficientPermission();
  // Guests may not create bots (can_create_bots_group and can_create_write_only_bots_group default to members).
  if (target.bot_type !== null && caller.role === ROLES.guest) throw insufficientPermission();
  // Zulip's do_reactivate_user: an imported stub (its mirror dummy) becomes a user by signing up.
  if (target.is_imported_stub) throw badRequest('Cannot activate a placeholder account; ask the user to sign up, instead.');
  const newOwner = target.bot_type !== null && target.owner_is_active === false ? caller.id : null;
  try {
    await reactivateUserWithEvents(contextOf(deps, caller, departure), { id: target.id, botType: target.bot_type }, newOwner);
  } catch (error) {
    throw apiErrorOfRefusal(error, 'delete-other');
  }
}
