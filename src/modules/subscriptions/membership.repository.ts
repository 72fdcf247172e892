import { type Selectable, sql } from 'kysely';
import type { Streams, Users } from '../../db/types.js';
import { preparedStatement, reusableStatement, type StatementRunner } from '../../db/reusable-statement.js';
import { ROLES } from '../../zulip.js';
import { USER_COLUMNS, type UserColumn } from '../users/users.serializers.js';
import { SETTING_COLUMNS, type StoredSettings } from './settings.js';
import { MAX_AUDIT_ROWS } from './subscriptions.repository.js';
import { MULTI_USER_EVENT_ARGUMENTS, type MultiUserEventArgs, withEventsForUsers } from '../event-log/event-log.repository.js';

/**
 * The statements of subscribing and unsubscribing (docs/management-api.md, "Subscriptions"): one
 * read of everything the checks and the events need, then one write of the channels, the
 * subscriptions and the events, whatever the number of channels and users.
 */

/** A channel named by the request, as the read returns it. */
export type ChannelRow = Omit<Selectable<Streams>, 'realm_id' | 'date_created'> & {
  /** Unix seconds. */
  date_created: number;
};

/** A user named by `principals` (or the caller), in the caller's organization. */
export type TargetRow = Pick<
  Selectable<Users>,
  'id' | 'delivery_email' | 'email_address_visibility' | 'bot_type' | 'bot_owner_id' | 'role' | 'is_active'
>;

/** A target's subscription row on a named channel, active or not, with its settings (settings.ts). */
export interface MembershipRow extends StoredSettings {
  user_id: number;
  stream_id: number;
  active: boolean;
  /** Whether the target is active. */
  user_active: boolean;
}

export interface MembershipRead {
  /** Per requested name (in order, 1-based `ord`), the channel it names, if any. */
  named: { ord: number; stream_id: number | null }[];
  channels: ChannelRow[];
  targets: TargetRow[];
  memberships: MembershipRow[];
  /** Each named channel's active subscribers that are active users, ascending (channels without any are left out). */
  subscribers: { stream_id: number; user_ids: number[] }[];
  /** The colours of each target's active subscriptions (for the palette). */
  used_colors: { user_id: number; colors: string[] }[];
  /** The active users the events can concern, in id order: those with a queue, the targets, the channels' creators and subscribers. */
  active_ids: number[];
  active_roles: number[];
  /** The users with an event queue; register adds queues under the membership lock, shared, so none is added meanwhile. */
  queue_owners: number[];
  /** Ids for the channels to create (at most one per name that names none). */
  new_ids: number[];
  /** The organization's subdomain (for the dummy addresses of the user objects of realm_user/add). */
  realm_subdomain: string;
  /** Whether the organization restricts guests' access to users (can_access_all_users_group = members, docs/api.md §2.4). */
  restricted: boolean;
  /**
   * Restricted organizations only: per target, the users among the named channels' subscribers and
   * the targets (guests, or any for a guest target) who share with it a channel that is NOT named.
   */
  shared_elsewhere: { target_id: number; other_ids: number[] }[];
  /** Restricted organizations, when asked ($6): the targets, and the channels' subscribers when a target is a guest. */
  people: PersonRow[];
}

/** A user as realm_user/add describes them: the user object's columns (users.serializers.ts) but realm_id. */
export type PersonRow = { [C in Exclude<UserColumn, 'realm_id' | 'date_joined'>]: Selectable<Users>[C] } & {
  /** ISO timestamp (JSON). */
  date_joined: string;
};
const PERSON_COLUMNS = USER_COLUMNS.filter((column) => column !== 'realm_id').map((column) => `u.${column}`);

/**
 * Parameters: $1 realm, $2 the requested names (text[]), $3 target ids (integer[]), $4 target
 * delivery emails, lowercased (text[]), $5 whether ids for new channels are wanted, $6 whether
 * `people` is wanted (a subscribe).
 */
