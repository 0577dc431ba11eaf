CREATE OR REPLACE FUNCTION yieldstar_matching_waiters_v1(
    p_store_pk bigint,
    p_wake_all boolean,
    p_read_keys text[],
    p_prefix_keys text[]
) RETURNS TABLE (first_id bigint, execution_id text, workflow_id text)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
-- The executions a change of store p_store_pk wakes, in registration order (first_id: the
-- smallest waiter id of the execution). Every table access is an equality on all the
-- columns of an index it names (yieldstar_waiterpath_match's (store_pk, kind, path), the
-- waiter's primary key or its store_pk index), one key at a time, so its plan is an index
-- probe whatever the statistics say: never ANALYZEd, or taken when the tables were empty
-- and cached by a long-lived connection (a generic plan is kept until the next ANALYZE).
-- enable_seqscan = off takes the one remaining alternative, a sequential scan, away.
DECLARE
    v_ids bigint[] := '{}';
    v_found bigint[] := '{}';
    v_executions text[] := '{}';
    v_workflows text[] := '{}';
    v_key text;
    v_id bigint;
    v_execution text;
    v_workflow text;
BEGIN
    IF p_wake_all THEN
        RETURN QUERY
            SELECT min(w.id), w.execution_id::text, w.workflow_id::text
              FROM yieldstar_waiter w WHERE w.store_pk = p_store_pk
             GROUP BY w.execution_id, w.workflow_id ORDER BY 1;
        RETURN;
    END IF;
    -- READ rows whose key is a changed path or one of its prefixes.
    FOREACH v_key IN ARRAY coalesce(p_read_keys, '{}') LOOP
        v_ids := v_ids || ARRAY(
            SELECT p.waiter_id FROM yieldstar_waiterpath p
             WHERE p.store_pk = p_store_pk AND p.kind = 0 AND p.path = v_key);
    END LOOP;
    -- PREFIX rows whose key is a changed path.
    FOREACH v_key IN ARRAY coalesce(p_prefix_keys, '{}') LOOP
        v_ids := v_ids || ARRAY(
            SELECT p.waiter_id FROM yieldstar_waiterpath p
             WHERE p.store_pk = p_store_pk AND p.kind = 1 AND p.path = v_key);
    END LOOP;
    -- ALWAYS rows (waiters that observed another instance).
    v_ids := v_ids || ARRAY(
        SELECT p.waiter_id FROM yieldstar_waiterpath p
         WHERE p.store_pk = p_store_pk AND p.kind = 2);
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    -- One primary-key probe per distinct waiter (its row may be gone: removed meanwhile),
    -- then one row per execution, from arrays: no table is read after the probes.
    FOR v_id IN SELECT DISTINCT u.id FROM unnest(v_ids) AS u(id) LOOP
        SELECT w.execution_id, w.workflow_id INTO v_execution, v_workflow
          FROM yieldstar_waiter w WHERE w.id = v_id;
        IF FOUND THEN
            v_found := v_found || v_id;
            v_executions := v_executions || v_execution;
            v_workflows := v_workflows || v_workflow;
        END IF;
    END LOOP;
    RETURN QUERY
        SELECT min(m.id), m.execution_id, m.workflow_id
          FROM unnest(v_found, v_executions, v_workflows) AS m(id, execution_id, workflow_id)
         GROUP BY m.execution_id, m.workflow_id ORDER BY 1;
END
$$;
