import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import {
  NEW_SUBSCRIPTION_SETTINGS,
  SETTING_COLUMNS,
  SETTING_PROPERTIES,
  settingOf,
  type StoredSettings,
} from '../src/modules/subscriptions/settings.js';
import { SubscriptionObject } from '../src/modules/subscriptions/subscriptions.schemas.js';
import { isChannelKey, SUBSCRIPTION_KEYS } from '../src/modules/subscriptions/subscriptions.serializers.js';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { ids } from './helpers/fixture.js';

// The read side of the settings table (src/modules/subscriptions/settings.ts): the subscription
// object's settings, their values, documentation and a new subscription's defaults come from it.

/** The keys of docs/api.md §2.12, in its exact order (subscribers, optional, last). */
const SPEC_KEYS = [
  'is_archived',
  'audible_notifications',
  'color',
  'creator_id',
  'date_created',
  'description',
  'desktop_notifications',
  'email_notifications',
  'first_message_id',
  'history_public_to_subscribers',
  'in_home_view',
  'invite_only',
  'is_muted',
  'is_web_public',
  'message_retention_days',
  'name',
  'pin_to_top',
  'push_notifications',
  'rendered_description',
  'stream_id',
  'stream_weekly_traffic',
  'wildcard_mentions_notify',
];

const ctx = useTestContext(createTestContext);

const declaration = (column: string) => settingOf(SETTING_PROPERTIES.find((property) => settingOf(property)!.column === column)!)!;

describe('subscription settings, read side', () => {
  it("the object's settings are exactly the table's properties, in docs/api.md's key order, and so is its documentation", async () => {
    expect(SUBSCRIPTION_KEYS).toEqual(SPEC_KEYS);
    expect(SUBSCRIPTION_KEYS.filter((key) => !isChannelKey(key)).sort()).toEqual([...SETTING_PROPERTIES].sort());
    expect(Object.keys(SubscriptionObject.properties)).toEqual([...SPEC_KEYS, 'subscribers']);
    const res = await api(ctx.app, { url: '/api/v1/users/me/subscriptions?include_subscribers=true', as: 'U' });
    expect(res.statusCode).toBe(200);
    const [object] = res.json().subscriptions as Record<string, unknown>[];
    expect(Object.keys(object!)).toEqual([...SPEC_KEYS, 'subscribers']);
  });

  it("each setting is sent as its stored column's value, in_home_view as the opposite of is_muted", async () => {
    // Every column away from its default, so that a value read from the wrong column shows.
    const stored = {
      color: '#123456',
      is_muted: true,
      pin_to_top: true,
      desktop_notifications: false,
      audible_notifications: true,
      push_notifications: false,
      email_notifications: true,
      wildcard_mentions_notify: false,
    } satisfies StoredSettings;
    expect(Object.keys(stored).sort()).toEqual([...SETTING_COLUMNS].sort());
    await ctx.db.updateTable('subscriptions').set(stored).where('user_id', '=', ids.U).where('stream_id', '=', ids.P).execute();
    const expected = Object.fromEntries(
      SETTING_PROPERTIES.map((property) => {
        const setting = settingOf(property)!;
        const value = stored[setting.column];
        return [property, 'inverted' in setting ? !value : value];
      }),
    );
    expect(expected).toMatchObject({ in_home_view: false, is_muted: true });
    const list = (await api(ctx.app, { url: '/api/v1/users/me/subscriptions', as: 'U' })).json().subscriptions as Record<string, unknown>[];
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject(expected);
    // register's section (nothing here is null, so the user defaults change nothing).
    const form = { fetch_event_types: '["subscription"]' };
    const registered = (await api(ctx.app, { method: 'POST', url: '/api/v1/register', as: 'U', form })).json().subscriptions as Record<
      string,
      unknown
    >[];
    expect(registered[0]).toMatchObject(expected);
  });

  it("a nullable setting is a nullable column, and a new subscription's defaults are the columns' defaults", async () => {
    const columns = await sql<{ column_name: string; is_nullable: 'YES' | 'NO' }>`
      SELECT column_name, is_nullable FROM information_schema.columns
      WHERE table_schema = current_schema() AND table_name = 'subscriptions'`.execute(ctx.db);
    const nullable = new Map(columns.rows.map((row) => [row.column_name, row.is_nullable === 'YES']));
    for (const column of SETTING_COLUMNS) expect([column, nullable.get(column)]).toEqual([column, 'nullable' in declaration(column)]);
    // B has no subscription: a row with only what membership writes (the colour is chosen).
    await ctx.db.insertInto('subscriptions').values({ realm_id: 1, user_id: ids.B, stream_id: ids.P, color: '#aabbcc' }).execute();
    const row = await ctx.db
      .selectFrom('subscriptions')
      .select(SETTING_COLUMNS)
      .where('user_id', '=', ids.B)
      .where('stream_id', '=', ids.P)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ ...NEW_SUBSCRIPTION_SETTINGS, color: '#aabbcc' });
  });
});
