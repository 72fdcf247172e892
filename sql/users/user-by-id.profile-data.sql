-- Built in src/modules/users/users.repository.ts.
-- Prepared as s_55f544f81570131959fe206c60434946, a hash of its exact text; this one differs from it only in
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
  (
  select coalesce(json_agg(agg), '[]')
  from (
    select "v"."field_id" as "fieldId",
      "f"."field_type" as "fieldType",
      "v"."value",
      "v"."rendered_value" as "renderedValue"
    from "custom_profile_field_values" as "v"
    inner join "custom_profile_fields" as "f" on "f"."id" = "v"."field_id"
    where "v"."user_id" = "users"."id" and "v"."realm_id" = "users"."realm_id"
    order by "v"."field_id"
  ) as agg
) as "profile_values"
from "users"
where "users"."realm_id" = $1 and "users"."id" = $2
