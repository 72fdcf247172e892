-- A settings request that changes more than 100 (channel, setting) pairs writes one audit row for
-- all of them (src/modules/subscriptions/subscriptions.repository.ts): a settings row (304) with
-- neither stream_id nor property, whose old_value and new_value hold [stream_id, property, value]
-- for each pair. The previous release's inserts all still pass during a rolling deploy.
ALTER TABLE subscription_audit_log ALTER COLUMN stream_id DROP NOT NULL;
ALTER TABLE subscription_audit_log
  DROP CONSTRAINT subscription_audit_log_property_check,
  ADD CONSTRAINT subscription_audit_log_property_check
    CHECK ((event_type = 304) = (property IS NOT NULL) OR (event_type = 304 AND property IS NULL AND stream_id IS NULL));
