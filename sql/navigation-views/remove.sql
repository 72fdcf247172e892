-- Built in src/modules/navigation-views/navigation-views.repository.ts.
-- Prepared as s_b069f4b1ff410cbec41c48f68c628d9d, a hash of its exact text; this one differs from it only in
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
  "deleted" as (
  delete
  from "navigation_views"
  where "user_id" = $2 and "realm_id" = $4 and "fragment" = $5
  returning "id"
)
select case when not exists (
  select "id"
  from "deleted"
) then refuse_write('view missing', '') end as "refused"
