import type { Selectable } from 'kysely';
import type { Streams } from '../../db/types.js';
import type { ApiEvent } from '../event-log/event-log.repository.js';
import {
  COLUMN_EVENTS,
  type SentSettings,
  SETTING_PROPERTIES,
  type SettingProperty,
  sentValueReader,
  type StoredSettings,
} from './settings.js';
import type { SettingChange } from './subscriptions.validation.js';

/** The channel's columns of a subscription row. */
export type ChannelColumns = Omit<Selectable<Streams>, 'id' | 'realm_id' | 'deactivated'> & { stream_id: number };

/** A row of selectActiveSubscriptions: the channel, the user's settings (settings.ts) and the subscribers when asked for. */
export type SubscriptionRow = ChannelColumns & StoredSettings & { subscribers: number[] | null };

/** The subscription object's keys that are not settings, with their values. */
export const CHANNEL_KEYS = {
  is_archived: () => false,
  creator_id: (row) => row.creator_id,
  date_created: (row) => Math.floor(row.date_created.getTime() / 1000),
  description: (row) => row.description,
  first_message_id: () => null,
  history_public_to_subscribers: (row) => row.history_public_to_subscribers,
  invite_only: (row) => row.invite_only,
  is_web_public: (row) => row.is_web_public,
  message_retention_days: (row) => row.message_retention_days,
  name: (row) => row.name,
  rendered_description: (row) => row.rendered_description,
  stream_id: (row) => row.stream_id,
  stream_weekly_traffic: () => null,
} satisfies Record<string, (row: ChannelColumns) => unknown>;

export type ChannelKey = keyof typeof CHANNEL_KEYS;

/** The subscription object of docs/api.md §2.12. */
export type SubscriptionObject = { [K in ChannelKey]: ReturnType<(typeof CHANNEL_KEYS)[K]> } & SentSettings & { subscribers?: number[] };

/** The keys in the order sent (docs/api.md §2.12, Zulip's): is_archived, then the others in code-point order (subscribers last). */
export const SUBSCRIPTION_KEYS: readonly (ChannelKey | SettingProperty)[] = [
  'is_archived',
  ...[...(Object.keys(CHANNEL_KEYS) as ChannelKey[]).filter((key) => key !== 'is_archived'), ...SETTING_PROPERTIES].sort(),
];

export const isChannelKey = (key: string): key is ChannelKey => Object.hasOwn(CHANNEL_KEYS, key);

/**
 * Builds objects with `readers`' keys in order: an object literal compiled once from the constant
 * keys (checked), which V8 builds and stringifies several times faster than 20-odd computed keys.
 */
export function objectBuilder<Row>(readers: Record<string, (row: Row) => unknown>): (row: Row) => Record<string, unknown> {
  const keys = Object.keys(readers);
  if (!keys.every((key) => /^[a-z_]+$/.test(key))) throw new Error('an object key is not an identifier');
  const list = Object.values(readers);
  const body = `return { ${keys.map((key, i) => `${key}: readers[${i}](row)`).join(', ')} };`;
  // eslint-disable-next-line @typescript-eslint/no-implied-eval
  const build = new Function('readers', 'row', body) as (readers: typeof list, row: Row) => Record<string, unknown>;
  return (row) => build(list, row);
}

const build = objectBuilder<SubscriptionRow>(
  Object.fromEntries(SUBSCRIPTION_KEYS.map((key) => [key, isChannelKey(key) ? CHANNEL_KEYS[key] : sentValueReader(key)])),
);

/** The subscription object of docs/api.md §2.12, keys in the required order. */
export function serializeSubscription(row: SubscriptionRow): SubscriptionObject {
  const object = build(row);
  if (row.subscribers !== null) object.subscribers = row.subscribers;
  return object as SubscriptionObject;
}

const updateEvent = (property: string, value: string | boolean, streamId: number): ApiEvent => ({
  type: 'subscription',
  op: 'update',
  property,
  value,
  stream_id: streamId,
});

/** The events of one change (docs/api.md §3.2): one per property stored in its column; muting gives two, in_home_view first. */
export function changeEvents(change: SettingChange): ApiEvent[] {
  return COLUMN_EVENTS.get(change.column)!.map(({ property, inverted }) =>
    updateEvent(property, inverted ? !(change.stored as boolean) : change.stored, change.streamId),
  );
}
