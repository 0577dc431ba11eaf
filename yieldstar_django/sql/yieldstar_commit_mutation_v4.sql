CREATE OR REPLACE FUNCTION yieldstar_commit_mutation_v4(
    p_name text,
    p_store_id text,
    p_instance_id text,
    p_version bigint,
    p_created boolean,
    p_initial_state text,
    p_state text,
    p_changed_paths text,
    p_wake_all boolean,
    p_read_keys text[],
    p_prefix_keys text[],
    p_execution_id text,
    p_step_key text,
    p_result text,
    p_operation text,
    p_keep_state boolean,
    p_history_limit bigint,
    p_relay_delay double precision,
    p_unwait_keys text[],
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
SET plan_cache_mode = force_generic_plan
AS $$
-- The store commit. Compare (instance_id, version), write version + 1, record the step
-- result (as a p_operation: a step id recorded by another operation is a step-mismatch),
-- the version row and the wake intents of the waiters the changed paths intersect; with
-- p_unwait_keys, first remove the waiters of those step keys of p_execution_id (the
-- step's own, so its claim does not wake it). Lock order: the waiters of p_unwait_keys
-- (when there are several), the store row, then the ledger, the versions, the waiters
-- the change wakes (marked, never waiting for a lock: SKIP LOCKED) and the outbox. A
-- step's own waiters come first because a transaction that woke one of them (a commit
-- of another store, marking it) holds its row and may next ask for this store's row:
-- waiting for it before taking the store's row, the claim holds nothing that
-- transaction waits for.
-- A p_operation of 'delete' deletes the store instead (if still at (p_instance_id,
-- p_version); unconditionally when p_instance_id is NULL), with its waiters, waking them
-- all; its versions stay as history, its ledger rows stay authoritative. Only the
-- identifying, step and p_relay_delay arguments apply.
-- The waiter lookup is yieldstar_wake_waiters_v2, and enable_seqscan is off for the
-- whole body: every lookup here is an equality on a unique or btree index, and no plan
-- cached while a table was small scans it in full later. Since any plan of each
-- statement is such a probe, the body (and every function it calls) runs with
-- plan_cache_mode = force_generic_plan: each statement is planned once per connection.
-- Left to choose, PostgreSQL plans the statements that take an array (marking the woken
-- waiters, = ANY) again on every wake: a custom plan for the array at hand always looks
-- cheaper than a generic one that cannot know its length.
DECLARE
    v_pk bigint;
    v_executions text[];
    v_workflows text[];
    v_now timestamptz := now();
    v_version bigint := p_version + 1;
    v_handed text[] := '{}';
BEGIN
    -- A recorded step result wins over every other check.
    IF p_step_key IS NOT NULL THEN
        SELECT l.status, l.recorded INTO status, recorded
          FROM yieldstar_ledger_status_v1(p_name, p_store_id, p_execution_id, p_step_key,
                                          p_operation) l;
        IF status IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;

    -- Several keys: waiters on other stores than this one (one key: this store's own
    -- waiter, whose marking commit holds this store's row, so no cycle can form).
    IF cardinality(p_unwait_keys) > 1 THEN
        PERFORM 1 FROM yieldstar_waiter w
          WHERE w.execution_id = p_execution_id AND w.step_key = ANY(p_unwait_keys)
          ORDER BY w.id FOR UPDATE;
    END IF;

    IF p_operation = 'delete' THEN
        -- The row is locked for the whole deletion (it goes at the end).
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
    ELSIF p_created THEN
        -- The store must still be missing: insert it directly at version 1 (version 0 is
        -- recorded below). ON CONFLICT waits for a concurrent creator to finish.
        INSERT INTO yieldstar_storeinstance AS s
            (name, store_id, instance_id, version, state, created_at, updated_at)
        VALUES (p_name, p_store_id, p_instance_id, v_version, p_state, v_now, v_now)
        ON CONFLICT (name, store_id) DO NOTHING
        RETURNING s.id INTO v_pk;
        IF v_pk IS NULL THEN
            SELECT s.instance_id, s.version, s.state
              INTO current_instance_id, current_version, current_state
              FROM yieldstar_storeinstance s
             WHERE s.name = p_name AND s.store_id = p_store_id;
            status := CASE WHEN FOUND THEN 'conflict' ELSE 'missing' END;
            RETURN;
        END IF;
    ELSE
        -- Compare without a lock first: the loser of a race learns of it without locking
        -- the row (a row lock writes WAL, so its commit would wait for a flush, holding
        -- the lock every other writer of the store is queued on).
        SELECT s.id, s.instance_id, s.version
          INTO v_pk, current_instance_id, current_version
          FROM yieldstar_storeinstance s
         WHERE s.name = p_name AND s.store_id = p_store_id;
        IF FOUND AND current_instance_id = p_instance_id AND current_version = p_version THEN
            -- Then lock it and compare again: a commit may have slipped in between.
            SELECT s.instance_id, s.version INTO current_instance_id, current_version
              FROM yieldstar_storeinstance s WHERE s.id = v_pk
               FOR NO KEY UPDATE;
        END IF;
        IF NOT FOUND THEN
            status := 'missing';
            RETURN;
        END IF;
        IF current_instance_id <> p_instance_id OR current_version <> p_version THEN
            SELECT s.instance_id, s.version, s.state
              INTO current_instance_id, current_version, current_state
              FROM yieldstar_storeinstance s WHERE s.id = v_pk;
            status := CASE WHEN FOUND THEN 'conflict' ELSE 'missing' END;
            RETURN;
        END IF;
        current_instance_id := NULL;
        current_version := NULL;
    END IF;

    IF p_step_key IS NOT NULL AND NOT yieldstar_record_step_v1(
            p_name, p_store_id, p_execution_id, p_step_key, p_result, p_operation, v_now) THEN
        -- A concurrent commit of the same step won: undo our creation, report its result.
        IF p_created THEN
            DELETE FROM yieldstar_storeinstance WHERE id = v_pk;
        END IF;
        SELECT l.status, l.recorded INTO status, recorded
          FROM yieldstar_ledger_status_v1(p_name, p_store_id, p_execution_id, p_step_key,
                                          p_operation) l;
        RETURN;
    END IF;

    IF p_operation = 'delete' THEN
        -- Every waiter of the store, woken or not, in registration order.
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
        DELETE FROM yieldstar_storeinstance WHERE id = v_pk;
        SELECT i.intent_ids, i.wake_execution_ids, i.wake_workflow_ids
          INTO intent_ids, wake_execution_ids, wake_workflow_ids
          FROM yieldstar_write_intents_v1(v_executions, v_workflows, 'delete', p_relay_delay,
                                          v_now) i;
        status := 'committed';
        RETURN;
    END IF;

    IF p_created THEN
        INSERT INTO yieldstar_storeversion
            (store_name, store_id, instance_id, version, changed_paths,
             step_execution_id, step_key, state, created_at)
        VALUES (p_name, p_store_id, p_instance_id, 0, '[]', NULL, NULL,
                CASE WHEN p_keep_state THEN p_initial_state END, v_now);
    ELSE
        UPDATE yieldstar_storeinstance
           SET version = v_version, state = p_state, updated_at = v_now
         WHERE id = v_pk;
    END IF;

    INSERT INTO yieldstar_storeversion
        (store_name, store_id, instance_id, version, changed_paths,
         step_execution_id, step_key, state, created_at)
    VALUES (p_name, p_store_id, p_instance_id, v_version, p_changed_paths,
            p_execution_id, p_step_key, CASE WHEN p_keep_state THEN p_state END, v_now);
    -- Keep the last p_history_limit versions: drop the one that just fell out (an equality
    -- lookup; a range would walk every dead entry of the versions pruned before it).
    -- yieldstar_prune applies a lowered limit to the older ones.
    IF p_history_limit IS NOT NULL AND v_version >= p_history_limit THEN
        DELETE FROM yieldstar_storeversion
         WHERE instance_id = p_instance_id AND version = v_version - p_history_limit;
    END IF;

    -- The step's own waiter on this store, woken and of a cohort: it checked for its
    -- cohort and matched, and the others may match the same state (whatever this change
    -- touched), so the next of the cohort is woken in its place.
    IF p_step_key IS NOT NULL THEN
        v_handed := ARRAY(SELECT w.cohort FROM yieldstar_waiter w
                           WHERE w.execution_id = p_execution_id AND w.step_key = p_step_key
                             AND w.store_pk = v_pk AND w.cohort IS NOT NULL
                             AND w.woken_at IS NOT NULL);
    END IF;

    IF p_unwait_keys IS NOT NULL THEN
        DELETE FROM yieldstar_waiterpath WHERE waiter_id IN (
            SELECT w.id FROM yieldstar_waiter w
             WHERE w.execution_id = p_execution_id AND w.step_key = ANY(p_unwait_keys));
        DELETE FROM yieldstar_waiter w
         WHERE w.execution_id = p_execution_id AND w.step_key = ANY(p_unwait_keys);
    END IF;

    -- The executions whose waiters the changed paths wake, by index probes only, less
    -- those already woken since they registered (yieldstar_wake_waiters_v2): one intent
    -- each, in registration order.
    SELECT array_agg(g.execution_id ORDER BY g.first_id),
           array_agg(g.workflow_id ORDER BY g.first_id)
      INTO v_executions, v_workflows
      FROM yieldstar_wake_waiters_v2(v_pk, p_wake_all, p_read_keys, p_prefix_keys, v_now,
                                     v_handed) g;
    SELECT i.intent_ids, i.wake_execution_ids, i.wake_workflow_ids
      INTO intent_ids, wake_execution_ids, wake_workflow_ids
      FROM yieldstar_write_intents_v1(v_executions, v_workflows, 'store', p_relay_delay, v_now) i;
    status := 'committed';
END
$$;
