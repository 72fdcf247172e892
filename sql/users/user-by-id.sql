-- Built in src/modules/users/users.repository.ts.
-- Prepared as s_e627d0985b15bac7c4992d44a57497f3, a hash of its exact text; this one differs from it only in
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
  "users"."realm_id"
from "users"
where "users"."realm_id" = $1 and "users"."id" = $2
