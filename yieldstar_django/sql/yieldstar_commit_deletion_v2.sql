DROP FUNCTION IF EXISTS yieldstar_commit_deletion_v2(
    text, text, text, bigint, text, text, text, text, double precision);
CREATE FUNCTION yieldstar_commit_deletion_v2(
    p_name text, p_store_id text, p_instance_id text, p_version bigint,
    p_execution_id text, p_step_key text, p_result text, p_operation text,
    p_relay_delay double precision
) RETURNS yieldstar_commit_outcome_v1 LANGUAGE sql VOLATILE
AS $$
-- The deletion's contract before yieldstar_commit_mutation_v3 took deletions over, for
-- the previous release's processes during a rolling deploy: the same columns, now as a
-- yieldstar_commit_outcome_v1 (a new return type, hence DROP and CREATE, in the one
-- transaction of the migration).
SELECT * FROM yieldstar_commit_mutation_v3(
    $1, $2, $3, $4, false, NULL, NULL, NULL, NULL, NULL, NULL, $5, $6, $7, $8, NULL, NULL,
    $9, NULL)
$$;
