-- The client's user_list_incomplete capability, recorded with its queue: Zulip's Tornado drops an
-- inaccessible user's realm_user/add placeholder for such clients (process_realm_user_add_event),
-- so the writes that append that placeholder skip these queues.
ALTER TABLE event_queues ADD COLUMN user_list_incomplete boolean NOT NULL DEFAULT false;
