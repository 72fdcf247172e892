import { sql } from 'kysely';
import type { Database } from '../../db/database.js';
import type { Caller } from '../../http/auth.js';
import { badRequest } from '../../http/errors.js';
import { isIdInRange } from '../../zulip.js';
import { canAccessUser, isRestrictedViewer } from '../users/users.access.js';
import { selectChannels } from './channels.repository.js';
import { SUBSCRIBER_IDS } from './subscriptions.repository.js';

/**
 * GET /users/{user_id}/subscriptions/{stream_id} and GET /streams/{stream_id}/members
 * (docs/management-api.md, "Subscriptions"): Zulip's access_user_by_id and access_stream_by_id
 * (require_content_access=False, require_active_channel=False), one query each.
 */

type ReadCaller = Pick<Caller, 'id' | 'realmId' | 'role' | 'realmSubdomain' | 'realmCanAccessAllUsersGroup'>;

const invalidChannel = () => badRequest('Invalid channel ID');

/** The channel if the caller has metadata access to it; archived channels are served (feature level 480). */
const accessibleChannel = (db: Database, caller: ReadCaller, streamId: number) =>
  selectChannels(db, caller, { sources: ['metadata'], excludeArchived: false, streamId });

/** GET /streams/{stream_id}/members: the active subscribers' ids, ascending. */
export async function channelMembers(db: Database, caller: ReadCaller, streamId: number): Promise<number[]> {
  const channel = await accessibleChannel(db, caller, streamId).select(SUBSCRIBER_IDS.as('subscribers')).executeTakeFirst();
  if (!channel) throw invalidChannel();
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
    accessibleChannel(db, caller, streamId)
      .select((eb) =>
        eb
          .exists(
            eb
              .selectFrom('subscriptions')
              .select('user_id')
              .whereRef('stream_id', '=', 's.id')
              .where('user_id', '=', isIdInRange(userId) ? userId : 0)
              .where('active', '=', true),
          )
          .as('user_subscribed'),
      )
      .executeTakeFirst(),
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
  if (!channel) throw invalidChannel();
  return channel.user_subscribed === true;
}
