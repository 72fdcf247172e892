-- Built in src/http/auth.repository.ts with the lookup of src/modules/users/users.repository.ts.
-- Prepared as s_c74dd7b8885cfab20989a509c9ba1947, a hash of its exact text; this one differs from it only in
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
    "users"."id",
    "users"."bot_type",
    "users"."email_address_visibility",
    "users"."delivery_email",
    "users"."avatar_version",
    "users"."role",
    "users"."full_name",
    "users"."timezone",
    "users"."is_active",
    "users"."date_joined",
    "users"."avatar_source",
    "users"."is_imported_stub",
    "users"."is_deleted",
    "users"."bot_owner_id"
  from "request" as "r"
  inner join lateral (
    select "users".*
    from "users"
    where "users"."api_key_hash" = "r"."key_hash"
    offset 0
  ) as "caller" on true
  inner join "realms" as "caller_realm" on "caller_realm"."id" = "caller"."realm_id"
  left join lateral (
    select "users"."id",
      "users"."bot_type",
      "users"."email_address_visibility",
      "users"."delivery_email",
      "users"."avatar_version",
      "users"."role",
      "users"."full_name",
      "users"."timezone",
      "users"."is_active",
      "users"."date_joined",
      "users"."avatar_source",
      "users"."is_imported_stub",
      "users"."is_deleted",
      "users"."bot_owner_id"
    from "users"
    where "users"."id" = "r"."lookup_argument" and "users"."realm_id" = "caller"."realm_id"
    offset 0
  ) as "users" on true
)
select *,
  NULL as "rate_limit_accepted",
  NULL as "rate_limit_used",
  NULL as "rate_limit_now",
  NULL as "rate_limit_retry_after"
from "account"
