-- A write's checks run in SQL, in the statement that writes (one round trip, see
-- src/db/user-transactions.ts). When a check fails, the statement calls this: the error aborts the
-- statement and the transaction around it (the events statement behind it fails too, and COMMIT
-- becomes ROLLBACK), and the server turns SQLSTATE ZU001 and its message back into the API's error.
CREATE FUNCTION refuse_write(reason text, detail text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'ZU001', MESSAGE = reason, DETAIL = detail;
END
$$;
