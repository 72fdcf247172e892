import { sql } from 'kysely';
import type { Database } from '../../db/database.js';
import { writeRefusal } from '../../db/errors.js';
import { bindStatement, type Statement, type StatementRunner } from '../../db/reusable-statement.js';
import { REALM_MEMBERSHIP_LOCK, REALM_MEMBERSHIP_LOCK_NAMESPACE, type RealmQueue, type Transactions } from '../../db/transactions.js';
import type { Departure } from '../../lib/departure.js';
import { generateApiKey, hashApiKey } from '../../lib/api-keys.js';
import { ROLES } from '../../zulip.js';
import { type AudienceEvent, audienceEventsJson, EVERY_ROLE, type GuestAudience } from '../event-log/audiences.js';
import { maxRoleSeeingAddress, type UserViewer } from '../users/users.access.js';
import {
  avatarUrl,
  buildInaccessibleUserPlaceholder,
  buildUserObject,
  GRAVATAR_SOURCE,
  type UserObjectConfig,
  type UserRecord,
} from '../users/users.serializers.js';
import { CREATE_USER, DEACTIVATE_USER, DELETED_BOT_NAME, DELETED_USER_NAME, REACTIVATE_USER, REFUSALS } from './users.writes.js';
import { accessLossOnDeparture, arrivalEvents, departureEvents, type PeerReadUser, readPeers } from './users-peers.js';

/** User-management writes of the API and the command line: each checks only the organization's state, in its statement. */

/** The organization a write happens in. */
export interface ManagedRealm {
  id: number;
  subdomain: string;
  /** 'everyone' or 'members' (guests restricted, docs/api.md §2.4). */
  canAccessAllUsersGroup: string;
}

export interface ManagementContext {
  /** Reads before the write (in `open`, when that is where the write runs). */
  db: Database;
  /** Where the write runs: the acting user's transactions (the server), or `open`, a transaction the caller holds (the command line). */
  transactions: { run: Transactions; actingUserId: number; departure?: Departure } | { open: StatementRunner };
  realm: ManagedRealm;
  maxPendingEvents: number;
  config: UserObjectConfig;
}

/** A refusal of the statement (users.writes.ts REFUSALS), for the caller to turn into its own error. */
export class ManagementRefusal extends Error {
  constructor(
    readonly reason: string,
    readonly detail: string,
  ) {
    super(reason);
    this.name = 'ManagementRefusal';
  }
}

/** A refusal of the statement, or a duplicate address, as ManagementRefusal; anything else as it is. */
function refusalOf(error: unknown): unknown {
  const refusal = writeRefusal(error);
  if (refusal) return new ManagementRefusal(refusal.reason, refusal.detail);
  const { code, table } = error as { code?: string; table?: string };
  return code === '23505' && table === 'users' ? new ManagementRefusal(REFUSALS.emailInUse, '') : error;
}

const lockOf = (context: ManagementContext) => [REALM_MEMBERSHIP_LOCK_NAMESPACE, context.realm.id];
/** The organization's queue in this process, waited in before its lock (RealmQueue). */
const queueOf = (context: ManagementContext): RealmQueue => ({ realmId: context.realm.id, mode: 'exclusive' });

/** Runs `statement` behind the organization's user-management lock, in one transaction (one round trip on the server's way). */
async function runManagementWrite(context: ManagementContext, statement: Statement, values: readonly unknown[]): Promise<void> {
  const { transactions } = context;
  try {
    if ('run' in transactions) {
      await transactions.run.run(
        transactions.actingUserId,
        [bindStatement(REALM_MEMBERSHIP_LOCK, lockOf(context)), bindStatement(statement, values)],
        transactions.departure,
        'large',
        queueOf(context),
      );
      return;
    }
    await transactions.open.run(REALM_MEMBERSHIP_LOCK, lockOf(context));
    await transactions.open.run(statement, values);
  } catch (error) {
    throw refusalOf(error);
  }
}

/** Runs `work` behind the organization's user-management lock, in one transaction where it may read before it writes. */
async function runManagementInteractive(context: ManagementContext, work: (tx: StatementRunner) => Promise<void>): Promise<void> {
  const { transactions } = context;
  const locked = async (tx: StatementRunner) => {
    await tx.run(REALM_MEMBERSHIP_LOCK, lockOf(context));
    await work(tx);
  };
  try {
    if ('run' in transactions)
      await transactions.run.runInteractive(transactions.actingUserId, locked, transactions.departure, queueOf(context));
    else await locked(transactions.open);
  } catch (error) {
    throw refusalOf(error);
  }
}

