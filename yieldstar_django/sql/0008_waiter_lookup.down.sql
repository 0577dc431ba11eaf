ALTER TABLE yieldstar_waiterpath RESET (autovacuum_analyze_scale_factor, autovacuum_analyze_threshold);
ALTER TABLE yieldstar_waiter RESET (autovacuum_analyze_scale_factor, autovacuum_analyze_threshold);
ALTER FUNCTION yieldstar_commit_deletion_v2(text, text, text, bigint, text, text, text, text, double precision) RESET enable_seqscan;
