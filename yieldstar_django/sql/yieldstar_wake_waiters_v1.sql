CREATE OR REPLACE FUNCTION yieldstar_wake_waiters_v1(
    p_store_pk bigint,
    p_wake_all boolean,
    p_read_keys text[],
    p_prefix_keys text[],
    p_now timestamptz
) RETURNS TABLE (first_id bigint, execution_id text, workflow_id text)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
-- The executions a change of store p_store_pk wakes, in registration order: those with a
-- matching waiter (yieldstar_waiter_ids_v1; every waiter of the store: p_wake_all) not
-- woken since it registered. Those waiters are marked woken (woken_at). A waiter is thus
-- woken once per registration: its execution registers it again (woken_at reset) when its
-- step still has to wait, and that registration sees every change since the step read, so
-- no wake is lost, and N takers woken by N items are not woken again by each other's
-- claims. A waiter row locked by another transaction (its execution removing it in a
-- commit that waits for this store's row) is woken but not marked: SKIP LOCKED, no wait.
DECLARE
    v_ids bigint[];
    v_id bigint;
    v_unwoken bigint[] := '{}';
    v_executions text[] := '{}';
    v_workflows text[] := '{}';
    v_execution text;
    v_workflow text;
    v_woken timestamptz;
BEGIN
    IF p_wake_all THEN
        v_ids := ARRAY(SELECT w.id FROM yieldstar_waiter w
                        WHERE w.store_pk = p_store_pk ORDER BY w.id);
    ELSE
        v_ids := yieldstar_waiter_ids_v1(p_store_pk, p_read_keys, p_prefix_keys);
    END IF;
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT w.execution_id, w.workflow_id, w.woken_at INTO v_execution, v_workflow, v_woken
          FROM yieldstar_waiter w WHERE w.id = v_id;
        IF FOUND AND v_woken IS NULL THEN
            v_unwoken := v_unwoken || v_id;
            v_executions := v_executions || v_execution;
            v_workflows := v_workflows || v_workflow;
        END IF;
    END LOOP;
    IF cardinality(v_unwoken) = 0 THEN
        RETURN;
    END IF;
    UPDATE yieldstar_waiter w SET woken_at = p_now
     WHERE w.id IN (SELECT l.id FROM yieldstar_waiter l WHERE l.id = ANY(v_unwoken)
                       FOR NO KEY UPDATE SKIP LOCKED);
    RETURN QUERY
        SELECT min(m.id), m.execution_id, m.workflow_id
          FROM unnest(v_unwoken, v_executions, v_workflows) AS m(id, execution_id, workflow_id)
         GROUP BY m.execution_id, m.workflow_id ORDER BY 1;
END
$$;
