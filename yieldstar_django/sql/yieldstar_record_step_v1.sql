CREATE OR REPLACE FUNCTION yieldstar_record_step_v1(
    p_name text,
    p_store_id text,
    p_execution_id text,
    p_step_key text,
    p_result text,
    p_operation text,
    p_now timestamptz
) RETURNS boolean LANGUAGE plpgsql VOLATILE
AS $$
-- Insert the step's ledger row; false if a concurrent commit of the same step has (the
-- insert waits for it to finish, so yieldstar_ledger_status_v1 then finds its row).
BEGIN
    INSERT INTO yieldstar_appliedstep
        (store_name, store_id, execution_id, step_key, result, operation, created_at)
    VALUES (p_name, p_store_id, p_execution_id, p_step_key, p_result, p_operation, p_now)
    ON CONFLICT (store_name, store_id, execution_id, step_key) DO NOTHING;
    RETURN FOUND;
END
$$;
