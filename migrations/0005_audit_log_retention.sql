-- The periodic sweep deletes subscription audit rows older than AUDIT_LOG_RETENTION_DAYS. Rows are
-- appended in time order, so a BRIN index (a few pages, almost free to maintain on insert) finds
-- the old ones without a B-tree on every row of the table's hottest insert.
CREATE INDEX subscription_audit_log_created_brin ON subscription_audit_log USING brin (created_at);
