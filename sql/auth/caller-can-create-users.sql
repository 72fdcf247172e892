-- Built in src/http/auth.repository.ts with the lookup of src/modules/user-management/users-admin.routes.ts.
-- Prepared as s_669a893d9075d561be21fdc58842b8d7, a hash of its exact text; this one differs from it only in
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
)
select *,
  NULL as "rate_limit_accepted",
  NULL as "rate_limit_used",
  NULL as "rate_limit_now",
  NULL as "rate_limit_retry_after"
from "account"
