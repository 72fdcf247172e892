import { REALM_MEMBERSHIP_LOCK, REALM_MEMBERSHIP_LOCK_NAMESPACE } from '../../db/transactions.js';
import type { StatementRunner } from '../../db/reusable-statement.js';
import type { Caller } from '../../http/auth.js';
import type { Departure } from '../../lib/departure.js';
import { badRequest } from '../../http/errors.js';
import { fakeEmailDomain } from '../../lib/hosts.js';
import { renderMarkdown } from '../../lib/markdown.js';
import { isStorableText } from '../../lib/text.js';
import { isIdInRange, ROLES } from '../../zulip.js';
import { type AddressedEvent, addressedEventArgs, type EventWrites } from '../event-log/event-log.repository.js';
import { effectiveVisibility } from '../users/users.access.js';
import type { UserObjectConfig } from '../users/users.serializers.js';
import { dummyAddressDigits } from '../users/users.service.js';
import { colorPicker } from './colors.js';
import {
  append,
  channelColumns,
  peerEvents,
  type PeerChange,
  Recipients,
  streamDeletion,
  streamObject,
  subscribeAccessEvents,
  unsubscribeAccessEvents,
} from './membership.events.js';
import {
  type ChannelRow,
  type MembershipRead,
  type MembershipRow,
  readMembership,
  type TargetRow,
  writeMembershipStatement,
} from './membership.repository.js';
import type { parametersOf } from '../../http/params.js';
import type { subscribeSchema } from './membership.schemas.js';
import { checkChannelName, type Principals, stripName } from './membership.validation.js';
import { NEW_SUBSCRIPTION_SETTINGS } from './settings.js';
import { serializeSubscription } from './subscriptions.serializers.js';

/**
 * Subscribing and unsubscribing (POST and DELETE /users/me/subscriptions), Zulip's checks in
 * Zulip's order (zerver/views/streams.py add_subscriptions_backend, remove_subscriptions_backend;
 * docs/management-api.md, "Subscriptions"), all or nothing.
 *
 * Locking: a change runs in the caller's interactive transaction (Transactions.runInteractive),
 * then takes the organization's membership lock exclusively (REALM_MEMBERSHIP_LOCK_NAMESPACE), which
 * register takes shared: every register sees the change either in its state or among its queue's
 * events, and two membership changes of an organization never interleave, so what the read found
 * still holds when the write runs. The principals' user locks are not taken: their settings writes
 * change only their own rows and take no organization lock, so no lock cycle. Statements: BEGIN,
 * the user's lock, the organization's lock, one read, one write (skipped when nothing changes),
 * COMMIT, whatever the number of channels and users.
 */

export type MembershipCaller = Pick<Caller, 'id' | 'realmId' | 'role' | 'realmSubdomain'>;
type HostConfig = Parameters<typeof fakeEmailDomain>[1];

export interface MembershipContext extends EventWrites {
  /** Dummy addresses, and the user objects of realm_user/add (organizations restricting guests). */
  config: UserObjectConfig;
}

/** POST /users/me/subscriptions' parameters. */
export type SubscribeRequest = ReturnType<typeof parametersOf<typeof subscribeSchema>>;

/** Zulip's MAX_BULK_NEW_SUBSCRIPTION_MESSAGES (new_subscription_messages_sent). */
const MAX_BULK_NEW_SUBSCRIPTION_MESSAGES = 100;

/** Runs `work` in the caller's interactive transaction, holding the organization's membership lock. */
function underMembershipLock<T>(
  writes: EventWrites,
  caller: Pick<MembershipCaller, 'id' | 'realmId'>,
  work: (tx: StatementRunner) => Promise<T>,
  departure?: Departure,
): Promise<T> {
  return writes.transactions.runInteractive(
    caller.id,
    async (tx) => {
      await tx.run(REALM_MEMBERSHIP_LOCK, [REALM_MEMBERSHIP_LOCK_NAMESPACE, caller.realmId]);
      return work(tx);
    },
    departure,
    { realmId: caller.realmId, mode: 'exclusive' },
  );
}

