CREATE OR REPLACE FUNCTION yieldstar_ledger_status_v1(
    p_name text,
    p_store_id text,
    p_execution_id text,
    p_step_key text,
    p_operation text,
    OUT status text,
    OUT recorded text
) LANGUAGE plpgsql STABLE
AS $$
-- A recorded step: its result, and what it means to a commit of p_operation
-- (yieldstar_recorded_status_v1); both NULL when the step is not in the ledger.
-- PL/pgSQL, as the helpers below, so that each session plans its statements once.
BEGIN
    SELECT yieldstar_recorded_status_v1(a.operation, p_operation), a.result
      INTO status, recorded
      FROM yieldstar_appliedstep a
     WHERE a.store_name = p_name AND a.store_id = p_store_id
       AND a.execution_id = p_execution_id AND a.step_key = p_step_key;
END
$$;
