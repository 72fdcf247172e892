-- Built in src/modules/users/users.repository.ts.
-- Prepared as s_607a53bb2477b1f334335d7a7ecaa5ea, a hash of its exact text; this one differs from it only in
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
  "users"."realm_id"
from "users"
where "users"."realm_id" = $1 and "users"."id" = $2
