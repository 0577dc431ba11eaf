DROP INDEX IF EXISTS yieldstar_store_ids_c;
DROP INDEX IF EXISTS yieldstar_store_id_prefix;
