-- Built in src/modules/subscriptions/subscriptions.repository.ts.
-- Prepared as s_c4a0206647c0296830295617980cf6cd, a hash of its exact text; this one differs from it only in
-- the line breaks and indentation added for reading. Written by `npm run sql` from
-- scripts/lib/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.
with "incoming_item"("payload", "ord", "type", "set_no") as materialized (
    SELECT e.payload, e.ord, e.payload->>'type', 1
    FROM json_array_elements($1::json) WITH ORDINALITY AS e(payload, ord)),
  "recipient"("set_no", "user_id") as (SELECT 1, $2::integer),
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
  where "q"."user_id" = $2
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
  where "eq"."user_id" = $2 and "eq"."id" = "c"."queue_id" and "eq"."next_event_id" + "c"."n" - "eq"."last_acked_id" <= $3::bigint + 1
  returning "eq"."id",
    "eq"."next_event_id" - "c"."n" as "first_id",
    pg_notify('zulip_events', eq.id::text) as "notified"
),
  "dropped_queue" as (
  delete
  from "event_queues"
  where "event_queues"."user_id" = $2 and "event_queues"."id" in (
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
    $4::integer as "realm_id",
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
  "entry"("ord", "stream_id", "property", "value") as (
        SELECT e.ord, (e.item->>0)::integer, e.item->>1, e.item->2
        FROM jsonb_array_elements($5::jsonb) WITH ORDINALITY AS e(item, ord)),
  "setting_change" as (
  select "e"."stream_id",
    "e"."property",
    min("e"."ord") as "ord",
    (array_agg(e.value ORDER BY e.ord DESC))[1] as "value"
  from "entry" as "e"
  group by "e"."stream_id",
    "e"."property"
),
  "final_value" as (
        SELECT * FROM json_to_recordset($6::json) AS v(stream_id integer, color text, is_muted boolean, pin_to_top boolean, desktop_notifications boolean, audible_notifications boolean, push_notifications boolean, email_notifications boolean, wildcard_mentions_notify boolean)),
  "channel" as (
  select "s"."id",
    "s"."invite_only",
    "s"."is_web_public",
    "sub"."active",
    json_build_object('color', "sub"."color", 'is_muted', "sub"."is_muted", 'pin_to_top', "sub"."pin_to_top", 'desktop_notifications', "sub"."desktop_notifications", 'audible_notifications', "sub"."audible_notifications", 'push_notifications', "sub"."push_notifications", 'email_notifications', "sub"."email_notifications", 'wildcard_mentions_notify', "sub"."wildcard_mentions_notify") as "settings"
  from "streams" as "s"
  left join "subscriptions" as "sub" on "sub"."stream_id" = "s"."id" and "sub"."user_id" = $2
  where "s"."realm_id" = $4 and "s"."deactivated" = false and "s"."id" = ANY($7::integer[])
),
  "failure" as (
  select "e"."ord",
    "e"."stream_id",
    ("c"."id" is null or not ("c"."is_web_public" = true or "c"."active" is true or (NOT $8::boolean and "c"."invite_only" = false))) as "invalid_channel"
  from "entry" as "e"
  left join "channel" as "c" on "c"."id" = "e"."stream_id"
  where "c"."active" is not true
  order by "e"."ord"
  limit 1
),
  "updated" as (
  update "subscriptions" as "sub" set "color" = coalesce("v"."color", "sub"."color"),
    "is_muted" = coalesce("v"."is_muted", "sub"."is_muted"),
    "pin_to_top" = coalesce("v"."pin_to_top", "sub"."pin_to_top"),
    "desktop_notifications" = coalesce("v"."desktop_notifications", "sub"."desktop_notifications"),
    "audible_notifications" = coalesce("v"."audible_notifications", "sub"."audible_notifications"),
    "push_notifications" = coalesce("v"."push_notifications", "sub"."push_notifications"),
    "email_notifications" = coalesce("v"."email_notifications", "sub"."email_notifications"),
    "wildcard_mentions_notify" = coalesce("v"."wildcard_mentions_notify", "sub"."wildcard_mentions_notify")
  from "final_value" as "v"
  where $9::boolean and "sub"."user_id" = $2 and "sub"."realm_id" = $4 and "sub"."stream_id" = "v"."stream_id"
),
  "audited" as (
  insert into "subscription_audit_log" ("realm_id", "acting_user_id", "modified_user_id", "stream_id", "property", "old_value", "new_value", "created_at")
  select $4::integer as "realm_id",
    $2::integer as "user_id",
    $2::integer as "modified_user_id",
    "e"."stream_id",
    "e"."property",
    (c.settings -> e.property)::jsonb as "old_value",
    "e"."value",
    clock_timestamp() as "created_at"
  from "setting_change" as "e"
  inner join "channel" as "c" on "c"."id" = "e"."stream_id"
  where $9::boolean and (SELECT count(*) FROM setting_change) <= 100
  order by "e"."ord"
),
  "audited_together" as (
  insert into "subscription_audit_log" ("realm_id", "acting_user_id", "modified_user_id", "stream_id", "property", "old_value", "new_value", "created_at")
  select $4::integer as "realm_id",
    $2::integer as "user_id",
    $2::integer as "modified_user_id",
    NULL::integer as "stream_id",
    NULL::text as "property",
    jsonb_agg(jsonb_build_array(e.stream_id, e.property, (c.settings -> e.property)::jsonb) ORDER BY e.ord) as "old_value",
    jsonb_agg(jsonb_build_array(e.stream_id, e.property, e.value) ORDER BY e.ord) as "new_value",
    clock_timestamp() as "created_at"
  from "setting_change" as "e"
  inner join "channel" as "c" on "c"."id" = "e"."stream_id"
  where $9::boolean
  having count(*) > 100
)
select (
  select refuse_write(CASE WHEN invalid_channel THEN 'invalid channel' ELSE 'not subscribed' END, ord || ':' || stream_id) as "refused"
  from "failure"
) as "refused"
