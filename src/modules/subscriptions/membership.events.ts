import { ROLES } from '../../zulip.js';
import type { AddressedEvent } from '../events/events.repository.js';
import type { ChannelRow } from './membership.repository.js';

/**
 * Who receives which event of a membership change, as Zulip's bulk_add_subscriptions,
 * bulk_remove_subscriptions and send_peer_subscriber_events decide (docs/management-api.md,
 * "Subscriptions", Events). This server has no group-based channel permissions: a channel's
 * metadata is visible to its subscribers, the organization's administrators and its creator
 * (Zulip's default can_administer_channel_group), and a public channel's to every non-guest.
 */

/** The active users a membership change's events can concern, as their recipients. */
export class Recipients {
  readonly all: number[];
  readonly nonGuests: number[];
  private readonly admins: number[];
  private readonly roles = new Map<number, number>();

  /**
   * `ids` and `roles`: the organization's active users that the change can concern: at least those
   * with a queue, the changed users, and the channels' creators and subscribers (whose roles
   * decide who sees what). `listeners`: those with an event queue,
   * the only ones events are stored for (the lists of recipients are cut to them at once, so an
   * organization of thousands costs what its connected users cost).
   */
  constructor(ids: number[], roles: number[], listeners: readonly number[]) {
    ids.forEach((id, index) => this.roles.set(id, roles[index]!));
    this.all = [...new Set(listeners)].filter((id) => this.roles.has(id)).sort((a, b) => a - b);
    this.nonGuests = this.all.filter((id) => this.roles.get(id) !== ROLES.guest);
    this.admins = this.all.filter((id) => this.roles.get(id)! <= ROLES.admin);
  }

  isActive(id: number): boolean {
    return this.roles.has(id);
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
    if (channel.creator_id !== null && this.isActive(channel.creator_id)) peers.add(channel.creator_id);
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

/**
 * The channel as stream events carry it: the channel keys of the subscription object
 * (spec §2.12), in Zulip's stream dictionary order.
 */
export function streamObject(channel: ChannelRow) {
  return {
    is_archived: channel.deactivated,
    creator_id: channel.creator_id,
    date_created: Number(channel.date_created),
    description: channel.description,
    first_message_id: null,
    history_public_to_subscribers: channel.history_public_to_subscribers,
    invite_only: channel.invite_only,
    is_web_public: channel.is_web_public,
    message_retention_days: channel.message_retention_days,
    name: channel.name,
    rendered_description: channel.rendered_description,
    stream_id: channel.id,
    stream_weekly_traffic: null,
  };
}

/**
 * The stream/delete event of channels the user lost sight of (Zulip's send_stream_deletion_event;
 * `streams` is deprecated, kept by Zulip for compatibility).
 */
export function streamDeletion(channels: Pick<ChannelRow, 'id'>[]) {
  return {
    type: 'stream',
    op: 'delete',
    streams: channels.map((channel) => ({ stream_id: channel.id })),
    stream_ids: channels.map((channel) => channel.id),
    for_archiving: false,
  };
}