const commonValues = (context: ManagementContext, events: readonly AudienceEvent[], excluded: readonly number[]) => [
  context.realm.id,
  context.maxPendingEvents,
  audienceEventsJson(events),
  excluded,
];

/** Which guests may see events about `userId` (docs/api.md §2.4): all, unless the organization restricts them. */
export function guestsSeeing(realm: ManagedRealm, target: { id: number; botType: number | null }): GuestAudience {
  return realm.canAccessAllUsersGroup === 'members' && target.botType === null ? { sharingWith: target.id } : 'all';
}

/** A realm_user update about a user, to everyone who may access them. */
export function userUpdateEvent(
  realm: ManagedRealm,
  target: { id: number; botType: number | null },
  person: Record<string, unknown>,
): AudienceEvent {
  return {
    event: { type: 'realm_user', op: 'update', person: { user_id: target.id, ...person } },
    ...EVERY_ROLE,
    guests: guestsSeeing(realm, target),
  };
}

export interface NewUserInput {
  email: string;
  fullName: string;
  role: number;
  timezone: string;
  emailAddressVisibility: number;
  isImportedStub: boolean;
  /** Zulip's special permission for POST /users (granted by the admin command line only). */
  canCreateUsers: boolean;
  /** Checked after the address is known to be free (Zulip's order): the API's password check. */
  passwordTooWeak: boolean;
}

/**
 * Creates a user and sends realm_user/add (docs/management-api.md U.3). Refuses REFUSALS.emailInUse
 * (any user of the organization, ignoring case), then REFUSALS.weakPassword.
 */
export async function createUserWithEvents(context: ManagementContext, input: NewUserInput): Promise<{ userId: number; apiKey: string }> {
  const userId = await nextUserId(context.db);
  const apiKey = generateApiKey();
  const record: UserRecord = {
    id: userId,
    realmId: context.realm.id,
    deliveryEmail: input.email,
    fullName: input.fullName,
    dateJoined: new Date(),
    isActive: true,
    role: input.role,
    botType: null,
    botOwnerId: null,
    timezone: input.timezone,
    avatarSource: 'G',
    avatarVersion: 1,
    emailAddressVisibility: input.emailAddressVisibility,
    isImportedStub: input.isImportedStub,
    isDeleted: false,
    profileValues: [],
  };
  const seesAddress = maxRoleSeeingAddress(input.emailAddressVisibility);
  const person = (role: number) =>
    buildUserObject(viewerOfRole(context.realm, role), record, { clientGravatar: false, includeCustomProfileFields: true }, context.config);
  // Zulip's notify_created_user: where guests are restricted, the new user shares no channel with
  // any guest yet, so guests get its placeholder (not with user_list_incomplete), the others the user object.
  const restricted = guestsSeeing(context.realm, record) !== 'all';
  const guests: GuestAudience = restricted ? 'none' : 'all';
  const events: AudienceEvent[] = [
    { event: { type: 'realm_user', op: 'add', person: person(ROLES.owner) }, lo: 0, hi: seesAddress, guests },
    { event: { type: 'realm_user', op: 'add', person: person(ROLES.guest) }, lo: seesAddress, hi: ROLES.guest, guests },
  ].filter((event) => event.lo < event.hi);
  if (restricted) {
    const placeholder = buildInaccessibleUserPlaceholder(viewerOfRole(context.realm, ROLES.guest), userId, context.config);
    events.push({
      event: { type: 'realm_user', op: 'add', person: placeholder },
      lo: ROLES.member,
      hi: ROLES.guest,
      guests: 'all',
      placeholder: true,
    });
  }
  await runManagementWrite(context, CREATE_USER, [
    ...commonValues(context, events, []),
    userId,
    input.email,
    input.fullName,
    record.dateJoined,
    input.emailAddressVisibility,
    input.passwordTooWeak,
    hashApiKey(apiKey),
    input.role,
    input.timezone,
    input.isImportedStub,
    input.canCreateUsers,
  ]);
  return { userId, apiKey };
}

/** A viewer of this role who is nobody in particular: what such a viewer may see of others. */
const viewerOfRole = (realm: ManagedRealm, role: number): UserViewer => ({
  id: 0,
  role,
  realmSubdomain: realm.subdomain,
  realmCanAccessAllUsersGroup: realm.canAccessAllUsersGroup,
});

/** The id the next user gets, taken from the sequence before the write (its events name it). */
async function nextUserId(db: Database): Promise<number> {
  const { rows } = await sql<{ id: number }>`SELECT nextval(pg_get_serial_sequence('users', 'id'))::integer AS id`.execute(db);
  return rows[0]!.id;
}

export interface DeactivationTarget {
  id: number;
  botType: number | null;
  /** The target's active bots, deactivated first (each with its own events). */
  activeBotIds: readonly number[];
}

