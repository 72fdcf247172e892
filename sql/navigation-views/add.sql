-- Built in src/modules/navigation-views/navigation-views.repository.ts.
-- Prepared as s_d95fa713f38f40f5c521f60ad5fc25d3, a hash of its exact text; this one differs from it only in
-- the line breaks and indentation added for reading. Written by `npm run sql` from
-- src/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.
with "incoming_event"("payload", "ord", "type", "user_id") as (
    SELECT e.payload, e.ord, e.payload->>'type', $1::integer
    FROM json_array_elements($2::json) WITH ORDINALITY AS e(payload, ord)),
  "accepting" as (
  select "q"."id" as "queue_id",
    "t"."type",
    "t"."user_id"
  from "event_queues" as "q"
  inner join (
    select distinct "user_id",
      "type"
    from "incoming_event"
  ) as "t" on "q"."user_id" = "t"."user_id" and q.event_types IS NULL OR t.type = ANY (q.event_types)
  where "q"."user_id" = $1
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
  "event_count" as (
  select "a"."queue_id",
    count(*) as "n"
  from "accepting" as "a"
  inner join "incoming_event" as "i" on "i"."type" = "a"."type" and "i"."user_id" = "a"."user_id"
  group by "a"."queue_id"
),
  "bumped_queue" as (
  update "event_queues" as "eq" set "next_event_id" = "eq"."next_event_id" + "c"."n"
  from "event_count" as "c"
  where "eq"."user_id" = $1 and "eq"."id" = "c"."queue_id" and "eq"."next_event_id" + "c"."n" - "eq"."last_acked_id" <= $3::bigint + 1
  returning "eq"."id",
    "eq"."next_event_id" - "c"."n" as "first_id",
    pg_notify('zulip_events', eq.id::text) as "notified"
),
  "dropped_queue" as (
  delete
  from "event_queues"
  where "event_queues"."user_id" = $1 and "event_queues"."id" in (
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
    "b"."first_id" - 1 + row_number() over(partition by "b"."id" order by "i"."ord") as "id",
    $4::integer as "realm_id",
    "i"."payload"
  from "bumped_queue" as "b"
  inner join "accepting" as "a" on "a"."queue_id" = "b"."id"
  inner join "incoming_event" as "i" on "i"."type" = "a"."type" and "i"."user_id" = "a"."user_id"
),
  "clash" as (
  select "v"."id"
  from "navigation_views" as "v"
  where "v"."user_id" = $1 and "v"."realm_id" = $4 and ("v"."fragment" = $5::text or "v"."name" = $6::text)
  limit 1
),
  "inserted" as (
  insert into "navigation_views" ("realm_id", "user_id", "fragment", "is_pinned", "name")
  select $4::integer as "realm_id",
    $1::integer as "user_id",
    $5::text as "fragment",
    $7::boolean as "is_pinned",
    $6::text as "name"
  where not exists (
    select "id"
    from "clash"
  )
  returning "id"
)
select (
  select refuse_write('view exists', '') as "refused"
  from "clash"
) as "refused"
