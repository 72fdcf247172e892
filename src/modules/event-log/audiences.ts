import { ROLES } from '../../zulip.js';
import { EVENTS_CHANNEL, type ApiEvent } from './event-log.repository.js';

/**
 * Events about one user sent to the OTHER users of the organization (realm_user add / update, and
 * the subscription peer events of a deactivation or reactivation, to explicit `users`):
 * withEventAppend serves a user's own queues; these CTEs append to every queue of the organization
 * whose user is in an event's audience, in the statement that makes the change, so the change and
 * its events commit together.
 *
 * An audience is the active users (bots included, as Zulip's active_user_ids) whose role is in
 * (lo, hi]: Zulip's address visibility is a role threshold (docs/api.md §2.3), so one payload goes
 * to the roles that may see the real address and another, with delivery_email null, to the rest.
 * `guests` narrows it further for restricted organizations (docs/api.md §2.4).
 *
 * Every statement using these CTEs holds the organization's membership lock
 * (REALM_MEMBERSHIP_LOCK_NAMESPACE in src/db/transactions.ts), which register takes shared
 * before it creates its queue and reads the users: a change commits either before a register reads
 * or after its queue exists. Queues are locked in (user id, id) order, as commit groups
 * (src/db/commit-groups.ts) lock them, so the two cannot deadlock; the cap on pending events
 * (QUEUE_MAX_PENDING_EVENTS) applies as in withEventAppend.
 */

/** Which guests of the organization get an event (the others' audience is the role range alone). */
export type GuestAudience =
  /** every guest in the role range */
  | 'all'
  /** none (a restricted organization's deactivation: Zulip sends it to non-guests and DM partners, and there are no DMs here) */
  | 'none'
  /** those sharing an active subscription with this user (a restricted organization, docs/api.md §2.4) */
  | { sharingWith: number };

export interface AudienceEvent {
  event: ApiEvent;
  /** Recipients' roles are in (lo, hi]. */
  lo: number;
  hi: number;
  guests: GuestAudience;
  /** When given, only these users (still within the role range, active and not excluded): the peers of a subscription event. */
  users?: readonly number[];
  /**
   * An inaccessible user's placeholder: not for queues registered with user_list_incomplete
   * (Zulip's Tornado drops such an event for them, process_realm_user_add_event).
   */
  placeholder?: true;
}

/** Every role (the whole organization). */
export const EVERY_ROLE = { lo: 0, hi: ROLES.guest } as const;

/** The JSON array parameter of realmEventAppend, events in order. */
export function audienceEventsJson(events: readonly AudienceEvent[]): string {
  return JSON.stringify(
    events.map(({ event, lo, hi, guests, users, placeholder }) => ({
      event,
      lo,
      hi,
      access_target: guests === 'all' ? null : guests === 'none' ? 0 : guests.sharingWith,
      users: users ?? null,
      ...(placeholder && { placeholder }),
    })),
  );
}

export interface RealmEventParameters {
  /** `$n` of the organization's id (integer). */
  realm: string;
  /** `$n` of QUEUE_MAX_PENDING_EVENTS. */
  maxPending: string;
  /** `$n` of audienceEventsJson's text. */
  events: string;
  /** `$n` of an integer[] of users who get none (those whose queues the statement deletes). */
  excluded: string;
  /** SQL condition (over the statement's other CTEs): the events are sent only when it holds. */
  onlyIf: string;
}

/** The CTEs (text, to follow the statement's own CTEs after a comma) that append the events. */
export function realmEventAppend(p: RealmEventParameters): string {
  return `
  incoming_event(payload, ord, type, lo, hi, access_target, users, placeholder) AS (
    SELECT e.value->'event', e.ord, e.value->'event'->>'type', (e.value->>'lo')::integer, (e.value->>'hi')::integer,
           (e.value->>'access_target')::integer,
           CASE WHEN json_typeof(e.value->'users') = 'array'
             THEN ARRAY(SELECT json_array_elements_text(e.value->'users')::integer) END,
           coalesce((e.value->>'placeholder')::boolean, false)
    FROM json_array_elements(${p.events}::json) WITH ORDINALITY AS e(value, ord)
    WHERE ${p.onlyIf}
  ),
  accepting AS (
    SELECT q.id AS queue_id, i.ord, i.payload
    FROM incoming_event i
    JOIN users u ON u.realm_id = ${p.realm} AND u.is_active AND u.role > i.lo AND u.role <= i.hi
    JOIN event_queues q ON q.user_id = u.id AND q.realm_id = ${p.realm}
    WHERE u.id <> ALL (${p.excluded}::integer[])
      AND (i.users IS NULL OR u.id = ANY (i.users))
      AND (q.event_types IS NULL OR i.type = ANY (q.event_types))
      AND NOT (i.placeholder AND q.user_list_incomplete)
      AND (i.access_target IS NULL OR u.role <> ${ROLES.guest} OR (i.access_target <> 0 AND EXISTS (
        SELECT 1 FROM subscriptions mine JOIN subscriptions theirs ON theirs.stream_id = mine.stream_id
        WHERE mine.user_id = u.id AND mine.active AND theirs.user_id = i.access_target AND theirs.active)))
  ),
  locked_queue AS MATERIALIZED (
    SELECT q.id FROM event_queues q WHERE q.id IN (SELECT queue_id FROM accepting) ORDER BY q.user_id, q.id FOR UPDATE OF q
  ),
  event_count AS (
    SELECT a.queue_id, count(*) AS n FROM accepting a JOIN locked_queue l ON l.id = a.queue_id GROUP BY a.queue_id
  ),
  bumped_queue AS (
    UPDATE event_queues eq SET next_event_id = eq.next_event_id + c.n
    FROM event_count c
    WHERE eq.id = c.queue_id AND eq.next_event_id + c.n - eq.last_acked_id <= ${p.maxPending}::bigint + 1
    RETURNING eq.id, eq.next_event_id - c.n AS first_id, pg_notify('${EVENTS_CHANNEL}', eq.id::text) AS notified
  ),
  dropped_queue AS (
    DELETE FROM event_queues
    WHERE id IN (SELECT queue_id FROM event_count) AND id NOT IN (SELECT id FROM bumped_queue)
    RETURNING pg_notify('${EVENTS_CHANNEL}', id::text) AS notified
  ),
  inserted_event AS (
    INSERT INTO events (queue_id, id, realm_id, payload)
    SELECT b.id, b.first_id - 1 + row_number() OVER (PARTITION BY b.id ORDER BY a.ord), ${p.realm}, a.payload
    FROM bumped_queue b JOIN accepting a ON a.queue_id = b.id
    RETURNING queue_id
  )`;
}
