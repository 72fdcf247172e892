import { sql } from 'kysely';
import type { ApiEvent } from '../event-log/event-log.repository.js';
import type { Caller } from '../../http/auth.js';
import type { Departure } from '../../lib/departure.js';
import { badRequest } from '../../http/errors.js';
import { renderMarkdown } from '../../lib/markdown.js';
import { isStorableInJson } from '../../lib/text.js';
import { isIdInRange, MARKDOWN_PROFILE_FIELD_TYPES, PROFILE_FIELD_TYPES, ROLES } from '../../zulip.js';
import { type AudienceEvent, EVERY_ROLE } from '../event-log/audiences.js';
import { streamDeletion, streamObject } from '../subscriptions/membership.events.js';
import {
  adminRequired,
  apiErrorOfRefusal,
  contextOf,
  findManagedUser,
  insufficientPermission,
  isAdmin,
  isLastOwner,
  noSuchUser,
  ownerRequired,
  type ManagedUser,
  type RoleChannel,
  type UserAdminDeps,
} from './users-admin.service.js';
import { type ManagedRealm, updateUserWithEvents, userUpdateEvent } from './users-management.service.js';
import { checkFullName } from './users.validation.js';
import { UPDATE_USER } from './users.writes.js';

/** PATCH /users/{user_id | email} (docs/management-api.md "Users"; Zulip's update_user_backend). */

/** One entry of profile_data as decoded: a value to store, or null to remove it. */
export interface ProfileDataEntry {
  id: number;
  value: string | number[] | null;
}

export interface UserChanges {
  full_name: string | undefined;
  role: number | undefined;
  profile_data: ProfileDataEntry[] | undefined;
  new_email: string | undefined;
}

type ProfileField = Awaited<ReturnType<typeof profileFields>>[number];

const SHORT_TEXT_LIMIT = 50;
const LONG_TEXT_LIMIT = 500;

/** A user a user-list value names: what Zulip's check_valid_user_ids checks of it. */
interface NamedUser {
  id: number;
  is_active: boolean;
  is_bot: boolean;
}

/**
 * Zulip's check_valid_user_ids (allow_deactivated false): a list (else `User IDs is not a list`,
 * its variable name, not the field's), of users of the organization (else every other id, in
 * order, in one message), none deactivated or a bot (the first such user by id).
 */
function checkUserIds(value: string | number[], named: readonly NamedUser[]): number[] {
  if (!Array.isArray(value)) throw badRequest('User IDs is not a list');
  const byId = new Map(named.map((user) => [user.id, user]));
  const invalid = value.filter((id) => !byId.has(id));
  if (invalid.length > 0) throw badRequest(`Invalid user IDs: ${invalid.join(', ')}`);
  for (const user of [...new Set(value)].map((id) => byId.get(id)!).sort((a, b) => a.id - b.id)) {
    if (!user.is_active) throw badRequest(`User with ID ${user.id} is deactivated`);
    if (user.is_bot) throw badRequest(`User with ID ${user.id} is a bot`);
  }
  return value;
}

/** Zulip's validate_user_custom_profile_field: the stored text of a value, or its error. */
function storedProfileValue(field: ProfileField, value: string | number[]): string {
  const { name } = field;
  if (field.field_type === PROFILE_FIELD_TYPES.user) return JSON.stringify(checkUserIds(value, field.named_users));
  if (typeof value !== 'string') throw badRequest(`${name} is not a string`);
  if (value.includes('\0')) throw badRequest(`${name} cannot contain NUL characters`);
  if (!isStorableInJson(value)) throw badRequest(`Invalid characters in ${name}`);
  switch (field.field_type) {
    case PROFILE_FIELD_TYPES.long_text:
      if ([...value].length > LONG_TEXT_LIMIT) throw badRequest(`${name} is too long (limit: ${LONG_TEXT_LIMIT} characters)`);
      return value;
    case PROFILE_FIELD_TYPES.select: {
      let choices: Record<string, unknown> = {};
      try {
        choices = JSON.parse(field.field_data) as Record<string, unknown>;
      } catch {
        // No choices: every value is refused.
      }
      if (!Object.hasOwn(choices, value)) throw badRequest(`'${value}' is not a valid choice for '${name}'.`);
      return value;
    }
    case PROFILE_FIELD_TYPES.date:
      if (!/^\d{4}-\d{2}-\d{2}$/.test(value) || Number.isNaN(Date.parse(`${value}T00:00:00Z`))) throw badRequest(`${name} is not a date`);
      return value;
    case PROFILE_FIELD_TYPES.url:
      if (!/^https?:\/\/[^\s/]+\.[^\s]*$/i.test(value)) throw badRequest(`${name} is not a URL`);
      return value;
    default:
      if ([...value].length > SHORT_TEXT_LIMIT) throw badRequest(`${name} is too long (limit: ${SHORT_TEXT_LIMIT} characters)`);
      return value;
  }
}

const isEmptyValue = (value: ProfileDataEntry['value']): boolean =>
  value === null || value === '' || (Array.isArray(value) && value.length === 0);

