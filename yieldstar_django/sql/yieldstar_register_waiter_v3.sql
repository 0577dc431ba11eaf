CREATE OR REPLACE FUNCTION yieldstar_register_waiter_v3(
    p_name text,
    p_store_id text,
    p_workflow_id text,
    p_execution_id text,
    p_step_key text,
    p_instance_id text,
    p_since_version bigint,
    p_read_paths text,
    p_path_kinds smallint[],
    p_path_keys text[],
    p_other_kinds smallint[],
    p_other_keys text[],
    p_registered timestamptz,
    p_relay_delay double precision,
    p_now timestamptz,
    p_lease_owner text,
    p_finished text[],
    p_cohort text,
    p_unless_stale boolean,
    OUT held boolean,
    OUT stale boolean,
    OUT intent_ids bigint[],
    OUT wake_execution_ids text[],
    OUT wake_workflow_ids text[]
) LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
-- Register a waiter, linearizably with every commit of its store, in one call (the
-- statements of yieldstar_django.connector.waiters.register_waiter): read the store row
-- under a share lock (it conflicts with the FOR NO KEY UPDATE a commit takes), upsert the
-- waiter on (execution, step key, store) with its cohort (p_cohort; NULL: none) and
-- replace its path rows (p_path_kinds and
-- p_path_keys; p_other_kinds and p_other_keys when its instance is not the store's), and
-- write a wake intent when the observation is stale (the waiter registered woken) or the
-- store is missing (nothing registered). Returns the intents as the commit functions do.
--
-- With p_lease_owner (a run's lease token), the fence of the runtime's heap writes comes
-- first, before anything is read or written: the execution's row must be leased to it and
-- not finished (a status out of p_finished), read under a share lock, which conflicts with
-- the UPDATE that takes the lease over, releases it or cancels the execution. So a
-- registration is linearizable with those too: one that a takeover follows is seen by the
-- successor (its acquisition reads the waiters), and a run whose lease was taken over
-- registers nothing, writes no intent and gets held = false. The execution's row is
-- locked before the store's, the order of a transaction that cancels an execution and
-- then writes a store it waits on (the other order deadlocks with it); a commit's heap
-- row takes only FOR KEY SHARE on the execution's row, which a share lock does not block.
-- Without a token (NULL), held is true and nothing more is checked.
-- With p_unless_stale, a stale observation registers nothing and writes no intent: stale
-- is true, and the caller (a run holding its lease) takes again at once instead of being
-- woken through the broker.
-- It runs with the settings of yieldstar_commit_mutation_v4 (no sequential scan, each
-- statement planned once per connection).
DECLARE
    v_pk bigint;
    v_found boolean;
    v_instance text;
    v_version bigint;
    v_same boolean;
    v_stale boolean;
    v_waiter bigint;
    v_reason text;
BEGIN
    IF p_lease_owner IS NOT NULL THEN
        PERFORM 1
          FROM yieldstar_execution e
         WHERE e.id = p_execution_id AND e.lease_owner = p_lease_owner
           AND e.status <> ALL (COALESCE(p_finished, '{}'))
           FOR SHARE;
        IF NOT FOUND THEN
            held := false;
            RETURN;
        END IF;
    END IF;
    held := true;
    SELECT s.id, s.instance_id, s.version INTO v_pk, v_instance, v_version
      FROM yieldstar_storeinstance s
     WHERE s.name = p_name AND s.store_id = p_store_id
       FOR SHARE;
    v_found := FOUND;
    IF NOT v_found THEN
        v_reason := 'missing';
    ELSE
        v_same := v_instance = p_instance_id;
        v_stale := NOT v_same OR v_version <> p_since_version;
        stale := v_stale;
        IF v_stale AND p_unless_stale THEN
            RETURN;
        END IF;
        INSERT INTO yieldstar_waiter AS w
            (workflow_id, execution_id, step_key, store_pk, instance_id, since_version,
             read_paths, created_at, woken_at, cohort)
        VALUES (p_workflow_id, p_execution_id, p_step_key, v_pk, p_instance_id,
                p_since_version, p_read_paths, p_registered,
                CASE WHEN v_stale THEN p_registered END, p_cohort)
        ON CONFLICT (execution_id, step_key, store_pk) DO UPDATE SET
            workflow_id = excluded.workflow_id, instance_id = excluded.instance_id,
            since_version = excluded.since_version, read_paths = excluded.read_paths,
            created_at = excluded.created_at, woken_at = excluded.woken_at,
            cohort = excluded.cohort
        RETURNING w.id INTO v_waiter;
        DELETE FROM yieldstar_waiterpath WHERE waiter_id = v_waiter;
        INSERT INTO yieldstar_waiterpath (waiter_id, store_pk, kind, path)
        SELECT v_waiter, v_pk, k.kind, k.path
          FROM unnest(CASE WHEN v_same THEN p_path_kinds ELSE p_other_kinds END,
                      CASE WHEN v_same THEN p_path_keys ELSE p_other_keys END)
               AS k(kind, path);
        IF v_stale THEN
            v_reason := 'stale';
        END IF;
    END IF;
    IF v_reason IS NOT NULL THEN
        SELECT i.intent_ids, i.wake_execution_ids, i.wake_workflow_ids
          INTO intent_ids, wake_execution_ids, wake_workflow_ids
          FROM yieldstar_write_intents_v1(ARRAY[p_execution_id], ARRAY[p_workflow_id],
                                          v_reason, p_relay_delay, p_now) i;
    END IF;
END
$$;
