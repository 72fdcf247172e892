import { preparedStatement } from '../../db/reusable-statement.js';
import { ROLES } from '../../zulip.js';
import { realmEventAppend } from '../event-log/audiences.js';
import { GRAVATAR_SOURCE } from '../users/users.serializers.js';

/**
 * The statements of user management, one per request, each behind the organization's
 * user-management lock. Each re-checks after the lock what a concurrent change could have altered
 * (the last owner, the target's state); a failed check calls refuse_write (migration 0006), which
 * rolls everything back. Every statement takes $1 realm id, $2 QUEUE_MAX_PENDING_EVENTS, $3 the
 * events (audienceEventsJson), $4 the users who get none; its own arguments follow.
 */

/** refuse_write reasons (the service turns them into the API's errors). */
export const REFUSALS = {
  emailInUse: 'email in use',
  weakPassword: 'weak password',
  deactivated: 'user is deactivated',
  lastUser: 'last user',
  lastOwner: 'last owner',
  botNameTaken: 'bot name taken',
} as const;

/** What Zulip's delete_profile action makes of a deactivated user's name and avatar. */
export const DELETED_USER_NAME = 'Deleted user';
export const DELETED_BOT_NAME = 'Deactivated bot';

const common = (onlyIf: string) => realmEventAppend({ realm: '$1', maxPending: '$2', events: '$3', excluded: '$4', onlyIf });

const ACTIVE_HUMAN_OWNERS = `(SELECT count(*) FROM users o
  WHERE o.realm_id = $1 AND o.is_active AND o.role = ${ROLES.owner} AND o.bot_type IS NULL)`;

/** $5 id (from the sequence), $6 email, $7 full name, $8 date joined, $9 address visibility, $10 password too weak, $11 API key hash, $12 role, $13 timezone, $14 imported stub, $15 can_create_users. */
export const CREATE_USER = preparedStatement(`WITH guard AS (
    SELECT CASE
      WHEN EXISTS (SELECT 1 FROM users WHERE realm_id = $1 AND lower(delivery_email) = lower($6::text))
        THEN refuse_write('${REFUSALS.emailInUse}', '')
      WHEN $10::boolean THEN refuse_write('${REFUSALS.weakPassword}', '')
    END AS refused
  ),
  created AS (
    INSERT INTO users (
      id, realm_id, delivery_email, full_name, date_joined, email_address_visibility, api_key_hash, role, timezone, is_imported_stub, can_create_users)
    SELECT $5::integer, $1::integer, $6::text, $7::text, $8::timestamptz, $9::smallint, $11::text, $12::smallint, $13::text, $14::boolean, $15::boolean
    WHERE (SELECT refused FROM guard) IS NULL
    RETURNING id
  ),${common('EXISTS (SELECT 1 FROM created)')}
  SELECT (SELECT refused FROM guard) AS refused`);

/**
 * $5 target, $6 its active bots (deactivated with it), $7 self-deactivation (the last user stays),
 * $8 the last owner stays (the API, not the command line), $9 delete_profile (Zulip's
 * do_deactivate_user: renamed, and a non-default avatar reset to the default in a new version).
 */
