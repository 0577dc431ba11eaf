ALTER TABLE yieldstar_waiterpath RESET (autovacuum_analyze_scale_factor, autovacuum_analyze_threshold);
ALTER TABLE yieldstar_waiter RESET (autovacuum_analyze_scale_factor, autovacuum_analyze_threshold);
DROP INDEX IF EXISTS yieldstar_store_id_prefix;
DROP INDEX IF EXISTS yieldstar_store_ids_c;
DROP FUNCTION IF EXISTS yieldstar_register_waiter_v2(
    text, text, text, text, text, text, bigint, text, smallint[], text[], smallint[], text[],
    timestamptz, double precision, timestamptz, text, text[]);
DROP FUNCTION IF EXISTS yieldstar_commit_mutation_v3(
    text, text, text, bigint, boolean, text, text, text, boolean, text[], text[],
    text, text, text, text, boolean, bigint, double precision, text[]);
DROP FUNCTION IF EXISTS yieldstar_wake_waiters_v1(bigint, boolean, text[], text[], timestamptz);
DROP FUNCTION IF EXISTS yieldstar_waiter_ids_v1(bigint, text[], text[]);
DROP FUNCTION IF EXISTS yieldstar_ledger_status_v1(text, text, text, text, text);
DROP FUNCTION IF EXISTS yieldstar_record_step_v1(text, text, text, text, text, text, timestamptz);
DROP FUNCTION IF EXISTS yieldstar_write_intents_v1(
    text[], text[], text, double precision, timestamptz);
DROP FUNCTION IF EXISTS yieldstar_recorded_status_v1(text, text);
