CREATE OR REPLACE FUNCTION yieldstar_commit_deletion_v2(
    p_name text,
    p_store_id text,
    p_instance_id text,
    p_version bigint,
    p_execution_id text,
    p_step_key text,
    p_result text,
    p_operation text,
    p_relay_delay double precision,
    OUT status text,
    OUT recorded text,
    OUT current_instance_id text,
    OUT current_version bigint,
    OUT current_state text,
    OUT intent_ids bigint[],
    OUT wake_execution_ids text[],
    OUT wake_workflow_ids text[]
) LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
-- Delete the store if it is still at (p_instance_id, p_version) (unconditionally when
-- p_instance_id is NULL), record the step result, remove its waiters and wake them.
-- Versions of the deleted instance stay as history; ledger rows stay authoritative.
-- enable_seqscan is off for the whole body, as in yieldstar_commit_mutation_v3.
DECLARE
    v_pk bigint;
    v_executions text[];
    v_workflows text[];
    v_now timestamptz := now();
BEGIN
    IF p_step_key IS NOT NULL THEN
        SELECT l.status, l.recorded INTO status, recorded
          FROM yieldstar_ledger_status_v1(p_name, p_store_id, p_execution_id, p_step_key,
                                          p_operation) l;
        IF status IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;

    SELECT s.id, s.instance_id, s.version, s.state
      INTO v_pk, current_instance_id, current_version, current_state
      FROM yieldstar_storeinstance s
     WHERE s.name = p_name AND s.store_id = p_store_id
       FOR UPDATE;
    IF NOT FOUND THEN
        status := 'missing';
        RETURN;
    END IF;
    IF p_instance_id IS NOT NULL
       AND (current_instance_id <> p_instance_id OR current_version <> p_version) THEN
        status := 'conflict';
        RETURN;
    END IF;
    current_instance_id := NULL;
    current_version := NULL;
    current_state := NULL;

    IF p_step_key IS NOT NULL AND NOT yieldstar_record_step_v1(
            p_name, p_store_id, p_execution_id, p_step_key, p_result, p_operation, v_now) THEN
        SELECT l.status, l.recorded INTO status, recorded
          FROM yieldstar_ledger_status_v1(p_name, p_store_id, p_execution_id, p_step_key,
                                          p_operation) l;
        RETURN;
    END IF;

    DELETE FROM yieldstar_waiterpath WHERE store_pk = v_pk;
    WITH gone AS (
        DELETE FROM yieldstar_waiter WHERE store_pk = v_pk
        RETURNING id, execution_id, workflow_id
    )
    SELECT array_agg(g.execution_id ORDER BY g.first_id),
           array_agg(g.workflow_id ORDER BY g.first_id)
      INTO v_executions, v_workflows
      FROM (SELECT execution_id, workflow_id, min(id) AS first_id
              FROM gone GROUP BY execution_id, workflow_id) g;
    SELECT i.intent_ids, i.wake_execution_ids, i.wake_workflow_ids
      INTO intent_ids, wake_execution_ids, wake_workflow_ids
      FROM yieldstar_write_intents_v1(v_executions, v_workflows, 'delete', p_relay_delay, v_now) i;
    DELETE FROM yieldstar_storeinstance WHERE id = v_pk;
    status := 'committed';
END
$$;