const READ_TEXT = `
WITH requested AS (
  SELECT n.ord::integer AS ord, n.name FROM unnest($2::text[]) WITH ORDINALITY AS n(name, ord)
), named AS (
  SELECT r.ord, s.id AS stream_id FROM requested r LEFT JOIN streams s ON s.realm_id = $1 AND lower(s.name) = lower(r.name)
), channel AS (
  SELECT s.id, s.name, s.description, s.rendered_description, s.invite_only, s.is_web_public,
         s.history_public_to_subscribers, s.creator_id, floor(extract(epoch FROM s.date_created))::bigint AS date_created,
         s.deactivated, s.message_retention_days
  FROM streams s WHERE s.id IN (SELECT stream_id FROM named)
), target AS (
  SELECT u.id, u.delivery_email, u.email_address_visibility, u.bot_type, u.bot_owner_id, u.role, u.is_active
  FROM users u WHERE u.realm_id = $1 AND (u.id = ANY ($3::integer[]) OR lower(u.delivery_email) = ANY ($4::text[]))
), concerned AS MATERIALIZED (
  -- The active users the events can concern: those with a queue (the only ones events are stored
  -- for), the targets, and the channels' creators and subscribers (whose roles decide who sees a
  -- channel); not the whole organization.
  SELECT u.id, u.role FROM users u
  WHERE u.is_active AND u.realm_id = $1 AND u.id IN (
    SELECT q.user_id FROM event_queues q WHERE q.realm_id = $1
    UNION SELECT id FROM target
    UNION SELECT creator_id FROM channel WHERE creator_id IS NOT NULL
    UNION SELECT sub.user_id FROM subscriptions sub WHERE sub.stream_id IN (SELECT id FROM channel) AND sub.active)
), realm AS (
  SELECT r.subdomain, r.can_access_all_users_group = 'members' AS restricted FROM realms r WHERE r.id = $1
), relevant AS MATERIALIZED (
  -- Restricted organizations only: the users whose access to one another the change can alter.
  SELECT id, role FROM target WHERE (SELECT restricted FROM realm)
  UNION SELECT u.id, u.role FROM subscriptions sub JOIN users u ON u.id = sub.user_id
  WHERE (SELECT restricted FROM realm) AND sub.stream_id IN (SELECT id FROM channel) AND sub.active AND u.is_active
), shared_elsewhere AS (
  -- Only pairs with a guest matter: non-guests see everyone. Two halves, so that a non-guest
  -- target's channels are only ever joined with the few guests' subscriptions, never with every
  -- member of a large channel. The restricted condition is a one-time filter: nothing is joined in
  -- other organizations.
  SELECT DISTINCT target_id, other_id FROM (
    -- A guest target: every relevant user it shares a channel with outside the named ones.
    SELECT mine.user_id AS target_id, theirs.user_id AS other_id
    FROM target t
    JOIN subscriptions mine ON mine.user_id = t.id AND mine.active AND mine.stream_id NOT IN (SELECT id FROM channel)
    JOIN subscriptions theirs ON theirs.stream_id = mine.stream_id AND theirs.active AND theirs.user_id <> t.id
    JOIN relevant o ON o.id = theirs.user_id
    WHERE (SELECT restricted FROM realm) AND t.role = ${ROLES.guest}
    UNION ALL
    -- Any target: the relevant guests it shares a channel with outside the named ones.
    SELECT t.id, g.id
    FROM relevant g
    JOIN subscriptions theirs ON theirs.user_id = g.id AND theirs.active AND theirs.stream_id NOT IN (SELECT id FROM channel)
    JOIN target t ON t.id <> g.id
    JOIN subscriptions mine ON mine.user_id = t.id AND mine.stream_id = theirs.stream_id AND mine.active
    WHERE (SELECT restricted FROM realm) AND g.role = ${ROLES.guest}
  ) pairs
)
SELECT
  (SELECT coalesce(json_agg(n ORDER BY n.ord), '[]') FROM named n) AS named,
  (SELECT coalesce(json_agg(c ORDER BY c.id), '[]') FROM channel c) AS channels,
  (SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM target t) AS targets,
  (SELECT coalesce(json_agg(json_build_object(
      'user_id', sub.user_id, 'stream_id', sub.stream_id, 'active', sub.active, 'user_active', t.is_active,
      ${SETTING_COLUMNS.map((column) => `'${column}', sub.${column}`).join(', ')}) ORDER BY sub.stream_id, sub.user_id), '[]')
   FROM subscriptions sub JOIN target t ON t.id = sub.user_id
   WHERE sub.stream_id IN (SELECT id FROM channel)) AS memberships,
  (SELECT coalesce(json_agg(json_build_object('stream_id', g.stream_id, 'user_ids', g.user_ids)), '[]') FROM (
     SELECT sub.stream_id, array_agg(sub.user_id ORDER BY sub.user_id) AS user_ids
     FROM subscriptions sub JOIN users u ON u.id = sub.user_id
     WHERE sub.stream_id IN (SELECT id FROM channel) AND sub.active AND u.is_active GROUP BY sub.stream_id) g) AS subscribers,
  (SELECT coalesce(json_agg(json_build_object('user_id', g.user_id, 'colors', g.colors)), '[]') FROM (
     SELECT sub.user_id, array_agg(sub.color) AS colors FROM subscriptions sub
     WHERE sub.user_id IN (SELECT id FROM target) AND sub.active GROUP BY sub.user_id) g) AS used_colors,
  ARRAY(SELECT id FROM concerned ORDER BY id) AS active_ids,
  ARRAY(SELECT role FROM concerned ORDER BY id) AS active_roles,
  ARRAY(SELECT DISTINCT user_id FROM event_queues WHERE realm_id = $1) AS queue_owners,
  ARRAY(SELECT nextval(pg_get_serial_sequence('streams', 'id'))::integer FROM generate_series(1,
    CASE WHEN $5::boolean THEN (SELECT count(*) FROM named WHERE stream_id IS NULL)::integer ELSE 0 END)) AS new_ids,
  (SELECT subdomain FROM realm) AS realm_subdomain,
  coalesce((SELECT restricted FROM realm), false) AS restricted,
  (SELECT coalesce(json_agg(json_build_object('target_id', g.target_id, 'other_ids', g.other_ids)), '[]') FROM (
     SELECT target_id, array_agg(other_id ORDER BY other_id) AS other_ids FROM shared_elsewhere GROUP BY target_id) g) AS shared_elsewhere,
  (SELECT coalesce(json_agg(p ORDER BY p.id), '[]') FROM (
     SELECT ${PERSON_COLUMNS.join(', ')} FROM users u
     WHERE $6::boolean AND u.id IN (
       SELECT id FROM relevant r WHERE r.id IN (SELECT id FROM target) OR EXISTS (SELECT 1 FROM target WHERE role = ${ROLES.guest}))) p) AS people`;

