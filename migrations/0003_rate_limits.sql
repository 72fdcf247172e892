-- Per-user sliding-log rate limiting shared by every instance (docs/api.md §1.10). One row per user
-- holding the times of the requests accepted within the current window (at most
-- RATE_LIMIT_MAX_REQUESTS of them): one upsert per request both decides and records, and the row
-- lock taken by ON CONFLICT DO UPDATE makes concurrent requests of one user queue up, so the
-- limit holds exactly under concurrency. Old times are dropped by that same upsert, so the table
-- never grows beyond one small row per user.
--
-- UNLOGGED: the table is rewritten on every request; skipping the write-ahead log keeps that
-- cheap. A crash empties it (everyone starts a fresh window), which is acceptable for a limiter.
CREATE UNLOGGED TABLE rate_limit_logs (
  user_id          integer       PRIMARY KEY REFERENCES users (id),
  realm_id         integer       NOT NULL REFERENCES realms (id),
  -- Accepted requests newer than (last_checked_at − window), oldest first (database clock).
  hits             timestamptz[] NOT NULL,
  -- The latest decision, read back by the same statement's RETURNING.
  last_checked_at  timestamptz   NOT NULL,
  last_accepted    boolean       NOT NULL
) WITH (fillfactor = 70);
