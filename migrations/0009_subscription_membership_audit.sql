-- Subscription audit rows for membership changes, as Zulip's RealmAuditLog writes them
-- (zerver/actions/streams.py bulk_add_subs_to_db_with_logging, bulk_remove_subscriptions):
-- event_type is Zulip's number: 301 SUBSCRIPTION_CREATED, 302 SUBSCRIPTION_ACTIVATED,
-- 303 SUBSCRIPTION_DEACTIVATED, 304 SUBSCRIPTION_PROPERTY_CHANGED (every row before this one; the
-- default, so the rows of a settings change need not name it).
ALTER TABLE subscription_audit_log ADD COLUMN event_type smallint NOT NULL DEFAULT 304;

-- The user whose subscription changed (Zulip's modified_user): the acting user for a settings
-- change, any principal for a membership change. Nullable: during a rolling deploy the instances
-- still on the previous release write settings rows without it (a NOT NULL would turn their
-- settings updates into 500s until they are replaced); such a row's modified user is its acting
-- user, as every settings row's is.
ALTER TABLE subscription_audit_log ADD COLUMN modified_user_id integer;
UPDATE subscription_audit_log SET modified_user_id = acting_user_id;

-- No acting user: an operator's change through the admin command line (Zulip's acting_user=None).
ALTER TABLE subscription_audit_log ALTER COLUMN acting_user_id DROP NOT NULL;

-- Only a settings change names a property (old and new values stay NULL for membership rows).
ALTER TABLE subscription_audit_log ALTER COLUMN property DROP NOT NULL;
ALTER TABLE subscription_audit_log
  ADD CONSTRAINT subscription_audit_log_property_check CHECK ((event_type = 304) = (property IS NOT NULL));
