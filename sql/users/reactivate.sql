-- Built in src/modules/user-management/users.writes.ts.
-- Prepared as s_77098db0988e5568832ab8d8adc041da, a hash of its exact text; this one differs from it only in
-- the line breaks and indentation added for reading. Written by `npm run sql` from
-- scripts/lib/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.
WITH guard AS (
    SELECT CASE
      WHEN t.bot_type IS NOT NULL AND EXISTS (
        SELECT 1 FROM users o WHERE o.realm_id = $1 AND o.is_active AND lower(o.full_name) = lower(btrim(t.full_name)))
        THEN refuse_write('bot name taken', t.full_name)
    END AS refused
    FROM users t WHERE t.id = $5 AND t.realm_id = $1
  ),
  reactivated AS (
    UPDATE users SET is_active = true, bot_owner_id = COALESCE($6::integer, bot_owner_id)
    WHERE id = $5 AND realm_id = $1 AND NOT is_active AND (SELECT refused FROM guard) IS NULL
    RETURNING id
  ),
  incoming_event(payload, ord, type, lo, hi, access_target, users, placeholder) AS (
    SELECT e.value->'event', e.ord, e.value->'event'->>'type', (e.value->>'lo')::integer, (e.value->>'hi')::integer,
           (e.value->>'access_target')::integer,
           CASE WHEN json_typeof(e.value->'users') = 'array'
             THEN ARRAY(SELECT json_array_elements_text(e.value->'users')::integer) END,
           coalesce((e.value->>'placeholder')::boolean, false)
    FROM json_array_elements($3::json) WITH ORDINALITY AS e(value, ord)
    WHERE EXISTS (SELECT 1 FROM reactivated)
  ),
  accepting AS (
    SELECT q.id AS queue_id, i.ord, i.payload
    FROM incoming_event i
    JOIN users u ON u.realm_id = $1 AND u.is_active AND u.role > i.lo AND u.role <= i.hi
    JOIN event_queues q ON q.user_id = u.id AND q.realm_id = $1
    WHERE u.id <> ALL ($4::integer[])
      AND (i.users IS NULL OR u.id = ANY (i.users))
      AND (q.event_types IS NULL OR i.type = ANY (q.event_types))
      AND NOT (i.placeholder AND q.user_list_incomplete)
      AND (i.access_target IS NULL OR u.role <> 600 OR (i.access_target <> 0 AND EXISTS (
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
    WHERE eq.id = c.queue_id AND eq.next_event_id + c.n - eq.last_acked_id <= $2::bigint + 1
    RETURNING eq.id, eq.next_event_id - c.n AS first_id, pg_notify('zulip_events', eq.id::text) AS notified
  ),
  dropped_queue AS (
    DELETE FROM event_queues
    WHERE id IN (SELECT queue_id FROM event_count) AND id NOT IN (SELECT id FROM bumped_queue)
    RETURNING pg_notify('zulip_events', id::text) AS notified
  ),
  inserted_event AS (
    INSERT INTO events (queue_id, id, realm_id, payload)
    SELECT b.id, b.first_id - 1 + row_number() OVER (PARTITION BY b.id ORDER BY a.ord), $1, a.payload
    FROM bumped_queue b JOIN accepting a ON a.queue_id = b.id
    RETURNING queue_id
  )
  SELECT (SELECT refused FROM guard) AS refused
