import type { ApiEvent } from '../events/events.repository.js';
import { COLUMN_EVENTS } from './settings.js';
import type { SettingChange } from './subscriptions.validation.js';

/** A row of selectActiveSubscriptions (channel and the user's settings). */
export interface SubscriptionRow {
  stream_id: number;
  name: string;
  description: string;
  rendered_description: string;
  creator_id: number | null;
  date_created: Date;
  invite_only: boolean;
  is_web_public: boolean;
  history_public_to_subscribers: boolean;
  message_retention_days: number | null;
  color: string;
  is_muted: boolean;
  pin_to_top: boolean;
  desktop_notifications: boolean | null;
  audible_notifications: boolean | null;
  push_notifications: boolean | null;
  email_notifications: boolean | null;
  wildcard_mentions_notify: boolean | null;
  subscribers: number[] | null;
}

/** The subscription object of spec §2.12, keys in the required order. */
export function serializeSubscription(row: SubscriptionRow) {
  return {
    is_archived: false,
    audible_notifications: row.audible_notifications,
    color: row.color,
    creator_id: row.creator_id,
    date_created: Math.floor(row.date_created.getTime() / 1000),
    description: row.description,
    desktop_notifications: row.desktop_notifications,
    email_notifications: row.email_notifications,
    first_message_id: null,
    history_public_to_subscribers: row.history_public_to_subscribers,
    in_home_view: !row.is_muted,
    invite_only: row.invite_only,
    is_muted: row.is_muted,
    is_web_public: row.is_web_public,
    message_retention_days: row.message_retention_days,
    name: row.name,
    pin_to_top: row.pin_to_top,
    push_notifications: row.push_notifications,
    rendered_description: row.rendered_description,
    stream_id: row.stream_id,
    stream_weekly_traffic: null,
    wildcard_mentions_notify: row.wildcard_mentions_notify,
    ...(row.subscribers !== null && { subscribers: row.subscribers }),
  };
}

export type SubscriptionObject = ReturnType<typeof serializeSubscription>;

const updateEvent = (property: string, value: string | boolean, streamId: number): ApiEvent => ({
  type: 'subscription',
  op: 'update',
  property,
  value,
  stream_id: streamId,
});

/**
 * The events of one applied change (spec §3.2 event table): one per property stored in its column,
 * whichever was sent; muting gives two, in_home_view first.
 */
export function changeEvents(change: SettingChange): ApiEvent[] {
  return COLUMN_EVENTS.get(change.column)!.map(({ property, inverted }) =>
    updateEvent(property, inverted ? !(change.stored as boolean) : change.stored, change.streamId),
  );
}
