import { ROLES } from '../../zulip.js';
import type { AddressedEvent, ApiEvent } from '../event-log/event-log.repository.js';
import { canSeeDeliveryEmail, type UserViewer } from '../users/users.access.js';
import { buildUserObject, type UserObjectConfig, type UserRecord, userRecordOf } from '../users/users.serializers.js';
import type { ChannelRow, MembershipRead, PersonRow } from './membership.repository.js';
import { CHANNEL_KEYS, objectBuilder } from './subscriptions.serializers.js';

/**
 * Who receives which event of a membership change, as Zulip's bulk_add_subscriptions,
 * bulk_remove_subscriptions and send_peer_subscriber_events decide (docs/management-api.md). No
 * group-based permissions: a channel's metadata is visible to its subscribers, the administrators
 * and its creator (Zulip's default can_administer_channel_group), a public one's to every non-guest.
 */

/** The active users a membership change's events can concern, as their recipients. */
export class Recipients {
  readonly all: number[];
  readonly nonGuests: number[];
  private readonly admins: number[];
  private readonly roles = new Map<number, number>();

  /**
   * `ids` and `roles`: the active users the change can concern (MembershipRead.active_ids).
   * `listeners`: those with an event queue, the only ones events are stored for: the recipients are
   * cut to them at once, so an organization of thousands costs what its connected users cost.
   */
  constructor(ids: number[], roles: number[], listeners: readonly number[]) {
    ids.forEach((id, index) => this.roles.set(id, roles[index]!));
    this.all = [...new Set(listeners)].filter((id) => this.roles.has(id)).sort((a, b) => a - b);
    this.nonGuests = this.all.filter((id) => this.roles.get(id) !== ROLES.guest);
    this.admins = this.all.filter((id) => this.roles.get(id)! <= ROLES.admin);
  }

  isGuest(id: number): boolean {
    return this.roles.get(id) === ROLES.guest;
  }

  /**
   * Whether the user sees the channel's metadata without being subscribed to it (Zulip's
   * check_basic_stream_access with is_subscribed=False, require_content_access=False).
   */
  seesWithoutSubscription(channel: Pick<ChannelRow, 'invite_only' | 'is_web_public' | 'creator_id'>, userId: number): boolean {
    if (channel.is_web_public) return true;
    if (!channel.invite_only) return !this.isGuest(userId);
    return this.roles.get(userId)! <= ROLES.admin || channel.creator_id === userId;
  }

  /** Who sees the channel's subscriber list (and so gets its peer events), given its active subscribers. */
  peersOf(channel: Pick<ChannelRow, 'invite_only' | 'is_web_public' | 'creator_id'>, subscribers: readonly number[]): Set<number> {
    if (channel.is_web_public) return new Set(this.all);
    if (!channel.invite_only) return new Set([...this.nonGuests, ...subscribers.filter((id) => this.isGuest(id))]);
    const peers = new Set([...subscribers, ...this.admins]);
    if (channel.creator_id !== null && this.roles.has(channel.creator_id)) peers.add(channel.creator_id);
    return peers;
  }

  /** Who sees a channel being created (Zulip's stream/create recipients). */
  creationAudience(channel: Pick<ChannelRow, 'invite_only' | 'is_web_public' | 'creator_id'>): number[] {
    return this.all.filter((id) => this.seesWithoutSubscription(channel, id));
  }
}

/** One channel's change of subscribers: who was added or removed, and its subscribers afterwards. */
export interface PeerChange {
  channel: ChannelRow;
  changed: number[];
  subscribersAfter: number[];
}

const ascending = (a: number, b: number) => a - b;

/** Adds `value` to the list of `key`. */
export function append<K, V>(lists: Map<K, V[]>, key: K, value: V): void {
  const list = lists.get(key);
  if (list) list.push(value);
  else lists.set(key, [value]);
}

/**
 * The peer_add or peer_remove events: one per private channel, and for the others one per set of
 * changed users and kind (public, web-public), covering their channels (sorted `stream_ids`); a
 * public channel with guest subscribers has an event of its own, its peers being its own. The
 * changed users never get them.
 */
