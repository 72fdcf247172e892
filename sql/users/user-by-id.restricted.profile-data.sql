-- Built in src/modules/users/users.repository.ts.
-- Prepared as s_740bc6ef41bbba82cb579ff92a62aff7, a hash of its exact text; this one differs from it only in
-- the line breaks and indentation added for reading. Written by `npm run sql` from
-- scripts/lib/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.
select "users"."id",
  "users"."delivery_email",
  "users"."full_name",
  "users"."date_joined",
  "users"."is_active",
  "users"."role",
  "users"."bot_type",
  "users"."bot_owner_id",
  "users"."timezone",
  "users"."avatar_source",
  "users"."avatar_version",
  "users"."email_address_visibility",
  "users"."is_imported_stub",
  "users"."is_deleted",
  "users"."realm_id",
  (
  select coalesce(json_agg(agg), '[]')
  from (
    select "v"."field_id",
      "f"."field_type",
      "v"."value",
      "v"."rendered_value"
    from "custom_profile_field_values" as "v"
    inner join "custom_profile_fields" as "f" on "f"."id" = "v"."field_id"
    where "v"."user_id" = "users"."id" and "v"."realm_id" = "users"."realm_id"
    order by "v"."field_id"
  ) as agg
) as "profile_values",
  exists (
  select 1 as "one"
  from "subscriptions" as "mine"
  inner join "subscriptions" as "theirs" on "theirs"."stream_id" = "mine"."stream_id"
  where "mine"."user_id" = $1 and "mine"."active" = $2 and "mine"."realm_id" = "users"."realm_id" and "theirs"."user_id" = "users"."id" and "theirs"."active" = $3
) as "shares_channel"
from "users"
where "users"."realm_id" = $4 and "users"."id" = $5
