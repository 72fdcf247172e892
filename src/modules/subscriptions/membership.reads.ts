import { sql } from 'kysely';
import type { Database } from '../../db/database.js';
import type { Caller } from '../../http/auth.js';
import { badRequest } from '../../http/errors.js';
import { isIdInRange, ROLES } from '../../zulip.js';
import { canAccessUser, isRestrictedViewer } from '../users/users.access.js';

/**
 * GET /users/{user_id}/subscriptions/{stream_id} and GET /streams/{stream_id}/members
 * (docs/management-api.md, "Subscriptions"): Zulip's access_user_by_id and access_stream_by_id
 * (require_content_access=False), one statement each.
 */

type ReadCaller = Pick<Caller, 'id' | 'realmId' | 'role' | 'realmSubdomain' | 'realmCanAccessAllUsersGroup'>;

const invalidChannel = () => badRequest('Invalid channel ID');

/** The channel with what its access check needs, its active subscribers (active users, ascending) and whether `userId` is one. */
function selectChannel(db: Database, caller: ReadCaller, streamId: number, userId: number) {
  return db
    .selectFrom('streams as s')
    .select((eb) => [
      's.invite_only',
      's.is_web_public',
      's.creator_id',
      eb
        .exists(
          eb
            .selectFrom('subscriptions')
            .select('user_id')
            .whereRef('stream_id', '=', 's.id')
            .where('user_id', '=', caller.id)
            .where('active', '=', true),
        )
        .as('caller_subscribed'),
      eb
        .exists(
          eb
            .selectFrom('subscriptions')
            .select('user_id')
            .whereRef('stream_id', '=', 's.id')
            .where('user_id', '=', userId)
            .where('active', '=', true),
        )
        .as('user_subscribed'),
      sql<number[]>`ARRAY(SELECT sub.user_id FROM subscriptions sub JOIN users u ON u.id = sub.user_id
        WHERE sub.stream_id = s.id AND sub.active AND u.is_active ORDER BY sub.user_id)`.as('subscribers'),
    ])
    .where('s.realm_id', '=', caller.realmId)
    .where('s.id', '=', isIdInRange(streamId) ? streamId : 0);
}

type ChannelAccessRow = Awaited<ReturnType<ReturnType<typeof selectChannel>['executeTakeFirst']>>;

/**
 * Zulip's access_stream_by_id without content access: the caller needs content or metadata
 * access: web-public, subscribed, public for a non-guest, or private for an administrator or the
 * channel's creator (its default can_administer_channel_group). Archived channels are served
 * (feature level 480).
 */
function checkChannelAccess(caller: ReadCaller, channel: ChannelAccessRow) {
  if (!channel) throw invalidChannel();
  if (channel.is_web_public || channel.caller_subscribed) return channel;
  if (caller.role === ROLES.guest) throw invalidChannel();
  if (!channel.invite_only || caller.role <= ROLES.admin || channel.creator_id === caller.id) return channel;
  throw invalidChannel();
}

/** GET /streams/{stream_id}/members: the active subscribers' ids, ascending. */
export async function channelMembers(db: Database, caller: ReadCaller, streamId: number): Promise<number[]> {
  const channel = checkChannelAccess(caller, await selectChannel(db, caller, streamId, 0).executeTakeFirst());
  return channel.subscribers;
}

/**
 * GET /users/{user_id}/subscriptions/{stream_id}: the user first (`No such user`, `User is
 * deactivated`, `Insufficient permission` for a restricted guest; bots are served since feature
 * level 458), then the channel.
 */
export async function isSubscribed(db: Database, caller: ReadCaller, userId: number, streamId: number): Promise<boolean> {
  const restricted = isRestrictedViewer(caller);
  const [user, channel] = await Promise.all([
    db
      .selectFrom('users as u')
      .select((eb) => [
        'u.id',
        'u.is_active',
        'u.bot_type',
        'u.email_address_visibility',
        restricted
          ? eb
              .exists(
                eb
                  .selectFrom('subscriptions as mine')
                  .innerJoin('subscriptions as theirs', 'theirs.stream_id', 'mine.stream_id')
                  .select('mine.user_id')
                  .where('mine.user_id', '=', caller.id)
                  .where('mine.active', '=', true)
                  .whereRef('theirs.user_id', '=', 'u.id')
                  .where('theirs.active', '=', true),
              )
              .as('shares_channel')
          : sql<boolean>`false`.as('shares_channel'),
      ])
      .where('u.realm_id', '=', caller.realmId)
      .where('u.id', '=', isIdInRange(userId) ? userId : 0)
      .executeTakeFirst(),
    selectChannel(db, caller, streamId, isIdInRange(userId) ? userId : 0).executeTakeFirst(),
  ]);
  if (!user) throw badRequest('No such user');
  if (!user.is_active) throw badRequest('User is deactivated');
  const target = {
    id: user.id,
    isActive: user.is_active,
    botType: user.bot_type,
    emailAddressVisibility: user.email_address_visibility,
    sharesActiveChannelWithViewer: user.shares_channel === true,
  };
  if (!canAccessUser(caller, target)) throw badRequest('Insufficient permission');
  return checkChannelAccess(caller, channel).user_subscribed === true;
}