/** The ids and delivery emails to look up for `principals` (a dummy address names its id). */
function principalKeys(principals: Principals | undefined, caller: MembershipCaller, config: HostConfig) {
  const ids = new Set<number>([caller.id]);
  const emails = new Set<string>();
  if (principals && 'ids' in principals) for (const id of principals.ids) if (isIdInRange(id)) ids.add(id);
  if (principals && 'emails' in principals) {
    const domain = fakeEmailDomain(caller.realmSubdomain, config).toLowerCase();
    for (const email of principals.emails) {
      const wanted = email.trim().toLowerCase();
      if (!isStorableText(wanted)) continue;
      const digits = dummyAddressDigits(wanted, domain);
      if (digits !== undefined && isIdInRange(Number(digits))) ids.add(Number(digits));
      else emails.add(wanted);
    }
  }
  return { targetIds: [...ids], targetEmails: [...emails] };
}

/** The user's API email (Zulip's UserProfile.email): the real one only when everyone may see it. */
function apiEmail(user: TargetRow, caller: MembershipCaller, config: HostConfig): string {
  return effectiveVisibility({ botType: user.bot_type, emailAddressVisibility: user.email_address_visibility }) === 1
    ? user.delivery_email
    : `user${user.id}@${fakeEmailDomain(caller.realmSubdomain, config)}`;
}

/**
 * Zulip's bulk_principals_to_user_profiles: every principal must name a user of the caller's
 * organization (else `No such user`), then none may be deactivated (`User is deactivated`). In
 * principal order, each user once.
 */
function resolvePrincipals(principals: Principals, read: MembershipRead, caller: MembershipCaller, config: HostConfig): TargetRow[] {
  const byId = 'ids' in principals;
  const byKey = new Map<number | string, TargetRow>(
    read.targets.map((user) => [byId ? user.id : apiEmail(user, caller, config).toLowerCase(), user]),
  );
  const found: TargetRow[] = [];
  for (const key of byId ? principals.ids : principals.emails.map((email) => email.trim().toLowerCase())) {
    const user = byKey.get(key);
    if (!user) throw badRequest('No such user');
    found.push(user);
  }
  if (found.some((user) => !user.is_active)) throw badRequest('User is deactivated');
  return [...new Map(found.map((user) => [user.id, user])).values()];
}

/** The requested names, stripped, checked and without repeats (a name and its case variants count once). */
function checkedNames(names: string[]): string[] {
  const distinct = new Map<string, string>();
  for (const name of names.map(stripName)) {
    checkChannelName(name);
    if (!distinct.has(name.toLowerCase())) distinct.set(name.toLowerCase(), name);
  }
  return [...distinct.values()];
}

/** The channels the names found, in request order, each once; and the names that found none. */
function matchNames(names: string[], read: MembershipRead) {
  const channelsById = new Map(read.channels.map((channel) => [channel.id, channel]));
  const existing = new Map<number, ChannelRow>();
  const missing: string[] = [];
  for (const { ord, stream_id } of read.named) {
    if (stream_id === null) missing.push(names[ord - 1]!);
    else existing.set(stream_id, channelsById.get(stream_id)!);
  }
  return { existing: [...existing.values()], missing };
}

/** Active subscribers (active users only) per channel, and each target's subscription row per channel. */
function membershipIndex(read: MembershipRead) {
  const subscribers = new Map(read.subscribers.map((channel) => [channel.stream_id, channel.user_ids]));
  const rows = new Map(read.memberships.map((row) => [`${row.user_id}:${row.stream_id}`, row]));
  return {
    subscribersOf: (streamId: number) => subscribers.get(streamId) ?? [],
    rowOf: (userId: number, streamId: number) => rows.get(`${userId}:${streamId}`),
  };
}

/** Zulip's user_has_content_access for a caller who is not a guest (guests cannot subscribe). */
const hasContentAccess = (channel: ChannelRow, subscribed: boolean) => channel.is_web_public || subscribed || !channel.invite_only;

/** Zulip's get_default_value_for_history_public_to_subscribers. */
const historyPublic = (request: SubscribeRequest) => (request.invite_only ? (request.history_public_to_subscribers ?? false) : true);

export type SubscribeResult = Record<string, unknown>;

