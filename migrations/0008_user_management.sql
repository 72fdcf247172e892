-- Users managed through the API (POST /users, PATCH/DELETE /users/{id}, reactivate).

-- Zulip's special permission for POST /users: false for everyone, owners included, until an
-- operator grants it (admin CLI: user create --can-create-users).
ALTER TABLE users ADD COLUMN can_create_users boolean NOT NULL DEFAULT false;

-- The events of a change to a user go to every queue of the organization whose user may see it
-- (src/modules/events/realm-events.ts): found by organization, not by user.
CREATE INDEX event_queues_realm_idx ON event_queues (realm_id);
