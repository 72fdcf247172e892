-- A user's write lock (src/db/user-transactions.ts) taken without waiting, for the small writes on
-- the shared write connections: waiting there for a lock another instance holds would hold up
-- every write of the group and every one queued behind it on that connection. When the lock is
-- held, the statement fails with SQLSTATE ZU002 and its transaction rolls back; the server then
-- sends that write again on a connection of its own, with pg_advisory_xact_lock, which waits.
-- (An error from plain SQL would need a trick that the planner's constant folding must not
-- evaluate early; a function of its own names the refusal with its own SQLSTATE.)
CREATE FUNCTION user_lock_now(namespace integer, user_id integer) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF NOT pg_try_advisory_xact_lock(namespace, user_id) THEN
    RAISE EXCEPTION USING ERRCODE = 'ZU002', MESSAGE = 'the user''s lock is held by another transaction';
  END IF;
END
$$;