/** PATCH /users/{user_id}: Zulip's checks in order, then one statement with the changes and their events. */
export async function updateUserByApi(
  deps: UserAdminDeps,
  caller: Caller,
  userId: number | undefined,
  changes: UserChanges,
  departure?: Departure,
): Promise<void> {
  const [target, fields] = await Promise.all([
    userId === undefined ? undefined : findManagedUser(deps.db, caller.realmId, userId, changes.role),
    changes.profile_data === undefined ? [] : profileFields(deps, caller.realmId, userId ?? 0, namedUserIds(changes.profile_data)),
  ]);
  if (!target) throw noSuchUser();
  if (!isAdmin(caller.role) && !(target.bot_type !== null && target.bot_owner_id === caller.id)) throw insufficientPermission();
  // No one holds Zulip's can_change_user_emails permission here.
  if (changes.new_email !== undefined) throw badRequest('User not authorized to change user emails');
  const context = contextOf(deps, caller, departure);
  const subject = { id: target.id, botType: target.bot_type };
  const profileEvent = (field: object) => userUpdateEvent(context.realm, subject, { custom_profile_field: field });
  const events: AudienceEvent[] = [];
  let role: number | null = null;
  if (changes.role !== undefined && changes.role !== target.role) {
    if ((changes.role === ROLES.owner || target.role === ROLES.owner) && caller.role !== ROLES.owner) throw ownerRequired();
    if (!isAdmin(caller.role)) throw adminRequired();
    if (target.role === ROLES.owner && isLastOwner(target))
      throw badRequest('The owner permission cannot be removed from the only organization owner.');
    role = changes.role;
    events.push(...roleChangeEvents(context.realm, target, role));
  }
  let fullName: string | null = null;
  if (changes.full_name !== undefined && changes.full_name !== target.full_name && changes.full_name.trim() !== '') {
    fullName = checkFullName(changes.full_name);
    if (fullName !== target.full_name) events.push(userUpdateEvent(context.realm, subject, { full_name: fullName }));
  }
  const stored: { id: number; value: string; rendered_value: string | null }[] = [];
  const removed: number[] = [];
  // Zulip removes the emptied values first, one by one, then checks the others.
  const entries = changes.profile_data ?? [];
  const fieldOf = (entry: ProfileDataEntry) => {
    const field = fields.find((candidate) => candidate.id === entry.id);
    if (!field) throw badRequest(`Field id ${entry.id} not found.`);
    return field;
  };
  for (const entry of entries.filter((candidate) => isEmptyValue(candidate.value))) {
    const field = fieldOf(entry);
    removed.push(field.id);
    if (field.current !== null) events.push(profileEvent({ id: field.id, value: null }));
  }
  for (const entry of entries.filter((candidate) => !isEmptyValue(candidate.value))) {
    const field = fieldOf(entry);
    const value = storedProfileValue(field, entry.value!);
    const rendered = MARKDOWN_PROFILE_FIELD_TYPES.has(field.field_type) ? renderMarkdown(value) : null;
    stored.push({ id: field.id, value, rendered_value: rendered });
    if (field.current !== value) events.push(profileEvent({ id: field.id, value, ...(rendered ? { rendered_value: rendered } : {}) }));
  }
  if (role === null && fullName === null && stored.length === 0 && removed.length === 0) return;
  try {
    await updateUserWithEvents(context, UPDATE_USER, [target.id, fullName, role, JSON.stringify(stored), removed], events);
  } catch (error) {
    throw apiErrorOfRefusal(error, 'update');
  }
}

/** A role change's events (PATCH /users/{user} and the admin command line's `user set-role`): realm_user/update, then the channels' sight. */
export function roleChangeEvents(realm: ManagedRealm, target: ManagedUser, role: number): AudienceEvent[] {
  return [userUpdateEvent(realm, { id: target.id, botType: target.bot_type }, { role }), ...roleChannelEvents(target, role)];
}

/**
 * The target's own events of a role change (Zulip's send_stream_events_for_role_update): stream/create
 * of the channels it now sees, a peer_add each (private ones first), then stream/delete of the others.
 */
function roleChannelEvents(target: ManagedUser, role: number): AudienceEvent[] {
  // Each channel read is seen with exactly one of the two roles (findManagedUser).
  const seenNow = (channel: RoleChannel) => (channel.invite_only ? role <= ROLES.admin : role !== ROLES.guest);
  const gained = target.role_channels.filter(seenNow);
  const lost = target.role_channels.filter((channel) => !seenNow(channel));
  const peerOrder = [...gained.filter((channel) => channel.invite_only), ...gained.filter((channel) => !channel.invite_only)];
  const toTarget = (event: ApiEvent): AudienceEvent => ({ event, ...EVERY_ROLE, guests: 'all', users: [target.id] });
  return [
    ...(gained.length > 0 ? [toTarget({ type: 'stream', op: 'create', streams: gained.map(streamObject) })] : []),
    ...peerOrder.map((channel) =>
      toTarget({ type: 'subscription', op: 'peer_add', stream_ids: [channel.id], user_ids: channel.subscribers }),
    ),
    ...(lost.length > 0 ? [toTarget(streamDeletion(lost))] : []),
  ];
}

/** Every id the request's user-list values name that PostgreSQL's integers can hold (the others name no user). */
const namedUserIds = (entries: readonly ProfileDataEntry[]): number[] => [
  ...new Set(entries.flatMap((entry) => (Array.isArray(entry.value) ? entry.value.filter(isIdInRange) : []))),
];

/** The organization's profile fields, each with the target's current value (null: none) and the users among `namedIds`. */
function profileFields(deps: UserAdminDeps, realmId: number, userId: number, namedIds: number[]) {
  return deps.db
    .selectFrom('custom_profile_fields as f')
    .leftJoin('custom_profile_field_values as v', (join) => join.onRef('v.field_id', '=', 'f.id').on('v.user_id', '=', userId))
    .select(['f.id', 'f.name', 'f.field_type', 'f.field_data', 'v.value as current'])
    .select(
      sql<
        NamedUser[]
      >`(SELECT coalesce(json_agg(json_build_object('id', u.id, 'is_active', u.is_active, 'is_bot', u.bot_type IS NOT NULL)), '[]')
        FROM users u WHERE u.realm_id = ${realmId} AND u.id = ANY (${namedIds}::integer[]))`.as('named_users'),
    )
    .where('f.realm_id', '=', realmId)
    .orderBy('f.id')
    .execute();
}
