DO $$
-- What a commit function answers, as a type: the return type of the wrappers that keep
-- earlier contracts (yieldstar_commit_mutation_v3 declares the same columns as its OUT
-- parameters). Created once: a second load finds it.
BEGIN
    CREATE TYPE yieldstar_commit_outcome_v1 AS (
        status text,
        recorded text,
        current_instance_id text,
        current_version bigint,
        current_state text,
        intent_ids bigint[],
        wake_execution_ids text[],
        wake_workflow_ids text[]
    );
EXCEPTION WHEN duplicate_object THEN
    NULL;
END
$$;