export function peerEvents(op: 'peer_add' | 'peer_remove', changes: PeerChange[], recipients: Recipients): AddressedEvent[] {
  const events: AddressedEvent[] = [];
  const batches = new Map<string, { streamIds: number[]; changed: number[]; users: number[] }>();
  for (const { channel, changed, subscribersAfter } of changes) {
    if (changed.length === 0) continue;
    const userIds = [...changed].sort(ascending);
    const changedSet = new Set(userIds);
    const peers = () => [...recipients.peersOf(channel, subscribersAfter)].filter((id) => !changedSet.has(id)).sort(ascending);
    const ownEvent = channel.invite_only || (!channel.is_web_public && subscribersAfter.some((id) => recipients.isGuest(id)));
    if (ownEvent) {
      events.push({ users: peers(), event: { type: 'subscription', op, stream_ids: [channel.id], user_ids: userIds } });
      continue;
    }
    // The batch's channels have the same peers (every non-guest, or every user): computed once.
    const key = `${channel.is_web_public ? 'web' : 'public'}:${userIds.join(',')}`;
    const batch = batches.get(key);
    if (batch) batch.streamIds.push(channel.id);
    else batches.set(key, { streamIds: [channel.id], changed: userIds, users: peers() });
  }
  for (const batch of batches.values()) {
    events.push({
      users: batch.users,
      event: { type: 'subscription', op, stream_ids: batch.streamIds.sort(ascending), user_ids: batch.changed },
    });
  }
  return events;
}

/** The channel as the serializers read it (ChannelColumns). */
export const channelColumns = (channel: ChannelRow) => ({
  ...channel,
  stream_id: channel.id,
  date_created: new Date(Number(channel.date_created) * 1000),
});

const buildStreamObject = objectBuilder<ReturnType<typeof channelColumns>>({ ...CHANNEL_KEYS, is_archived: (row) => row.deactivated });

/** The channel as stream events carry it: the subscription object's channel keys (docs/api.md §2.12), in their order. */
export const streamObject = (channel: ChannelRow) => buildStreamObject(channelColumns(channel));

/** The stream/delete event of channels the user lost sight of (Zulip's send_stream_deletion_event; `streams` deprecated). */
export function streamDeletion(channels: Pick<ChannelRow, 'id'>[]) {
  return {
    type: 'stream',
    op: 'delete',
    streams: channels.map((channel) => ({ stream_id: channel.id })),
    stream_ids: channels.map((channel) => channel.id),
    for_archiving: false,
  };
}

/**
 * Who shares an active subscription with whom, in one state of the named channels (before or after
 * the change): the read's pairs sharing a channel that is not named, and the named channels'
 * subscribers in that state.
 */
class ChannelSharing {
  private readonly elsewhere = new Set<string>();
  private readonly namedChannelsOf = new Map<number, Set<number>>();

  constructor(pairs: MembershipRead['shared_elsewhere'], subscribers: ReadonlyMap<number, readonly number[]>) {
    for (const { target_id, other_ids } of pairs) for (const other of other_ids) this.elsewhere.add(`${target_id}:${other}`);
    for (const [channel, users] of subscribers) {
      for (const user of users) this.namedChannelsOf.set(user, (this.namedChannelsOf.get(user) ?? new Set<number>()).add(channel));
    }
  }

  /** The users of `channelSubscribers` but `target` (a target of the read) who share no channel with it, ascending. */
  strangersTo(target: number, channelSubscribers: readonly (readonly number[])[]): number[] {
    return [...new Set(channelSubscribers.flat())].filter((id) => id !== target && !this.shares(target, id)).sort(ascending);
  }

  private shares(target: number, other: number): boolean {
    if (this.elsewhere.has(`${target}:${other}`)) return true;
    const theirs = this.namedChannelsOf.get(other);
    for (const channel of this.namedChannelsOf.get(target) ?? []) if (theirs?.has(channel)) return true;
    return false;
  }
}

/** Zulip's UserProfile.INACCESSIBLE_USER_NAME. */
const INACCESSIBLE_USER_NAME = 'Unknown user';

/** The realm_user/remove that tells a guest it no longer has access to the user (an unsubscribe's, a deactivation's). */
export const inaccessibleUserRemoval = (userId: number): ApiEvent => ({
  type: 'realm_user',
  op: 'remove',
  person: { user_id: userId, full_name: INACCESSIBLE_USER_NAME },
});

// Zulip's notify_created_user sends no custom profile data (a later event would carry it).
const recordOf = (row: PersonRow, realmId: number): UserRecord =>
  userRecordOf({ ...row, date_joined: new Date(row.date_joined), realm_id: realmId }, { profileValues: [] });

/** The named channels' active subscribers before the change (the read's). */
const subscribersBefore = (read: MembershipRead) => new Map(read.subscribers.map(({ stream_id, user_ids }) => [stream_id, user_ids]));

