import { sql } from 'kysely';
import { jsonBuildObject } from 'kysely/helpers/postgres';
import type { Database } from '../../db/database.js';
import { reusableStatement } from '../../db/reusable-statement.js';
import { EVENT_APPEND_ARGUMENTS, type EventAppendArgs, withEventAppend } from '../event-log/event-log.repository.js';
import { SETTING_COLUMNS, type SettingValues, settingSqlType } from './settings.js';

// The settings columns as the statements name them (derived from src/modules/subscriptions/settings.ts).
const RECORDSET_COLUMNS = sql.raw(
  ['stream_id integer', ...SETTING_COLUMNS.map((column) => `${column} ${settingSqlType(column)}`)].join(', '),
);
const SELECTED_SETTINGS = SETTING_COLUMNS.map((column) => `sub.${column}` as const);

export interface SettingWriteArgs extends EventAppendArgs {
  isGuest: boolean;
  /**
   * The changes as one JSON array, in order: `[stream_id, column, stored value]` each (the stored
   * column: is_muted for in_home_view). Ids outside PostgreSQL's integer range are sent as 0,
   * which names no channel.
   */
  entries: string;
  /** The final values per subscription (`{stream_id, <column>: value…}` objects), as JSON. */
  updates: string;
  /** The distinct channel ids of the changes, as an array literal (`{1,2}`): their lookup by index. */
  streamIds: string;
  /** false: only check the channels (an entry after these failed its shape checks; events '[]'). */
  write: boolean;
}

/** Audit rows of one settings or membership request at most: beyond, one row for all its pairs. */
export const MAX_AUDIT_ROWS = 100;

const AUDIT_COLUMNS = [
  'realm_id',
  'acting_user_id',
  'modified_user_id',
  'stream_id',
  'property',
  'old_value',
  'new_value',
  'created_at',
] as const;

/** Who made an audited settings change: a user changes only their own subscriptions' settings. */
const auditedBy = (args: SettingWriteArgs) => [
  sql<number>`${args.realmId}::integer`.as('realm_id'),
  sql<number>`${args.userId}::integer`.as('user_id'),
  sql<number>`${args.userId}::integer`.as('modified_user_id'),
];

// Not now(): that is when the transaction began, which in a commit group (src/db/commit-groups.ts)
// can be before this user's lock was granted.
const AUDITED_AT = sql<Date>`clock_timestamp()`.as('created_at');

/** How the settings statement refuses (refuse_write's reason; its detail is "<index>:<stream id>"). */
export const INVALID_CHANNEL = 'invalid channel';
export const NOT_SUBSCRIBED = 'not subscribed';

/**
 * Checks f–g of every change (docs/api.md §2.7, §3.2) and, when all pass and `write` is set, writes
 * the final settings, the audit rows and the events: one prepared statement. A failing change makes
 * it raise (refuse_write, migration 0006) with the lowest failing index, so nothing is written. One
 * audit row per (channel, setting) set, stored → final value, in order of first change; beyond
 * MAX_AUDIT_ROWS pairs, one row holding them all (docs/limits.md: no answer changes).
 */