export const MEMBERSHIP_READ = preparedStatement(READ_TEXT);

export async function readMembership(
  tx: StatementRunner,
  args: { realmId: number; names: string[]; targetIds: number[]; targetEmails: string[]; wantNewIds: boolean; wantPeople?: boolean },
): Promise<MembershipRead> {
  const [row] = await tx.run<MembershipRead>(MEMBERSHIP_READ, [
    args.realmId,
    args.names,
    args.targetIds,
    args.targetEmails,
    args.wantNewIds,
    args.wantPeople === true,
  ]);
  return row!;
}

interface MembershipWriteArgs extends MultiUserEventArgs {
  /** The channels to create (ChannelRow objects, the ids the read reserved, date_created ISO), as JSON. */
  channels: string;
  /** `{user_id, stream_id, color}` objects to subscribe, as JSON (an inactive row is reactivated and keeps its colour). */
  added: string;
  /** `{user_id, stream_id}` objects to unsubscribe, as JSON. */
  removed: string;
  /** Who made the change, for the audit rows; null: an operator (the admin command line). */
  actingUserId: number | null;
}

/** Zulip's RealmAuditLog event types of a membership change (migration 0009). */
const SUBSCRIPTION_CREATED = 301;
const SUBSCRIPTION_ACTIVATED = 302;
const SUBSCRIPTION_DEACTIVATED = 303;

/**
 * Creates the channels, subscribes and unsubscribes, writes their audit rows and appends the events:
 * one statement, after the caller's checks under the membership lock, so nothing here can fail.
 * The audit rows are Zulip's (bulk_add_subs_to_db_with_logging, bulk_remove_subscriptions):
 * SUBSCRIPTION_CREATED per subscription added, or ACTIVATED when its row existed before; then
 * DEACTIVATED per one removed; in request order, with the statement's time. Beyond MAX_AUDIT_ROWS
 * pairs, one row holds them all, as for settings (subscriptions.repository.ts).
 */
