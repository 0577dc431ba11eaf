ALTER FUNCTION yieldstar_commit_deletion_v2(text, text, text, bigint, text, text, text, text, double precision) SET enable_seqscan = off;
ALTER TABLE yieldstar_waiter SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000);
ALTER TABLE yieldstar_waiterpath SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000);
