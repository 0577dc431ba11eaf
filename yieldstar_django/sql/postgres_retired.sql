DROP FUNCTION IF EXISTS yieldstar_commit_mutation_v1(
    text, text, text, bigint, boolean, text, text, text, boolean, text[], text[],
    text, text, text, boolean, bigint, double precision);
DROP FUNCTION IF EXISTS yieldstar_commit_deletion_v1(
    text, text, text, bigint, text, text, text, double precision);
DROP FUNCTION IF EXISTS yieldstar_mark_delivered_v1(bigint[]);
DROP FUNCTION IF EXISTS yieldstar_matching_waiters_v1(bigint, boolean, text[], text[]);