export const writeMembershipStatement = reusableStatement<MembershipWriteArgs, { channels: number; added: number; removed: number }>(
  [...MULTI_USER_EVENT_ARGUMENTS, 'channels', 'added', 'removed', 'actingUserId'],
  (db, args) =>
    withEventsForUsers(db, args)
      .with('new_channel', (db) =>
        db
          .insertInto('streams')
          .columns([
            'id',
            'realm_id',
            'name',
            'description',
            'rendered_description',
            'invite_only',
            'is_web_public',
            'history_public_to_subscribers',
            'creator_id',
            'date_created',
          ])
          .expression(
            () => sql`(
            SELECT c.id, ${args.realmId}::integer, c.name, c.description, c.rendered_description, c.invite_only, c.is_web_public,
                   c.history_public_to_subscribers, c.creator_id, c.date_created
            FROM json_to_recordset(${args.channels}::json) AS c(
              id integer, name text, description text, rendered_description text, invite_only boolean, is_web_public boolean,
              history_public_to_subscribers boolean, creator_id integer, date_created timestamptz))`,
          )
          .returning('id'),
      )
      .with('added_subscription', (db) =>
        db
          .insertInto('subscriptions')
          .columns(['realm_id', 'user_id', 'stream_id', 'color'])
          .expression(
            () => sql`(
            SELECT ${args.realmId}::integer, a.user_id, a.stream_id, a.color
            FROM json_to_recordset(${args.added}::json) AS a(user_id integer, stream_id integer, color text))`,
          )
          .onConflict((oc) => oc.columns(['user_id', 'stream_id']).doUpdateSet({ active: true }))
          .returning('user_id'),
      )
      .with('removed_subscription', (db) =>
        db
          .updateTable('subscriptions as sub')
          .set({ active: false })
          .where(
            sql<boolean>`(sub.user_id, sub.stream_id) IN (
            SELECT r.user_id, r.stream_id FROM json_to_recordset(${args.removed}::json) AS r(user_id integer, stream_id integer))`,
          )
          .where('sub.realm_id', '=', args.realmId)
          .returning('sub.user_id'),
      )
      // Each (user, channel) changed; EXISTS sees the subscriptions as before the statement (as every CTE does).
      .with(
        'membership_change(user_id, stream_id, ord, event_type)',
        () => sql<{ user_id: number; stream_id: number; ord: number; event_type: number }>`(
        SELECT a.user_id, a.stream_id, a.ord,
               CASE WHEN EXISTS (SELECT FROM subscriptions sub WHERE sub.user_id = a.user_id AND sub.stream_id = a.stream_id)
                    THEN ${sql.lit(SUBSCRIPTION_ACTIVATED)} ELSE ${sql.lit(SUBSCRIPTION_CREATED)} END
        FROM ROWS FROM (json_to_recordset(${args.added}::json) AS (user_id integer, stream_id integer, color text))
             WITH ORDINALITY AS a(user_id, stream_id, color, ord)
        UNION ALL
        SELECT r.user_id, r.stream_id, r.ord, ${sql.lit(SUBSCRIPTION_DEACTIVATED)}
        FROM ROWS FROM (json_to_recordset(${args.removed}::json) AS (user_id integer, stream_id integer))
             WITH ORDINALITY AS r(user_id, stream_id, ord))`,
      )
      .with('audited', (db) =>
        db
          .insertInto('subscription_audit_log')
          .columns(['realm_id', 'acting_user_id', 'modified_user_id', 'stream_id', 'event_type', 'created_at'])
          .expression(
            () => sql`(
            SELECT ${args.realmId}::integer, ${args.actingUserId}::integer, c.user_id, c.stream_id, c.event_type, statement_timestamp()
            FROM membership_change c
            WHERE (SELECT count(*) FROM membership_change) <= ${sql.lit(MAX_AUDIT_ROWS)}
            ORDER BY c.event_type, c.ord)`,
          ),
      )
      // More pairs: one row (no user, no channel; the first pair's event type) listing [user_id, stream_id, event_type] of each.
      .with('audited_together', (db) =>
        db
          .insertInto('subscription_audit_log')
          .columns(['realm_id', 'acting_user_id', 'event_type', 'new_value', 'created_at'])
          .expression(
            () => sql`(
            SELECT ${args.realmId}::integer, ${args.actingUserId}::integer, min(c.event_type),
                   jsonb_agg(jsonb_build_array(c.user_id, c.stream_id, c.event_type) ORDER BY c.event_type, c.ord), statement_timestamp()
            FROM membership_change c
            HAVING count(*) > ${sql.lit(MAX_AUDIT_ROWS)})`,
          ),
      )
      .selectNoFrom((eb) => [
        eb
          .selectFrom('new_channel')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .as('channels'),
        eb
          .selectFrom('added_subscription')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .as('added'),
        eb
          .selectFrom('removed_subscription')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .as('removed'),
      ]),
);
