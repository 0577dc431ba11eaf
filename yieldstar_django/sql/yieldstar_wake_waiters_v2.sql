CREATE OR REPLACE FUNCTION yieldstar_wake_waiters_v2(
    p_store_pk bigint,
    p_wake_all boolean,
    p_read_keys text[],
    p_prefix_keys text[],
    p_now timestamptz,
    p_handed text[]
) RETURNS TABLE (first_id bigint, execution_id text, workflow_id text)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
-- The executions a change of store p_store_pk wakes, in registration order: those with a
-- matching waiter (yieldstar_waiter_ids_v1; every waiter of the store: p_wake_all) not
-- woken since it registered, and of the matching waiters of one cohort (takes with the
-- same selector, yieldstar_django.core.cohorts) only the first whose row no other
-- transaction holds (those before it are woken unmarked: a transaction removing one hands
-- its wake on, or rolls back and leaves it owed); of each cohort of p_handed (whose
-- waiter that checked for it matched, in this commit) its first unwoken waiter, whether
-- the change touched it or not. Those waiters are marked woken
-- (woken_at). A waiter is thus
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
    v_cohort text;
    v_marked text[] := '{}';
    v_woke bigint[] := '{}';
    v_woke_executions text[] := '{}';
    v_woke_workflows text[] := '{}';
BEGIN
    IF p_wake_all THEN
        v_ids := ARRAY(SELECT w.id FROM yieldstar_waiter w
                        WHERE w.store_pk = p_store_pk ORDER BY w.id);
    ELSE
        v_ids := yieldstar_waiter_ids_v1(p_store_pk, p_read_keys, p_prefix_keys);
    END IF;
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT w.execution_id, w.workflow_id, w.woken_at, w.cohort
          INTO v_execution, v_workflow, v_woken, v_cohort
          FROM yieldstar_waiter w WHERE w.id = v_id;
        IF FOUND AND v_woken IS NULL THEN
            IF v_cohort IS NULL THEN
                v_unwoken := v_unwoken || v_id;
                v_executions := v_executions || v_execution;
                v_workflows := v_workflows || v_workflow;
            ELSIF NOT (v_cohort = ANY(v_marked) OR v_cohort = ANY(p_handed)) THEN
                UPDATE yieldstar_waiter w SET woken_at = p_now
                 WHERE w.id IN (SELECT l.id FROM yieldstar_waiter l WHERE l.id = v_id
                                   FOR NO KEY UPDATE SKIP LOCKED);
                IF FOUND THEN
                    v_marked := v_marked || v_cohort;
                END IF;
                v_woke := v_woke || v_id;
                v_woke_executions := v_woke_executions || v_execution;
                v_woke_workflows := v_woke_workflows || v_workflow;
            END IF;
        END IF;
    END LOOP;
    -- Each cohort of p_handed (its waiter that checked for it matched): its first waiter
    -- not woken and not held elsewhere, whatever the change touched.
    FOREACH v_cohort IN ARRAY p_handed LOOP
        SELECT w.id, w.execution_id, w.workflow_id INTO v_id, v_execution, v_workflow
          FROM yieldstar_waiter w
         WHERE w.store_pk = p_store_pk AND w.cohort = v_cohort AND w.woken_at IS NULL
         ORDER BY w.id LIMIT 1
           FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE yieldstar_waiter w SET woken_at = p_now WHERE w.id = v_id;
            v_woke := v_woke || v_id;
            v_woke_executions := v_woke_executions || v_execution;
            v_woke_workflows := v_woke_workflows || v_workflow;
        END IF;
    END LOOP;
    IF cardinality(v_unwoken) > 0 THEN
        UPDATE yieldstar_waiter w SET woken_at = p_now
         WHERE w.id IN (SELECT l.id FROM yieldstar_waiter l WHERE l.id = ANY(v_unwoken)
                           FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(v_unwoken) + cardinality(v_woke) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT min(m.id), m.execution_id, m.workflow_id
          FROM unnest(v_unwoken || v_woke, v_executions || v_woke_executions,
                      v_workflows || v_woke_workflows) AS m(id, execution_id, workflow_id)
         GROUP BY m.execution_id, m.workflow_id ORDER BY 1;
END
$$;