/** POST /users/me/subscriptions after the guest check and parsing. */
export function subscribeUsers(
  context: MembershipContext,
  caller: MembershipCaller,
  request: SubscribeRequest,
  departure?: Departure,
): Promise<SubscribeResult> {
  const names = checkedNames(request.subscriptions.map((channel) => channel.name));
  const principals = request.principals;
  const subscribingOthers =
    principals !== undefined && ('emails' in principals ? principals.emails.length > 0 : principals.ids.some((id) => id !== caller.id));
  return underMembershipLock(
    context,
    caller,
    async (tx) => {
      const keys = principalKeys(subscribingOthers ? principals : undefined, caller, context.config);
      const read = await readMembership(tx, { realmId: caller.realmId, names, ...keys, wantNewIds: true, wantPeople: true });
      const { existing, missing } = matchNames(names, read);
      // Zulip's check_channel_creation_permissions: every non-guest may create public and private
      // channels here (no group settings); web-public ones need spectator access, which no
      // organization of this server enables.
      if (missing.length > 0 && request.is_web_public) throw badRequest('Web-public channels are not enabled.');
      const index = membershipIndex(read);
      const unauthorized = existing.filter((channel) => !hasContentAccess(channel, index.rowOf(caller.id, channel.id)?.active === true));
      if (unauthorized.length > 0 && request.authorization_errors_fatal)
        throw badRequest(`Unable to access channel (${unauthorized[0]!.name}).`);
      const subscribers = subscribingOthers
        ? resolvePrincipals(principals, read, caller, context.config)
        : [read.targets.find((user) => user.id === caller.id)!];
      const created = createdChannels(missing, request, read.new_ids, caller);
      const authorized = existing.filter((channel) => !unauthorized.includes(channel));
      const requestedColors = new Map(
        request.subscriptions
          .filter((channel) => channel.color !== undefined)
          .map((channel) => [stripName(channel.name).toLowerCase(), channel.color!]),
      );
      const plan = planSubscriptions(
        requestedColors,
        [...authorized, ...created],
        new Set(created.map((channel) => channel.id)),
        subscribers,
        read,
        { realmId: caller.realmId, config: context.config },
      );
      if (plan.added.length > 0) await writeMembership(tx, context, caller, created, plan.added, [], plan.events, read.queue_owners);
      const newlySubscribedUsers = Object.keys(plan.subscribed).length;
      return {
        subscribed: plan.subscribed,
        already_subscribed: plan.alreadySubscribed,
        ...(request.send_new_subscription_messages && {
          new_subscription_messages_sent: newlySubscribedUsers <= MAX_BULK_NEW_SUBSCRIPTION_MESSAGES,
        }),
        ...(!request.authorization_errors_fatal && { unauthorized: unauthorized.map((channel) => channel.name) }),
      };
    },
    departure,
  );
}

function createdChannels(missing: string[], request: SubscribeRequest, ids: number[], caller: MembershipCaller): ChannelRow[] {
  const now = Math.floor(Date.now() / 1000);
  return missing.map((name, index) => {
    const description = (
      request.subscriptions.find((channel) => stripName(channel.name).toLowerCase() === name.toLowerCase())?.description ?? ''
    ).replaceAll('\n', ' ');
    return {
      id: ids[index]!,
      name,
      description,
      rendered_description: description === '' ? '' : renderMarkdown(description),
      invite_only: request.invite_only,
      is_web_public: false,
      history_public_to_subscribers: historyPublic(request),
      creator_id: caller.id,
      date_created: now,
      deactivated: false,
      message_retention_days: null,
    };
  });
}

interface Addition {
  user_id: number;
  stream_id: number;
  color: string;
}

