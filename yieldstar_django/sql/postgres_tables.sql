CREATE INDEX IF NOT EXISTS yieldstar_store_ids_c ON yieldstar_storeinstance (name, store_id COLLATE "C");
CREATE INDEX IF NOT EXISTS yieldstar_store_id_prefix ON yieldstar_storeinstance (store_id varchar_pattern_ops);
ALTER TABLE yieldstar_waiter SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000);
ALTER TABLE yieldstar_waiterpath SET (autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000);