export const writeSettingsStatement = reusableStatement<SettingWriteArgs, { refused: boolean | null }>(
  [...EVENT_APPEND_ARGUMENTS, 'isGuest', 'entries', 'updates', 'streamIds', 'write'],
  (db, args) => {
    const write = sql<boolean>`${args.write}::boolean`;
    return (
      withEventAppend(db, args)
        // Raw: table functions WITH ORDINALITY / with a column list (parenthesized for Kysely).
        .with(
          'entry(ord, stream_id, property, value)',
          () => sql<{ ord: number; stream_id: number; property: string; value: unknown }>`(
        SELECT e.ord, (e.item->>0)::integer, e.item->>1, e.item->2
        FROM jsonb_array_elements(${args.entries}::jsonb) WITH ORDINALITY AS e(item, ord))`,
        )
        // Each (channel, setting) once: where the request first sets it, and the value it leaves.
        .with('setting_change', (db) =>
          db
            .selectFrom('entry as e')
            .select([
              'e.stream_id',
              'e.property',
              (eb) => eb.fn.min('e.ord').as('ord'),
              sql<unknown>`(array_agg(e.value ORDER BY e.ord DESC))[1]`.as('value'),
            ])
            .groupBy(['e.stream_id', 'e.property']),
        )
        .with(
          'final_value',
          () => sql<{ stream_id: number } & SettingValues>`(
        SELECT * FROM json_to_recordset(${args.updates}::json) AS v(${RECORDSET_COLUMNS}))`,
        )
        .with('channel', (db) =>
          db
            .selectFrom('streams as s')
            .leftJoin('subscriptions as sub', (join) => join.onRef('sub.stream_id', '=', 's.id').on('sub.user_id', '=', args.userId))
            .select((eb) => [
              's.id',
              's.invite_only',
              's.is_web_public',
              'sub.active',
              jsonBuildObject(Object.fromEntries(SETTING_COLUMNS.map((column) => [column, eb.ref(`sub.${column}`)]))).as('settings'),
            ])
            .where('s.realm_id', '=', args.realmId)
            .where('s.deactivated', '=', sql.lit(false))
            .where('s.id', '=', sql<number>`ANY(${args.streamIds}::integer[])`),
        )
        // The lowest-index change that fails f (no such channel for the caller) or g (not subscribed).
        .with('failure', (db) =>
          db
            .selectFrom('entry as e')
            .leftJoin('channel as c', 'c.id', 'e.stream_id')
            .select((eb) => [
              'e.ord',
              'e.stream_id',
              eb
                .or([
                  eb('c.id', 'is', null),
                  // IS TRUE: no subscription row (active NULL) is no subscription, not an unknown.
                  eb.not(
                    eb.or([
                      eb('c.is_web_public', '=', sql.lit(true)),
                      eb('c.active', 'is', true),
                      eb.and([sql<boolean>`NOT ${args.isGuest}::boolean`, eb('c.invite_only', '=', sql.lit(false))]),
                    ]),
                  ),
                ])
                .as('invalid_channel'),
            ])
            .where('c.active', 'is not', true)
            .orderBy('e.ord')
            .limit(sql.lit(1)),
        )
        .with('updated', (db) =>
          db
            .updateTable('subscriptions as sub')
            .from('final_value as v')
            .set((eb) => Object.fromEntries(SETTING_COLUMNS.map((column) => [column, eb.fn.coalesce(`v.${column}`, `sub.${column}`)])))
            .where(write)
            .where('sub.user_id', '=', args.userId)
            .where('sub.realm_id', '=', args.realmId)
            .whereRef('sub.stream_id', '=', 'v.stream_id'),
        )
        .with('audited', (db) =>
          db
            .insertInto('subscription_audit_log')
            // event_type: its default, 304 (SUBSCRIPTION_PROPERTY_CHANGED; migration 0009).
            .columns(AUDIT_COLUMNS)
            .expression((eb) =>
              eb
                .selectFrom('setting_change as e')
                .innerJoin('channel as c', 'c.id', 'e.stream_id')
                .select([
                  ...auditedBy(args),
                  'e.stream_id',
                  'e.property',
                  sql<unknown>`(c.settings -> e.property)::jsonb`.as('old_value'),
                  'e.value',
                  AUDITED_AT,
                ])
                .where(write)
                .where(sql<boolean>`(SELECT count(*) FROM setting_change) <= ${sql.lit(MAX_AUDIT_ROWS)}`)
                .orderBy('e.ord'),
            ),
        )
        // More pairs: one row (no channel, no property) with [stream_id, property, value] of each, old and final.
        .with('audited_together', (db) =>
          db
            .insertInto('subscription_audit_log')
            .columns(AUDIT_COLUMNS)
            .expression((eb) =>
              eb
                .selectFrom('setting_change as e')
                .innerJoin('channel as c', 'c.id', 'e.stream_id')
                .select([
                  ...auditedBy(args),
                  sql<null>`NULL::integer`.as('stream_id'),
                  sql<null>`NULL::text`.as('property'),
                  sql<unknown>`jsonb_agg(jsonb_build_array(e.stream_id, e.property, (c.settings -> e.property)::jsonb) ORDER BY e.ord)`.as(
                    'old_value',
                  ),
                  sql<unknown>`jsonb_agg(jsonb_build_array(e.stream_id, e.property, e.value) ORDER BY e.ord)`.as('new_value'),
                  AUDITED_AT,
                ])
                .where(write)
                .having(sql<boolean>`count(*) > ${sql.lit(MAX_AUDIT_ROWS)}`),
            ),
        )
        // The main query evaluates the refusal: when a change fails, the statement raises before
        // (or instead of) committing the writes above.
        .selectNoFrom((eb) => [
          eb
            .selectFrom('failure')
            .select(
              sql<boolean>`refuse_write(CASE WHEN invalid_channel THEN ${sql.lit(INVALID_CHANNEL)} ELSE ${sql.lit(NOT_SUBSCRIBED)} END, ord || ':' || stream_id)`.as(
                'refused',
              ),
            )
            .as('refused'),
        ])
    );
  },
);

/** Deletes up to `limit` audit rows older than `days` days; returns how many it deleted. */
export async function deleteOldAuditRows(db: Database, days: number, limit: number): Promise<number> {
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

/** ChannelColumns, from `streams as s`. */
export const CHANNEL_COLUMNS = [
  's.id as stream_id',
  's.name',
  's.description',
  's.rendered_description',
  's.creator_id',
  's.date_created',
  's.invite_only',
  's.is_web_public',
  's.history_public_to_subscribers',
  's.message_retention_days',
] as const;

/** The active users with an active subscription to channel `s` (as `sub` and `u`, which shadow any outer ones). */
export const ACTIVE_SUBSCRIBERS = sql`FROM subscriptions sub JOIN users u ON u.id = sub.user_id WHERE sub.stream_id = s.id AND sub.active AND u.is_active`;

/** Their ids, ascending. */
export const SUBSCRIBER_IDS = sql<number[]>`ARRAY(SELECT sub.user_id ${ACTIVE_SUBSCRIBERS} ORDER BY sub.user_id)`;

/**
 * The user's active subscriptions to non-archived channels, sorted by name in code-point order,
 * optionally with each channel's active subscribers (active users), all in one query.
 */
export function selectActiveSubscriptions(db: Database, user: { id: number; realmId: number }, includeSubscribers: boolean) {
  return db
    .selectFrom('subscriptions as sub')
    .innerJoin('streams as s', 's.id', 'sub.stream_id')
    .select([...CHANNEL_COLUMNS, ...SELECTED_SETTINGS])
    .select((includeSubscribers ? SUBSCRIBER_IDS : sql<number[] | null>`NULL`).as('subscribers'))
    .where('sub.user_id', '=', user.id)
    .where('sub.realm_id', '=', user.realmId)
    .where('sub.active', '=', true)
    .where('s.deactivated', '=', false)
    .orderBy(sql`s.name COLLATE "C"`);
}