/** Who gets subscribed where (a new row, or an inactive one reactivated with its settings), the answer's maps and the events. */
function planSubscriptions(
  requestedColors: ReadonlyMap<string, string>,
  channels: ChannelRow[],
  createdIds: Set<number>,
  users: TargetRow[],
  read: MembershipRead,
  realm: { realmId: number; config: UserObjectConfig },
) {
  const index = membershipIndex(read);
  const recipients = new Recipients(read.active_ids, read.active_roles, read.queue_owners);
  const subscribed: Record<string, string[]> = {};
  const alreadySubscribed: Record<string, string[]> = {};
  const added: Addition[] = [];
  const addedTo = new Map<number, number[]>();
  const perUser = new Map<number, { channel: ChannelRow; row: MembershipRow | undefined; color: string }[]>();
  for (const user of [...users].sort((a, b) => a.id - b.id)) {
    const nextColor = colorPicker(read.used_colors.find((used) => used.user_id === user.id)?.colors ?? []);
    for (const channel of channels) {
      const row = index.rowOf(user.id, channel.id);
      const key = String(user.id);
      if (row?.active) {
        (alreadySubscribed[key] ??= []).push(channel.name);
        continue;
      }
      (subscribed[key] ??= []).push(channel.name);
      const color = row?.color ?? requestedColors.get(channel.name.toLowerCase()) ?? nextColor();
      added.push({ user_id: user.id, stream_id: channel.id, color });
      append(addedTo, channel.id, user.id);
      append(perUser, user.id, { channel, row, color });
    }
  }
  const subscribersAfter = (channel: ChannelRow) =>
    [...index.subscribersOf(channel.id), ...(addedTo.get(channel.id) ?? [])].sort((a, b) => a - b);
  const events: AddressedEvent[] = [];
  // stream/create: a created channel to whoever sees it, then to each new subscriber the channels it could not see before.
  for (const channel of channels.filter((channel) => createdIds.has(channel.id))) {
    events.push({ users: recipients.creationAudience(channel), event: { type: 'stream', op: 'create', streams: [streamObject(channel)] } });
  }
  for (const [userId, entries] of perUser) {
    const unseen = entries.filter(({ channel }) => !recipients.seesWithoutSubscription(channel, userId));
    if (unseen.length > 0)
      events.push({
        users: [userId],
        event: { type: 'stream', op: 'create', streams: unseen.map(({ channel }) => streamObject(channel)) },
      });
  }
  for (const [userId, entries] of perUser) {
    const subscriptions = entries.map(({ channel, row, color }) => ({
      ...serializeSubscription({
        // A former subscription keeps its settings (settings.ts); a new one has the columns' defaults.
        ...(row ?? NEW_SUBSCRIPTION_SETTINGS),
        ...channelColumns(channel),
        color,
        subscribers: subscribersAfter(channel),
      }),
      is_archived: channel.deactivated,
    }));
    events.push({ users: [userId], event: { type: 'subscription', op: 'add', subscriptions } });
  }
  const gained = [...perUser].map(([userId, entries]) => ({
    userId,
    channelSubscribers: entries.map(({ channel }) => subscribersAfter(channel)),
  }));
  events.push(...subscribeAccessEvents(read, realm.realmId, gained, recipients, realm.config));
  const changes: PeerChange[] = channels.map((channel) => ({
    channel,
    changed: addedTo.get(channel.id) ?? [],
    subscribersAfter: subscribersAfter(channel),
  }));
  events.push(...peerEvents('peer_add', changes, recipients));
  return { subscribed, alreadySubscribed, added, events };
}

async function writeMembership(
  tx: StatementRunner,
  context: EventWrites,
  /** `id`: the acting user of the audit rows; null for an operator (the admin command line). */
  caller: Pick<MembershipCaller, 'realmId'> & { id: number | null },
  created: ChannelRow[],
  added: Addition[],
  removed: { user_id: number; stream_id: number }[],
  events: AddressedEvent[],
  queueOwners: number[],
): Promise<void> {
  // Only users with a queue can receive (a public channel's peers are the whole organization).
  const owners = new Set(queueOwners);
  const stored = events
    .map((event) => ({ ...event, users: event.users.filter((id) => owners.has(id)) }))
    .filter((event) => event.users.length > 0);
  const channels = created.map((channel) => ({ ...channel, date_created: new Date(channel.date_created * 1000).toISOString() }));
  await writeMembershipStatement(tx, {
    realmId: caller.realmId,
    channels: JSON.stringify(channels),
    added: JSON.stringify(added),
    removed: JSON.stringify(removed),
    actingUserId: caller.id,
    ...addressedEventArgs(stored),
    maxPendingEvents: context.maxPendingEvents,
  });
}

export interface UnsubscribeRequest {
  names: string[];
  principals: Principals | undefined;
}

/** Zulip's user_directly_controls_user: oneself, or a bot one owns. */
const controls = (caller: MembershipCaller, target: TargetRow) =>
  target.id === caller.id || (target.bot_type !== null && target.bot_owner_id === caller.id);

