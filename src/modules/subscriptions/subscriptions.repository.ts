import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/types.js';
import type { BooleanColumn, SettingColumn } from './subscriptions.validation.js';

/** Kysely<DB> or a Transaction<DB> (which extends it). */
type Executor = Kysely<DB>;

/** The smallest id range of PostgreSQL `integer`; other ids must not reach the database. */
export const MAX_ID = 2_147_483_647;
export const isIdInRange = (id: number): boolean => Number.isSafeInteger(id) && id >= 1 && id <= MAX_ID;

export interface ChannelSubscriptionState {
  streamId: number;
  inviteOnly: boolean;
  isWebPublic: boolean;
  /** The caller has an active subscription. */
  subscribed: boolean;
  /** The caller's current settings; null when the caller has no subscription row. */
  settings: Record<SettingColumn, string | boolean | null> | null;
}

/**
 * The caller's view of the given channels, in one query: the channels of the caller's
 * organization that are not archived, with the caller's subscription state and settings.
 * Channels absent from the result do not exist for the caller.
 */
export async function findChannelSubscriptionStates(
  db: Executor,
  caller: { id: number; realmId: number },
  streamIds: number[],
): Promise<Map<number, ChannelSubscriptionState>> {
  const rows = await db
    .selectFrom('streams as s')
    .leftJoin('subscriptions as sub', (join) => join.onRef('sub.stream_id', '=', 's.id').on('sub.user_id', '=', caller.id))
    .select([
      's.id', 's.invite_only', 's.is_web_public', 'sub.active', 'sub.color', 'sub.is_muted', 'sub.pin_to_top',
      'sub.desktop_notifications', 'sub.audible_notifications', 'sub.push_notifications', 'sub.email_notifications',
      'sub.wildcard_mentions_notify',
    ])
    .where('s.realm_id', '=', caller.realmId)
    .where('s.deactivated', '=', false)
    // An array literal in one text parameter: node-postgres would escape each element of a JS array
    // (see appendEvents). Exact because callers pass integers in range (isIdInRange).
    .where(sql<boolean>`s.id = ANY(${`{${streamIds.join(',')}}`}::int[])`)
    .execute();
  return new Map(
    rows.map((row) => [
      row.id,
      {
        streamId: row.id,
        inviteOnly: row.invite_only,
        isWebPublic: row.is_web_public,
        subscribed: row.active === true,
        settings: row.active === null ? null : {
          color: row.color,
          is_muted: row.is_muted,
          pin_to_top: row.pin_to_top,
          desktop_notifications: row.desktop_notifications,
          audible_notifications: row.audible_notifications,
          push_notifications: row.push_notifications,
          email_notifications: row.email_notifications,
          wildcard_mentions_notify: row.wildcard_mentions_notify,
        },
      },
    ]),
  );
}

/** Final values for one subscription; undefined columns stay as they are. */
export type SettingValues = { color?: string } & { [column in BooleanColumn]?: boolean };

/** Writes the final settings of every changed subscription of the user in one statement. */
export async function updateSubscriptionSettings(
  db: Executor,
  caller: { id: number; realmId: number },
  updates: Map<number, SettingValues>,
): Promise<void> {
  if (updates.size === 0) return;
  // One JSON parameter (absent keys are NULL): cheaper to send than nine arrays (see appendEvents).
  const rows = [...updates].map(([streamId, values]) => ({ stream_id: streamId, ...values }));
  // NULL means "not changed": the API can never set a setting back to NULL.
  await sql`
    UPDATE subscriptions AS sub SET
      color = COALESCE(v.color, sub.color),
      is_muted = COALESCE(v.is_muted, sub.is_muted),
      pin_to_top = COALESCE(v.pin_to_top, sub.pin_to_top),
      desktop_notifications = COALESCE(v.desktop_notifications, sub.desktop_notifications),
      audible_notifications = COALESCE(v.audible_notifications, sub.audible_notifications),
      push_notifications = COALESCE(v.push_notifications, sub.push_notifications),
      email_notifications = COALESCE(v.email_notifications, sub.email_notifications),
      wildcard_mentions_notify = COALESCE(v.wildcard_mentions_notify, sub.wildcard_mentions_notify)
    FROM json_to_recordset(${JSON.stringify(rows)}::json) AS v(
      stream_id int, color text, is_muted boolean, pin_to_top boolean, desktop_notifications boolean,
      audible_notifications boolean, push_notifications boolean, email_notifications boolean,
      wildcard_mentions_notify boolean)
    WHERE sub.user_id = ${caller.id} AND sub.realm_id = ${caller.realmId} AND sub.stream_id = v.stream_id
  `.execute(db);
}

export interface AuditEntry {
  streamId: number;
  /** The stored setting name (is_muted for in_home_view). */
  property: SettingColumn;
  oldValue: string | boolean | null;
  newValue: string | boolean;
}

/** Appends one audit row per applied change, in order, in one statement. */
export async function insertSubscriptionAuditRows(
  db: Executor,
  caller: { id: number; realmId: number },
  entries: AuditEntry[],
): Promise<void> {
  if (entries.length === 0) return;
  await sql`
    INSERT INTO subscription_audit_log (realm_id, acting_user_id, stream_id, property, old_value, new_value)
    SELECT ${caller.realmId}, ${caller.id}, (a.entry->>0)::int, a.entry->>1, a.entry->2, a.entry->3
    FROM jsonb_array_elements(${JSON.stringify(entries.map((entry) => [entry.streamId, entry.property, entry.oldValue, entry.newValue]))}::jsonb)
      WITH ORDINALITY AS a(entry, ord)
    ORDER BY a.ord
  `.execute(db);
}

/** Deletes up to `limit` audit rows older than `days` days; returns how many it deleted. */
export async function deleteOldAuditRows(db: Executor, days: number, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('subscription_audit_log')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('subscription_audit_log')
        .select('id')
        .where('created_at', '<', sql<Date>`now() - make_interval(days => ${days})`)
        .limit(limit),
    )
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}

/**
 * The user's active subscriptions to non-archived channels, sorted by name in code-point order,
 * optionally with each channel's active subscribers (active users), all in one query.
 */
export function listActiveSubscriptionRows(
  db: Executor,
  user: { id: number; realmId: number },
  includeSubscribers: boolean,
) {
  return db
    .selectFrom('subscriptions as sub')
    .innerJoin('streams as s', 's.id', 'sub.stream_id')
    .select([
      's.id as stream_id', 's.name', 's.description', 's.rendered_description', 's.creator_id', 's.date_created',
      's.invite_only', 's.is_web_public', 's.history_public_to_subscribers', 's.message_retention_days',
      'sub.color', 'sub.is_muted', 'sub.pin_to_top', 'sub.desktop_notifications', 'sub.audible_notifications',
      'sub.push_notifications', 'sub.email_notifications', 'sub.wildcard_mentions_notify',
    ])
    .select(
      (includeSubscribers
        ? sql<number[]>`ARRAY(
            SELECT other.user_id FROM subscriptions other JOIN users u ON u.id = other.user_id
            WHERE other.stream_id = s.id AND other.active AND u.is_active ORDER BY other.user_id)`
        : sql<number[] | null>`NULL`
      ).as('subscribers'),
    )
    .where('sub.user_id', '=', user.id)
    .where('sub.realm_id', '=', user.realmId)
    .where('sub.active', '=', true)
    .where('s.deactivated', '=', false)
    .orderBy(sql`s.name COLLATE "C"`)
    .execute();
}
