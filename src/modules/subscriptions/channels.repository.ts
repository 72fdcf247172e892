import { type ExpressionBuilder, sql } from 'kysely';
import type { Database } from '../../db/database.js';
import type { DB } from '../../db/types.js';
import type { Caller } from '../../http/auth.js';
import { isIdInRange, ROLES } from '../../zulip.js';
import { ACTIVE_SUBSCRIBERS, CHANNEL_COLUMNS } from './subscriptions.repository.js';
import { CHANNEL_KEYS, type ChannelColumns, objectBuilder } from './subscriptions.serializers.js';

/**
 * The channel reads (GET /streams, GET /streams/{id}, GET /get_stream_id, and the channel of the
 * membership reads): Zulip's get_streams_for_user and access_stream_by_id / access_stream_by_name,
 * one query each.
 */

export type ChannelCaller = Pick<Caller, 'id' | 'realmId' | 'role'>;

/**
 * Where listed channels come from (Zulip's get_streams_for_user): those the caller has metadata or
 * content access to, is subscribed to, public ones, web-public ones, its owner's subscriptions (bots).
 */
export type ChannelSource = 'metadata' | 'content' | 'subscribed' | 'public' | 'webPublic' | 'ownerSubscribed';

/** Zulip's get_streams_for_user: include_all and include_can_access_content replace the sources they cover. */
export function channelSources(flags: Record<`include_${string}`, boolean>, caller: ChannelCaller): ChannelSource[] {
  if (flags.include_all || flags.include_all_active) return ['metadata'];
  const content = flags.include_can_access_content;
  const sources: [boolean | undefined, ChannelSource][] = [
    [content, 'content'],
    [!content && flags.include_subscribed, 'subscribed'],
    // Guests cannot access public channels as such (Zulip's can_access_public_streams).
    [!content && flags.include_public && caller.role !== ROLES.guest, 'public'],
    [!content && flags.include_web_public, 'webPublic'],
    // Bots only: a human has no owner.
    [flags.include_owner_subscribed, 'ownerSubscribed'],
  ];
  return sources.filter(([wanted]) => wanted).map(([, from]) => from);
}

export interface ChannelQuery {
  sources: readonly ChannelSource[];
  excludeArchived: boolean;
  /** Beyond the id range: no channel. */
  streamId?: number;
  /** Compared ignoring case (Zulip's name__iexact); already stripped. */
  name?: string;
}

type Scope = ExpressionBuilder<DB & { s: DB['streams'] } & { mine: DB['subscriptions'] }, 's' | 'mine'>;

/**
 * Zulip's user_has_content_access and user_has_metadata_access without user groups: web-public,
 * subscribed, or for a non-guest public; metadata access adds every channel for an administrator and
 * a private channel for its creator (Zulip's default can_administer_channel_group).
 */
function access(eb: Scope, caller: ChannelCaller, kind: 'metadata' | 'content') {
  const granted = [eb('s.is_web_public', '=', true), eb('mine.user_id', 'is not', null)];
  if (caller.role === ROLES.guest) return eb.or(granted);
  if (kind === 'metadata' && caller.role <= ROLES.admin) return sql<boolean>`true`;
  granted.push(eb('s.invite_only', '=', false));
  if (kind === 'metadata') granted.push(eb('s.creator_id', '=', caller.id));
  return eb.or(granted);
}

function source(eb: Scope, caller: ChannelCaller, from: ChannelSource) {
  switch (from) {
    case 'metadata':
    case 'content':
      return access(eb, caller, from);
    case 'subscribed':
      return eb('mine.user_id', 'is not', null);
    case 'public':
      return eb('s.invite_only', '=', false);
    case 'webPublic':
      // As Zulip's get_web_public_streams_queryset.
      return eb.and([
        eb('s.is_web_public', '=', true),
        eb('s.invite_only', '=', false),
        eb('s.history_public_to_subscribers', '=', true),
        eb('s.deactivated', '=', false),
      ]);
    case 'ownerSubscribed':
      return eb.exists(
        eb
          .selectFrom('subscriptions as owned')
          .innerJoin('users as bot', 'bot.bot_owner_id', 'owned.user_id')
          .select('owned.user_id')
          .where('bot.id', '=', caller.id)
          .whereRef('owned.stream_id', '=', 's.id')
          .where('owned.active', '=', true),
      );
  }
}

/** The caller's organization's channels from any of `query.sources`, sorted by name in code-point order. */
export function selectChannels(db: Database, caller: ChannelCaller, query: ChannelQuery) {
  return db
    .selectFrom('streams as s')
    .leftJoin('subscriptions as mine', (join) =>
      join.onRef('mine.stream_id', '=', 's.id').on('mine.user_id', '=', caller.id).on('mine.active', '=', true),
    )
    .select([
      ...CHANNEL_COLUMNS,
      's.deactivated',
      // Zulip's average weekly traffic, unknown before 7 days; no messages here, so 0 afterwards.
      sql<number | null>`CASE WHEN s.date_created <= now() - interval '7 days' THEN 0 END`.as('stream_weekly_traffic'),
      sql<number>`(SELECT count(*)::integer ${ACTIVE_SUBSCRIBERS})`.as('subscriber_count'),
    ])
    .where('s.realm_id', '=', caller.realmId)
    .$if(query.excludeArchived, (qb) => qb.where('s.deactivated', '=', false))
    .$if(query.streamId !== undefined, (qb) => qb.where('s.id', '=', isIdInRange(query.streamId!) ? query.streamId! : 0))
    .$if(query.name !== undefined, (qb) => qb.where(sql`lower(s.name)`, '=', sql`lower(${query.name!})`))
    .where((eb) => eb.or(query.sources.map((from) => source(eb, caller, from))))
    .orderBy(sql`s.name COLLATE "C"`);
}

type ChannelRow = ChannelColumns & { deactivated: boolean; stream_weekly_traffic: number | null; subscriber_count: number };

/**
 * Zulip's stream dictionary (stream_to_dict) in its key order, with Zulip's values for what this
 * server has no data of (no messages, folders, topic policies; everyone may post). Its group settings
 * (can_*_group) and is_recently_active are left out, as the subscription object leaves them out.
 */
export const channelObject = objectBuilder<ChannelRow>({
  is_archived: (row) => row.deactivated,
  creator_id: CHANNEL_KEYS.creator_id,
  date_created: CHANNEL_KEYS.date_created,
  description: CHANNEL_KEYS.description,
  first_message_id: CHANNEL_KEYS.first_message_id,
  folder_id: () => null,
  history_public_to_subscribers: CHANNEL_KEYS.history_public_to_subscribers,
  invite_only: CHANNEL_KEYS.invite_only,
  is_web_public: CHANNEL_KEYS.is_web_public,
  message_retention_days: CHANNEL_KEYS.message_retention_days,
  name: CHANNEL_KEYS.name,
  rendered_description: CHANNEL_KEYS.rendered_description,
  stream_id: CHANNEL_KEYS.stream_id,
  stream_post_policy: () => 1,
  is_announcement_only: () => false,
  stream_weekly_traffic: (row) => row.stream_weekly_traffic,
  subscriber_count: (row) => row.subscriber_count,
  topics_policy: () => 'inherit',
});