/**
 * A subscribe's realm_user/add events, none unless the organization restricts guests (Zulip's
 * send_user_creation_events_on_adding_subscriptions, after subscription/add, before peer_add): for
 * each newly subscribed user X (`changes`, ascending, with its new channels' subscribers after the
 * change), its user object to the guests among those subscribers who shared no channel with it
 * before (one event per address access, those who may see the real address first:
 * notify_created_user); then, if X is a guest, one event to X per such subscriber, with that
 * user's object. Bots get no exception (Zulip makes none here, though guests always see bots). The
 * user object as notify_created_user builds it: no client_gravatar, `profile_data` empty.
 */
export function subscribeAccessEvents(
  read: MembershipRead,
  realmId: number,
  changes: readonly { userId: number; channelSubscribers: readonly (readonly number[])[] }[],
  recipients: Recipients,
  config: UserObjectConfig,
): AddressedEvent[] {
  if (!read.restricted) return [];
  const before = new ChannelSharing(read.shared_elsewhere, subscribersBefore(read));
  const records = new Map(read.people.map((row) => [row.id, recordOf(row, realmId)]));
  const roles = new Map(read.active_ids.map((id, index) => [id, read.active_roles[index]!]));
  const viewer = (id: number): UserViewer => ({
    id,
    role: roles.get(id) ?? ROLES.guest,
    realmSubdomain: read.realm_subdomain,
    realmCanAccessAllUsersGroup: 'members',
  });
  const seesAddress = (viewerId: number, userId: number) => canSeeDeliveryEmail(viewer(viewerId), records.get(userId)!);
  const add = (viewerId: number, userId: number) => ({
    type: 'realm_user',
    op: 'add',
    person: buildUserObject(viewer(viewerId), records.get(userId)!, { clientGravatar: false, includeCustomProfileFields: true }, config),
  });
  const events: AddressedEvent[] = [];
  for (const { userId, channelSubscribers } of changes) {
    const met = before.strangersTo(userId, channelSubscribers);
    const guests = met.filter((id) => recipients.isGuest(id));
    const withAddress = guests.filter((id) => seesAddress(id, userId));
    const withoutAddress = guests.filter((id) => !seesAddress(id, userId));
    if (withAddress.length > 0) events.push({ users: withAddress, event: add(withAddress[0]!, userId) });
    if (withoutAddress.length > 0) events.push({ users: withoutAddress, event: add(withoutAddress[0]!, userId) });
    if (recipients.isGuest(userId)) for (const id of met) events.push({ users: [userId], event: add(userId, id) });
  }
  return events;
}

/**
 * An unsubscribe's realm_user/remove events, none unless the organization restricts guests (Zulip's
 * send_user_remove_events_on_removing_subscriptions, after every other event of the request): for
 * each user X who lost subscriptions (`removed`: the pairs the change deactivates),
 * `{user_id: X, full_name: "Unknown user"}` to the guests among the remaining subscribers of those
 * channels who no longer share a channel with X (one event); then, if X is a guest, one event to X
 * per remaining subscriber it no longer shares a channel with.
 */
export function unsubscribeAccessEvents(
  read: MembershipRead,
  users: readonly number[],
  removed: readonly { user_id: number; stream_id: number }[],
  recipients: Recipients,
): AddressedEvent[] {
  if (!read.restricted) return [];
  const gone = new Set(removed.map(({ user_id, stream_id }) => `${user_id}:${stream_id}`));
  const after = new Map(
    [...subscribersBefore(read)].map(([channel, ids]) => [channel, ids.filter((id) => !gone.has(`${id}:${channel}`))] as const),
  );
  const sharing = new ChannelSharing(read.shared_elsewhere, after);
  const left = new Map<number, (readonly number[])[]>();
  for (const { user_id, stream_id } of removed) append(left, user_id, after.get(stream_id) ?? []);
  const events: AddressedEvent[] = [];
  for (const userId of users.filter((id) => left.has(id))) {
    const lost = sharing.strangersTo(userId, left.get(userId)!);
    const guests = lost.filter((id) => recipients.isGuest(id));
    if (guests.length > 0) events.push({ users: guests, event: inaccessibleUserRemoval(userId) });
    if (recipients.isGuest(userId)) for (const id of lost) events.push({ users: [userId], event: inaccessibleUserRemoval(id) });
  }
  return events;
}