/**
 * Deactivates a user and their active bots (docs/management-api.md U.5) with their events. Refuses
 * REFUSALS.deactivated, then (self) REFUSALS.lastUser, then (keepLastOwner) REFUSALS.lastOwner.
 */
export async function deactivateUserWithEvents(
  context: ManagementContext,
  target: DeactivationTarget,
  options: { self: boolean; keepLastOwner: boolean; deleteProfile?: boolean },
): Promise<void> {
  const deleteProfile = options.deleteProfile === true;
  // A restricted organization's guests get no update (Zulip: non-guests and DM partners; no DMs
  // here), but those sharing a channel with the target its realm_user/remove. Bots stay accessible.
  const restricted = guestsSeeing(context.realm, target) !== 'all';
  await runManagementInteractive(context, async (tx) => {
    const read = await readPeers(tx, context.realm.id, [target.id, ...target.activeBotIds], true);
    // A bot deactivated since the caller read it is not deactivated again.
    const bots = target.activeBotIds.filter((botId) => read.users.some((user) => user.id === botId && user.is_active));
    const before = (id: number) => {
      const user = read.users.find((row) => row.id === id);
      return deleteProfile && user ? profileDeletionEvents(context, user) : [];
    };
    const events = departureEvents(read, [
      ...bots.map((botId) => ({
        id: botId,
        before: before(botId),
        after: [userUpdateEvent(context.realm, { id: botId, botType: 1 }, { is_active: false })],
      })),
      {
        id: target.id,
        before: before(target.id),
        after: restricted
          ? [{ ...userUpdateEvent(context.realm, target, { is_active: false }), guests: 'none' }, ...accessLossOnDeparture(read, target.id)]
          : [userUpdateEvent(context.realm, target, { is_active: false })],
      },
    ]);
    const gone = [target.id, ...bots];
    await tx.run(DEACTIVATE_USER, [
      ...commonValues(context, events, gone),
      target.id,
      bots,
      options.self,
      options.keepLastOwner,
      deleteProfile,
    ]);
  });
}

/** Zulip's delete_profile events for one user (name, then avatar, each if changed); no realm_bot events (no bot lists). */
function profileDeletionEvents(context: ManagementContext, user: PeerReadUser): AudienceEvent[] {
  const target = { id: user.id, botType: user.bot_type };
  const name = user.bot_type === null ? DELETED_USER_NAME : DELETED_BOT_NAME;
  const events: AudienceEvent[] = [];
  if (user.full_name !== name) events.push(userUpdateEvent(context.realm, target, { full_name: name }));
  if (user.avatar_source !== GRAVATAR_SOURCE) {
    const avatar = {
      id: user.id,
      realmId: context.realm.id,
      deliveryEmail: user.delivery_email,
      avatarSource: GRAVATAR_SOURCE,
      avatarVersion: user.avatar_version + 1,
    };
    // Zulip's notify_avatar_url_change: full URLs for everyone (no client_gravatar), user_id last.
    const person = {
      avatar_source: GRAVATAR_SOURCE,
      avatar_url: avatarUrl(avatar, false, true, context.config),
      avatar_url_medium: avatarUrl(avatar, false, true, context.config, true),
      avatar_version: avatar.avatarVersion,
      user_id: user.id,
    };
    events.push({ ...userUpdateEvent(context.realm, target, {}), event: { type: 'realm_user', op: 'update', person } });
  }
  return events;
}

/** Reactivates a user (docs/management-api.md U.7), with `newBotOwnerId` for a bot. Refuses REFUSALS.botNameTaken. */
export async function reactivateUserWithEvents(
  context: ManagementContext,
  target: { id: number; botType: number | null },
  newBotOwnerId: number | null,
): Promise<void> {
  const person = newBotOwnerId === null ? {} : { bot_owner_id: newBotOwnerId };
  await runManagementInteractive(context, async (tx) => {
    const read = await readPeers(tx, context.realm.id, [target.id], false);
    const events = [
      userUpdateEvent(context.realm, target, { is_active: true }),
      ...(newBotOwnerId === null ? [] : [userUpdateEvent(context.realm, target, person)]),
      ...arrivalEvents(read, target.id),
    ];
    await tx.run(REACTIVATE_USER, [...commonValues(context, events, [target.id]), target.id, newBotOwnerId]);
  });
}

/** A PATCH's statement and its events (users-update.service.ts computes both). */
export async function updateUserWithEvents(
  context: ManagementContext,
  statement: Statement,
  args: readonly unknown[],
  events: readonly AudienceEvent[],
): Promise<void> {
  await runManagementWrite(context, statement, [...commonValues(context, events, []), ...args]);
}
