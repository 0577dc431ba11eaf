CREATE OR REPLACE FUNCTION yieldstar_write_intents_v1(
    p_execution_ids text[],
    p_workflow_ids text[],
    p_reason text,
    p_relay_delay double precision,
    p_now timestamptz,
    OUT intent_ids bigint[],
    OUT wake_execution_ids text[],
    OUT wake_workflow_ids text[]
) LANGUAGE plpgsql VOLATILE
AS $$
-- One wake intent per execution, in the order given (their ids ascending in that order),
-- available p_relay_delay seconds from p_now; returned as the commit functions return
-- them. No execution (NULL): nothing written, NULLs returned.
BEGIN
    IF p_execution_ids IS NULL THEN
        RETURN;
    END IF;
    WITH woken AS (
        INSERT INTO yieldstar_wakeintent
            (execution_id, workflow_id, reason, available_at, delivered_at,
             attempts, last_error, created_at)
        SELECT w.execution_id, w.workflow_id, p_reason,
               p_now + p_relay_delay * interval '1 second', NULL, 0, '', p_now
          FROM unnest(p_execution_ids, p_workflow_ids)
               WITH ORDINALITY AS w(execution_id, workflow_id, n)
         ORDER BY w.n
        RETURNING id, execution_id, workflow_id
    )
    SELECT array_agg(woken.id ORDER BY woken.id),
           array_agg(woken.execution_id ORDER BY woken.id),
           array_agg(woken.workflow_id ORDER BY woken.id)
      INTO intent_ids, wake_execution_ids, wake_workflow_ids
      FROM woken;
END
$$;
