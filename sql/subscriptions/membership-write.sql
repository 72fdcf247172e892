-- Built in src/modules/subscriptions/membership.repository.ts.
-- Prepared as s_d0d9599b5ba1997b2617a823d0fc3c38, a hash of its exact text; this one differs from it only in
-- the line breaks and indentation added for reading. Written by `npm run sql` from
-- scripts/lib/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.
with "incoming_item"("payload", "ord", "type", "set_no") as materialized (
    SELECT e.item->'event', e.ord, e.item->'event'->>'type', (e.item->>'to')::integer + 1
    FROM json_array_elements($1::json) WITH ORDINALITY AS e(item, ord)),
  "recipient"("set_no", "user_id") as (
    SELECT l.ord::integer, r.user_id::integer
    FROM json_array_elements($2::json) WITH ORDINALITY AS l(users, ord)
    CROSS JOIN LATERAL json_array_elements_text(l.users) AS r(user_id)),
  "accepting" as (
  select "q"."id" as "queue_id",
    "t"."set_no",
    "t"."type"
  from "event_queues" as "q"
  inner join "recipient" as "r" on "r"."user_id" = "q"."user_id"
  inner join (
    select distinct "set_no",
      "type"
    from "incoming_item"
  ) as "t" on "t"."set_no" = "r"."set_no" and (q.event_types IS NULL OR t.type = ANY (q.event_types))
  where "q"."realm_id" = $3
),
  "locked_queue" as materialized (
  select "lq"."id"
  from "event_queues" as "lq"
  where "lq"."id" in (
    select "accepting"."queue_id"
    from "accepting"
  )
  order by "lq"."user_id",
    "lq"."id" for update
),
  "delivery" as (
  select "a"."queue_id",
    "i"."ord"
  from "accepting" as "a"
  inner join "incoming_item" as "i" on "i"."set_no" = "a"."set_no" and "i"."type" = "a"."type"
  inner join "locked_queue" as "l" on "l"."id" = "a"."queue_id"
),
  "event_count" as (
  select "delivery"."queue_id",
    count(*) as "n"
  from "delivery"
  group by "delivery"."queue_id"
),
  "bumped_queue" as (
  update "event_queues" as "eq" set "next_event_id" = "eq"."next_event_id" + "c"."n"
  from "event_count" as "c"
  where "eq"."id" = "c"."queue_id" and "eq"."next_event_id" + "c"."n" - "eq"."last_acked_id" <= $4::bigint + 1
  returning "eq"."id",
    "eq"."next_event_id" - "c"."n" as "first_id",
    pg_notify('zulip_events', eq.id::text) as "notified"
),
  "dropped_queue" as (
  delete
  from "event_queues"
  where "event_queues"."id" in (
    select "queue_id"
    from "event_count"
  ) and "event_queues"."id" not in (
    select "id"
    from "bumped_queue"
  )
  returning pg_notify('zulip_events', event_queues.id::text) as "notified"
),
  "inserted_event" as (
  insert into "events" ("queue_id", "id", "realm_id", "payload")
  select "b"."id" as "queue_id",
    "b"."first_id" - 1 + "numbered"."n" as "id",
    $3::integer as "realm_id",
    "i"."payload"
  from "bumped_queue" as "b"
  inner join (
    select "d"."queue_id",
      "d"."ord",
      row_number() over(partition by "d"."queue_id" order by "d"."ord") as "n"
    from "delivery" as "d"
  ) as "numbered" on "numbered"."queue_id" = "b"."id"
  inner join "incoming_item" as "i" on "i"."ord" = "numbered"."ord"
),
  "new_channel" as (
  insert into "streams" ("id", "realm_id", "name", "description", "rendered_description", "invite_only", "is_web_public", "history_public_to_subscribers", "creator_id", "date_created") (
            SELECT c.id, $3::integer, c.name, c.description, c.rendered_description, c.invite_only, c.is_web_public,
                   c.history_public_to_subscribers, c.creator_id, c.date_created
            FROM json_to_recordset($5::json) AS c(
              id integer, name text, description text, rendered_description text, invite_only boolean, is_web_public boolean,
              history_public_to_subscribers boolean, creator_id integer, date_created timestamptz))
  returning "id"
),
  "added_subscription" as (
  insert into "subscriptions" ("realm_id", "user_id", "stream_id", "color") (
            SELECT $3::integer, a.user_id, a.stream_id, a.color
            FROM json_to_recordset($6::json) AS a(user_id integer, stream_id integer, color text))
  on conflict ("user_id", "stream_id") do update set "active" = $7
  returning "user_id"
),
  "removed_subscription" as (
  update "subscriptions" as "sub" set "active" = $8
  where (sub.user_id, sub.stream_id) IN (
            SELECT r.user_id, r.stream_id FROM json_to_recordset($9::json) AS r(user_id integer, stream_id integer)) and "sub"."realm_id" = $3
  returning "sub"."user_id"
),
  "membership_change"("user_id", "stream_id", "ord", "event_type") as (
        SELECT a.user_id, a.stream_id, a.ord,
               CASE WHEN EXISTS (SELECT FROM subscriptions sub WHERE sub.user_id = a.user_id AND sub.stream_id = a.stream_id)
                    THEN 302 ELSE 301 END
        FROM ROWS FROM (json_to_recordset($6::json) AS (user_id integer, stream_id integer, color text))
             WITH ORDINALITY AS a(user_id, stream_id, color, ord)
        UNION ALL
        SELECT r.user_id, r.stream_id, r.ord, 303
        FROM ROWS FROM (json_to_recordset($9::json) AS (user_id integer, stream_id integer))
             WITH ORDINALITY AS r(user_id, stream_id, ord)),
  "audited" as (
  insert into "subscription_audit_log" ("realm_id", "acting_user_id", "modified_user_id", "stream_id", "event_type", "created_at") (
            SELECT $3::integer, $10::integer, c.user_id, c.stream_id, c.event_type, statement_timestamp()
            FROM membership_change c
            WHERE (SELECT count(*) FROM membership_change) <= 100
            ORDER BY c.event_type, c.ord)
),
  "audited_together" as (
  insert into "subscription_audit_log" ("realm_id", "acting_user_id", "event_type", "new_value", "created_at") (
            SELECT $3::integer, $10::integer, min(c.event_type),
                   jsonb_agg(jsonb_build_array(c.user_id, c.stream_id, c.event_type) ORDER BY c.event_type, c.ord), statement_timestamp()
            FROM membership_change c
            HAVING count(*) > 100)
)
select (
  select count(*) as "n"
  from "new_channel"
) as "channels",
  (
  select count(*) as "n"
  from "added_subscription"
) as "added",
  (
  select count(*) as "n"
  from "removed_subscription"
) as "removed"
