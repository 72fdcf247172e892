-- Built in src/http/auth.repository.ts with the lookup of src/modules/user-management/users-admin.routes.ts.
-- Prepared as s_9c26acc7591c62720d376a1678eeceeb, a hash of its exact text; this one differs from it only in
-- the line breaks and indentation added for reading. Written by `npm run sql` from
-- scripts/lib/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.
with "request"("ord", "key_hash", "email", "subdomain", "lookup_argument") as (
        SELECT * FROM jsonb_to_recordset($1::jsonb)
          AS r(ord integer, key_hash text, email text, subdomain text, lookup_argument integer)),
  "account" as (
  select "r"."ord",
    "r"."lookup_argument",
    "caller"."id" as "caller_id",
    "caller"."realm_id" as "caller_realm_id",
    "caller"."delivery_email" as "caller_delivery_email",
    "caller"."role" as "caller_role",
    "caller"."bot_type" as "caller_bot_type",
    "caller"."is_active" as "caller_is_active",
    "caller"."api_key_hash" as "caller_api_key_hash",
    "caller_realm"."subdomain" as "caller_realm_subdomain",
    "caller_realm"."deactivated" as "caller_realm_deactivated",
    "caller_realm"."can_access_all_users_group" as "caller_realm_can_access_all_users_group",
    lower("caller"."delivery_email") = lower("r"."email") as "caller_email_matches",
    "caller_realm"."subdomain" = "r"."subdomain" as "caller_subdomain_matches",
    "caller"."can_create_users"
  from "request" as "r"
  inner join lateral (
    select "users".*
    from "users"
    where "users"."api_key_hash" = "r"."key_hash"
    offset 0
  ) as "caller" on true
  inner join "realms" as "caller_realm" on "caller_realm"."id" = "caller"."realm_id"
),
  "decision" as (
  INSERT INTO rate_limit_logs AS log (user_id, realm_id, hits, last_checked_at, last_accepted)
  SELECT account.caller_id, account.caller_realm_id, ARRAY[clock.t], clock.t, true
  FROM account, (SELECT clock_timestamp() AS t) AS clock
  WHERE account.caller_email_matches AND account.caller_subdomain_matches AND account.caller_is_active
    AND NOT account.caller_realm_deactivated AND account.caller_bot_type IS DISTINCT FROM 2
  ORDER BY account.caller_id
  ON CONFLICT (user_id) DO UPDATE SET (hits, last_checked_at, last_accepted) = (
    SELECT CASE WHEN cardinality(recent.hits) < $2::integer THEN recent.hits || excluded.last_checked_at ELSE recent.hits END,
           excluded.last_checked_at,
           cardinality(recent.hits) < $2::integer
    FROM (
      SELECT ARRAY(SELECT hit FROM unnest(log.hits) AS hit WHERE hit > excluded.last_checked_at - ($3::integer * interval '1 second') ORDER BY hit) AS hits
      OFFSET 0
    ) AS recent
  )
  RETURNING user_id,
            last_accepted AS rate_limit_accepted,
            cardinality(hits) AS rate_limit_used,
            extract(epoch FROM last_checked_at)::float8 AS rate_limit_now,
            extract(epoch FROM hits[cardinality(hits) - $2::integer + 1] + ($3::integer * interval '1 second') - last_checked_at)::float8 AS rate_limit_retry_after
)
select "account".*,
  "decision"."rate_limit_accepted",
  "decision"."rate_limit_used",
  "decision"."rate_limit_now",
  "decision"."rate_limit_retry_after"
from "account"
left join "decision" on "decision"."user_id" = "account"."caller_id"
