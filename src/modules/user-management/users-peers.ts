import type { StatementRunner } from '../../db/reusable-statement.js';
import type { ApiEvent } from '../event-log/event-log.repository.js';
import { type AudienceEvent, EVERY_ROLE } from '../event-log/audiences.js';
import { inaccessibleUserRemoval, peerEvents, type PeerChange, Recipients } from '../subscriptions/membership.events.js';
import type { ChannelRow } from '../subscriptions/membership.repository.js';

/**
 * The peer events of a deactivation (peer_remove) and a reactivation (peer_add) at feature level 490,
 * by the code of a subscribe's or an unsubscribe's (membership.events.ts). Read under the
 * organization's membership lock, so subscribers and recipients cannot change before the write commits.
 */

export interface PeerReadUser {
  id: number;
  role: number;
  is_active: boolean;
  bot_type: number | null;
  full_name: string;
  delivery_email: string;
  avatar_source: string;
  avatar_version: number;
}

/** What the events need, for the users who come or go. */
interface PeerRead {
  users: PeerReadUser[];
  /** The channels they are subscribed to (archived ones only when asked). */
  channels: ChannelRow[];
  /** Active subscriptions to those channels: of active users, and of the users who come or go. */
  memberships: { user_id: number; stream_id: number }[];
  /** The organization's active users, ids and roles in id order. */
  active_ids: number[];
  active_roles: number[];
  /** The users with an event queue (no other can receive). */
  queue_owners: number[];
}

/** $1 realm, $2 the users who come or go, $3 whether archived channels count (a deactivation: yes). */
const PEER_READ = {
  name: 'user_management_peer_read',
  text: `
WITH mover AS (
  SELECT id, role, is_active, bot_type, full_name, delivery_email, avatar_source, avatar_version
  FROM users WHERE realm_id = $1 AND id = ANY ($2::integer[])
), channel AS (
  SELECT s.id, s.name, s.description, s.rendered_description, s.invite_only, s.is_web_public,
         s.history_public_to_subscribers, s.creator_id, floor(extract(epoch FROM s.date_created))::bigint AS date_created,
         s.deactivated, s.message_retention_days
  FROM streams s
  WHERE s.realm_id = $1 AND ($3::boolean OR NOT s.deactivated) AND s.id IN (
    SELECT sub.stream_id FROM subscriptions sub WHERE sub.user_id IN (SELECT id FROM mover) AND sub.active)
)
SELECT
  (SELECT coalesce(json_agg(m ORDER BY m.id), '[]') FROM mover m) AS users,
  (SELECT coalesce(json_agg(c ORDER BY c.id), '[]') FROM channel c) AS channels,
  (SELECT coalesce(json_agg(json_build_object('user_id', sub.user_id, 'stream_id', sub.stream_id) ORDER BY sub.stream_id, sub.user_id), '[]')
   FROM subscriptions sub JOIN users u ON u.id = sub.user_id
   WHERE sub.stream_id IN (SELECT id FROM channel) AND sub.active AND (u.is_active OR u.id IN (SELECT id FROM mover))) AS memberships,
  ARRAY(SELECT id FROM users WHERE realm_id = $1 AND is_active ORDER BY id) AS active_ids,
  ARRAY(SELECT role FROM users WHERE realm_id = $1 AND is_active ORDER BY id) AS active_roles,
  ARRAY(SELECT DISTINCT user_id FROM event_queues WHERE realm_id = $1) AS queue_owners`,
};

export async function readPeers(tx: StatementRunner, realmId: number, userIds: readonly number[], archived: boolean): Promise<PeerRead> {
  const [row] = await tx.run<PeerRead>(PEER_READ, [realmId, userIds, archived]);
  return row!;
}

/** The recipients: the organization's active users, the users who come or go among them (each with its role). */
function recipientsOf(read: PeerRead): Recipients {
  const roles = new Map(read.active_ids.map((id, index) => [id, read.active_roles[index]!]));
  for (const user of read.users) roles.set(user.id, user.role);
  return new Recipients([...roles.keys()], [...roles.values()], read.queue_owners);
}

/** One user's peer events, as realm events addressed to their recipients. */
function addressed(op: 'peer_add' | 'peer_remove', read: PeerRead, userId: number, gone: ReadonlySet<number>): AudienceEvent[] {
  const subscribersOf = new Map<number, number[]>();
  for (const row of read.memberships) {
    const list = subscribersOf.get(row.stream_id);
    if (list) list.push(row.user_id);
    else subscribersOf.set(row.stream_id, [row.user_id]);
  }
  const changes: PeerChange[] = read.channels
    .filter((channel) => subscribersOf.get(channel.id)?.includes(userId))
    .map((channel) => {
      const subscribers = subscribersOf.get(channel.id)!;
      // After a departure the user and those gone before are no longer subscribers; after an arrival the user is one.
      return {
        channel,
        changed: [userId],
        subscribersAfter: subscribers.filter((id) => (id === userId ? op === 'peer_add' : !gone.has(id))),
      };
    });
  return peerEvents(op, changes, recipientsOf(read))
    .filter(({ users }) => users.length > 0)
    .map(({ users, event }: { users: number[]; event: ApiEvent }) => ({ event, ...EVERY_ROLE, guests: 'all', users }));
}

/**
 * A deactivation's events, for each user who goes in order (bots, then their owner): `before` (its
 * profile's deletion, as Zulip's do_deactivate_user), its peer_remove events, then `after`.
 */
export function departureEvents(
  read: PeerRead,
  order: readonly { id: number; before: readonly AudienceEvent[]; after: readonly AudienceEvent[] }[],
): AudienceEvent[] {
  const gone = new Set<number>();
  return order.flatMap(({ id, before, after }) => {
    gone.add(id);
    return [...before, ...addressed('peer_remove', read, id, gone), ...after];
  });
}

/**
 * The realm_user/remove of a user deactivated where guests are restricted (Zulip's
 * send_events_for_user_deactivation): to the guests with a queue sharing a channel with it, archived included.
 */
export function accessLossOnDeparture(read: PeerRead, userId: number): AudienceEvent[] {
  const channels = new Set(read.memberships.filter((row) => row.user_id === userId).map((row) => row.stream_id));
  const sharing = new Set(
    read.memberships.filter((row) => row.user_id !== userId && channels.has(row.stream_id)).map((row) => row.user_id),
  );
  const recipients = recipientsOf(read);
  const guests = recipients.all.filter((id) => sharing.has(id) && recipients.isGuest(id));
  return guests.length === 0 ? [] : [{ event: inaccessibleUserRemoval(userId), ...EVERY_ROLE, guests: 'all', users: guests }];
}

/** A reactivation's peer_add events, which follow its realm_user events. */
export const arrivalEvents = (read: PeerRead, userId: number): AudienceEvent[] => addressed('peer_add', read, userId, new Set());