export const DEACTIVATE_USER = preparedStatement(`WITH guard AS (
    SELECT CASE
      WHEN NOT t.is_active THEN refuse_write('${REFUSALS.deactivated}', '')
      WHEN $7::boolean AND (SELECT count(*) FROM users WHERE realm_id = $1 AND is_active) = 1
        THEN refuse_write('${REFUSALS.lastUser}', '')
      WHEN $8::boolean AND t.role = ${ROLES.owner} AND t.bot_type IS NULL AND ${ACTIVE_HUMAN_OWNERS} = 1
        THEN refuse_write('${REFUSALS.lastOwner}', '')
    END AS refused
    FROM users t WHERE t.id = $5 AND t.realm_id = $1
  ),
  deactivated AS (
    UPDATE users SET is_active = false,
      full_name = CASE WHEN NOT $9::boolean THEN full_name WHEN bot_type IS NULL THEN '${DELETED_USER_NAME}' ELSE '${DELETED_BOT_NAME}' END,
      avatar_source = CASE WHEN $9::boolean THEN '${GRAVATAR_SOURCE}' ELSE avatar_source END,
      avatar_version = avatar_version + CASE WHEN $9::boolean AND avatar_source <> '${GRAVATAR_SOURCE}' THEN 1 ELSE 0 END
    WHERE realm_id = $1 AND (id = $5 OR (id = ANY ($6::integer[]) AND is_active)) AND (SELECT refused FROM guard) IS NULL
    RETURNING id
  ),
  -- Their queues end at once (a waiting poll is woken and finds its queue gone).
  dropped_user_queue AS (
    DELETE FROM event_queues WHERE realm_id = $1 AND user_id IN (SELECT id FROM deactivated)
    RETURNING pg_notify('zulip_events', id::text) AS notified
  ),${common('EXISTS (SELECT 1 FROM deactivated)')}
  SELECT (SELECT refused FROM guard) AS refused`);

/** $5 target, $6 its new bot owner (a bot whose owner is deactivated), or null. */
export const REACTIVATE_USER = preparedStatement(`WITH guard AS (
    SELECT CASE
      WHEN t.bot_type IS NOT NULL AND EXISTS (
        SELECT 1 FROM users o WHERE o.realm_id = $1 AND o.is_active AND lower(o.full_name) = lower(btrim(t.full_name)))
        THEN refuse_write('${REFUSALS.botNameTaken}', t.full_name)
    END AS refused
    FROM users t WHERE t.id = $5 AND t.realm_id = $1
  ),
  reactivated AS (
    UPDATE users SET is_active = true, bot_owner_id = COALESCE($6::integer, bot_owner_id)
    WHERE id = $5 AND realm_id = $1 AND NOT is_active AND (SELECT refused FROM guard) IS NULL
    RETURNING id
  ),${common('EXISTS (SELECT 1 FROM reactivated)')}
  SELECT (SELECT refused FROM guard) AS refused`);

/**
 * $5 target, $6 new full name or null, $7 new role or null, $8 profile values to store (JSON
 * [{id, value, rendered_value}]), $9 profile field ids whose values go.
 */
export const UPDATE_USER = preparedStatement(`WITH guard AS (
    SELECT CASE
      WHEN $7::smallint IS NOT NULL AND $7::smallint <> ${ROLES.owner} AND t.role = ${ROLES.owner} AND t.bot_type IS NULL
        AND ${ACTIVE_HUMAN_OWNERS} = 1
        THEN refuse_write('${REFUSALS.lastOwner}', '')
    END AS refused
    FROM users t WHERE t.id = $5 AND t.realm_id = $1
  ),
  updated AS (
    UPDATE users SET full_name = COALESCE($6::text, full_name), role = COALESCE($7::smallint, role)
    WHERE id = $5 AND realm_id = $1 AND ($6::text IS NOT NULL OR $7::smallint IS NOT NULL) AND (SELECT refused FROM guard) IS NULL
    RETURNING id
  ),
  removed_value AS (
    DELETE FROM custom_profile_field_values
    WHERE user_id = $5 AND realm_id = $1 AND field_id = ANY ($9::integer[]) AND (SELECT refused FROM guard) IS NULL
    RETURNING field_id
  ),
  stored_value AS (
    INSERT INTO custom_profile_field_values (realm_id, user_id, field_id, value, rendered_value)
    SELECT $1::integer, $5::integer, (v->>'id')::integer, v->>'value', v->>'rendered_value'
    FROM json_array_elements($8::json) AS v
    WHERE (SELECT refused FROM guard) IS NULL
    ON CONFLICT (user_id, field_id) DO UPDATE SET value = EXCLUDED.value, rendered_value = EXCLUDED.rendered_value
    RETURNING field_id
  ),${common('(SELECT refused FROM guard) IS NULL')}
  SELECT (SELECT refused FROM guard) AS refused`);
