CREATE OR REPLACE FUNCTION yieldstar_recorded_status_v1(
    p_recorded_operation text,
    p_operation text
) RETURNS text LANGUAGE sql IMMUTABLE AS $$
-- The status of a commit that found its step id in the ledger: the recorded result is
-- replayed to an operation of the same kind ('already-applied'); another kind is a
-- 'step-mismatch'. A row older than the operation column ('') matches any operation.
SELECT CASE
    WHEN p_recorded_operation <> '' AND p_recorded_operation <> p_operation
        THEN 'step-mismatch'
    ELSE 'already-applied'
END
$$;
