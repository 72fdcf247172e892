-- Built in src/modules/users/users.repository.ts.
-- Prepared as s_8ed551bf572457b1af2ebb3268b4cb1a, a hash of its exact text; this one differs from it only in
-- the line breaks and indentation added for reading. Written by `npm run sql` from
-- scripts/lib/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.
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
  "users"."bot_owner_id",
  "users"."realm_id",
  exists (
  select 1 as "one"
  from "subscriptions" as "mine"
  inner join "subscriptions" as "theirs" on "theirs"."stream_id" = "mine"."stream_id"
  where "mine"."user_id" = $1 and "mine"."active" = $2 and "mine"."realm_id" = "users"."realm_id" and "theirs"."user_id" = "users"."id" and "theirs"."active" = $3
) as "shares_channel"
from "users"
where "users"."realm_id" = $4 and "users"."id" = $5
