CREATE OR REPLACE FUNCTION yieldstar_commit_mutation_v2(
    text, text, text, bigint, boolean, text, text, text, boolean, text[], text[],
    text, text, text, text, boolean, bigint, double precision,
    OUT status text, OUT recorded text, OUT current_instance_id text,
    OUT current_version bigint, OUT current_state text, OUT intent_ids bigint[],
    OUT wake_execution_ids text[], OUT wake_workflow_ids text[]
) LANGUAGE sql VOLATILE
AS $$
-- The contract of the release before yieldstar_commit_mutation_v3, for its processes
-- during a rolling deploy: v3 removing no waiter.
SELECT * FROM yieldstar_commit_mutation_v3(
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, NULL)
$$;
