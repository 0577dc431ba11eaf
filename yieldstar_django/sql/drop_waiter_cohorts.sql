DROP FUNCTION IF EXISTS yieldstar_register_waiter_v3(
    text, text, text, text, text, text, bigint, text, smallint[], text[], smallint[], text[],
    timestamptz, double precision, timestamptz, text, text[], text, boolean);
DROP FUNCTION IF EXISTS yieldstar_commit_mutation_v4(
    text, text, text, bigint, boolean, text, text, text, boolean, text[], text[],
    text, text, text, text, boolean, bigint, double precision, text[]);
DROP FUNCTION IF EXISTS yieldstar_wake_waiters_v2(bigint, boolean, text[], text[], timestamptz, text[]);
