-- Built in src/modules/subscriptions/membership.repository.ts.
-- Prepared as s_2d332c071d12eb0e5a6a7904c4c201e7, a hash of its exact text; this one differs from it only in
-- the line breaks and indentation added for reading. Written by `npm run sql` from
-- scripts/lib/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.
WITH requested AS (
  SELECT n.ord::integer AS ord, n.name FROM unnest($2::text[]) WITH ORDINALITY AS n(name, ord)
),
  named AS (
  SELECT r.ord, s.id AS stream_id FROM requested r LEFT JOIN streams s ON s.realm_id = $1 AND lower(s.name) = lower(r.name)
),
  channel AS (
  SELECT s.id, s.name, s.description, s.rendered_description, s.invite_only, s.is_web_public,
         s.history_public_to_subscribers, s.creator_id, floor(extract(epoch FROM s.date_created))::bigint AS date_created,
         s.deactivated, s.message_retention_days
  FROM streams s WHERE s.id IN (SELECT stream_id FROM named)
),
  target AS (
  SELECT u.id, u.delivery_email, u.email_address_visibility, u.bot_type, u.bot_owner_id, u.role, u.is_active
  FROM users u WHERE u.realm_id = $1 AND (u.id = ANY ($3::integer[]) OR lower(u.delivery_email) = ANY ($4::text[]))
),
  concerned AS MATERIALIZED (
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
    WHERE (SELECT restricted FROM realm) AND t.role = 600
    UNION ALL
    -- Any target: the relevant guests it shares a channel with outside the named ones.
    SELECT t.id, g.id
    FROM relevant g
    JOIN subscriptions theirs ON theirs.user_id = g.id AND theirs.active AND theirs.stream_id NOT IN (SELECT id FROM channel)
    JOIN target t ON t.id <> g.id
    JOIN subscriptions mine ON mine.user_id = t.id AND mine.stream_id = theirs.stream_id AND mine.active
    WHERE (SELECT restricted FROM realm) AND g.role = 600
  ) pairs
)
SELECT
  (SELECT coalesce(json_agg(n ORDER BY n.ord), '[]') FROM named n) AS named,
  (SELECT coalesce(json_agg(c ORDER BY c.id), '[]') FROM channel c) AS channels,
  (SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM target t) AS targets,
  (SELECT coalesce(json_agg(json_build_object(
      'user_id', sub.user_id, 'stream_id', sub.stream_id, 'active', sub.active, 'user_active', t.is_active,
      'color', sub.color, 'is_muted', sub.is_muted, 'pin_to_top', sub.pin_to_top, 'desktop_notifications', sub.desktop_notifications, 'audible_notifications', sub.audible_notifications, 'push_notifications', sub.push_notifications, 'email_notifications', sub.email_notifications, 'wildcard_mentions_notify', sub.wildcard_mentions_notify) ORDER BY sub.stream_id, sub.user_id), '[]')
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
     SELECT u.id, u.bot_type, u.email_address_visibility, u.delivery_email, u.avatar_version, u.role, u.full_name, u.timezone, u.is_active, u.date_joined, u.avatar_source, u.is_imported_stub, u.is_deleted, u.bot_owner_id FROM users u
     WHERE $6::boolean AND u.id IN (
       SELECT id FROM relevant r WHERE r.id IN (SELECT id FROM target) OR EXISTS (SELECT 1 FROM target WHERE role = 600))) p) AS people
