DROP FUNCTION IF EXISTS yieldstar_commit_mutation_v2(
    text, text, text, bigint, boolean, text, text, text, boolean, text[], text[],
    text, text, text, text, boolean, bigint, double precision);
CREATE FUNCTION yieldstar_commit_mutation_v2(
    p_name text, p_store_id text, p_instance_id text, p_version bigint, p_created boolean,
    p_initial_state text, p_state text, p_changed_paths text, p_wake_all boolean,
    p_read_keys text[], p_prefix_keys text[], p_execution_id text, p_step_key text,
    p_result text, p_operation text, p_keep_state boolean, p_history_limit bigint,
    p_relay_delay double precision
) RETURNS yieldstar_commit_outcome_v1 LANGUAGE sql VOLATILE
AS $$
-- The contract of the release before yieldstar_commit_mutation_v3, for that release's
-- processes during a rolling deploy: v3 removing no waiter.
SELECT * FROM yieldstar_commit_mutation_v3(
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, NULL)
$$;