/** DELETE /users/me/subscriptions after parsing. */
export function unsubscribeUsers(context: MembershipContext, caller: MembershipCaller, request: UnsubscribeRequest, departure?: Departure) {
  const principals = request.principals;
  const named = principals !== undefined && ('ids' in principals ? principals.ids.length > 0 : principals.emails.length > 0);
  return underMembershipLock(
    context,
    caller,
    async (tx) => {
      const strippedNames = request.names.map(stripName);
      // A name PostgreSQL text cannot hold (NUL) fails its checks below, after the principals'.
      const distinctNames = [...new Map(strippedNames.filter(isStorableText).map((name) => [name.toLowerCase(), name])).values()];
      const read = await readMembership(tx, {
        realmId: caller.realmId,
        names: distinctNames,
        ...principalKeys(named ? principals : undefined, caller, context.config),
        wantNewIds: false,
      });
      const users = named
        ? resolvePrincipals(principals, read, caller, context.config)
        : [read.targets.find((user) => user.id === caller.id)!];
      const unsubscribingOthers = users.some((user) => !controls(caller, user));
      for (const name of strippedNames) checkChannelName(name);
      const { existing, missing } = matchNames(distinctNames, read);
      // Zulip's bulk_can_remove_subscribers_from_streams: administrators may; guests may not; others
      // only from channels they administer (by default: created).
      if (unsubscribingOthers && caller.role > ROLES.admin) {
        if (caller.role === ROLES.guest || existing.some((channel) => channel.creator_id !== caller.id))
          throw badRequest('Insufficient permission');
      }
      if (missing.length > 0) throw badRequest(`Channel(s) (${missing.join(', ')}) do not exist`);
      const index = membershipIndex(read);
      const recipients = new Recipients(read.active_ids, read.active_roles, read.queue_owners);
      const removed: string[] = [];
      const notRemoved: string[] = [];
      const removals: { user_id: number; stream_id: number }[] = [];
      const removedFrom = new Map<number, number[]>();
      const lostBy = new Map<number, ChannelRow[]>();
      for (const user of users) {
        for (const channel of existing) {
          if (index.rowOf(user.id, channel.id)?.active !== true) {
            notRemoved.push(channel.name);
            continue;
          }
          removed.push(channel.name);
          removals.push({ user_id: user.id, stream_id: channel.id });
          append(removedFrom, channel.id, user.id);
          append(lostBy, user.id, channel);
        }
      }
      if (removals.length > 0) {
        const changes: PeerChange[] = existing.map((channel) => {
          const gone = new Set(removedFrom.get(channel.id) ?? []);
          return { channel, changed: [...gone], subscribersAfter: index.subscribersOf(channel.id).filter((id) => !gone.has(id)) };
        });
        // Zulip's send_subscription_remove_events: per user, subscription/remove, then stream/delete
        // for the channels it no longer sees; then the peers' events.
        const events: AddressedEvent[] = [];
        for (const [userId, channels] of lostBy) {
          events.push({
            users: [userId],
            event: {
              type: 'subscription',
              op: 'remove',
              subscriptions: channels.map((channel) => ({ name: channel.name, stream_id: channel.id })),
            },
          });
          const unseen = channels.filter((channel) => !recipients.seesWithoutSubscription(channel, userId));
          if (unseen.length > 0) events.push({ users: [userId], event: streamDeletion(unseen) });
        }
        events.push(...peerEvents('peer_remove', changes, recipients));
        events.push(...unsubscribeAccessEvents(read, [...lostBy.keys()], removals, recipients));
        await writeMembership(tx, context, caller, [], [], removals, events, read.queue_owners);
      }
      return { removed, not_removed: notRemoved };
    },
    departure,
  );
}

/** The admin command line's `subscribe` names a channel that does not exist. */
export class ChannelNotFound extends Error {}

/**
 * The admin command line's `subscribe` (src/cli/operations.ts): subscribes one user to one
 * existing channel (archived included), as an operator, without the API's permission checks,
 * through the same lock, read, plan, write and events as POST /users/me/subscriptions. Returns
 * the subscription's colour (an existing row's, reactivated or active, is kept).
 */
export function subscribeAsOperator(
  writes: EventWrites & { config: UserObjectConfig },
  realmId: number,
  userId: number,
  channelName: string,
): Promise<{ stream_id: number; color: string }> {
  return underMembershipLock(writes, { id: userId, realmId }, async (tx) => {
    const read = await readMembership(tx, {
      realmId,
      names: [channelName],
      targetIds: [userId],
      targetEmails: [],
      wantNewIds: false,
      wantPeople: true,
    });
    const { existing } = matchNames([channelName], read);
    const channel = existing[0];
    const user = read.targets.find((target) => target.id === userId);
    if (!channel || !user) throw new ChannelNotFound(channelName);
    const plan = planSubscriptions(new Map(), [channel], new Set(), [user], read, { realmId, config: writes.config });
    if (plan.added.length > 0) await writeMembership(tx, writes, { realmId, id: null }, [], plan.added, [], plan.events, read.queue_owners);
    return { stream_id: channel.id, color: plan.added[0]?.color ?? membershipIndex(read).rowOf(userId, channel.id)!.color };
  });
}
