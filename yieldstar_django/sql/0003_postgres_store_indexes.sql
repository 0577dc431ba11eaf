CREATE INDEX IF NOT EXISTS yieldstar_store_ids_c ON yieldstar_storeinstance (name, store_id COLLATE "C");
CREATE INDEX IF NOT EXISTS yieldstar_store_id_prefix ON yieldstar_storeinstance (store_id varchar_pattern_ops);
