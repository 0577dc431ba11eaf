CREATE OR REPLACE FUNCTION yieldstar_waiter_ids_v1(
    p_store_pk bigint,
    p_read_keys text[],
    p_prefix_keys text[]
) RETURNS bigint[]
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
-- The distinct ids of the waiters of store p_store_pk whose path rows a change intersects
-- (from the yieldstar_waiterpath_match index only): READ rows whose key is a changed path
-- or one of its prefixes, PREFIX rows whose key is a changed path, and ALWAYS rows
-- (waiters that observed another instance). Each lookup is an equality on all three
-- columns of the index, one key at a time, so its plan is an index probe whatever the
-- statistics say; enable_seqscan = off takes the one alternative, a sequential scan, away.
DECLARE
    v_ids bigint[] := '{}';
    v_key text;
BEGIN
    FOREACH v_key IN ARRAY coalesce(p_read_keys, '{}') LOOP
        v_ids := v_ids || ARRAY(
            SELECT p.waiter_id FROM yieldstar_waiterpath p
             WHERE p.store_pk = p_store_pk AND p.kind = 0 AND p.path = v_key);
    END LOOP;
    FOREACH v_key IN ARRAY coalesce(p_prefix_keys, '{}') LOOP
        v_ids := v_ids || ARRAY(
            SELECT p.waiter_id FROM yieldstar_waiterpath p
             WHERE p.store_pk = p_store_pk AND p.kind = 1 AND p.path = v_key);
    END LOOP;
    v_ids := v_ids || ARRAY(
        SELECT p.waiter_id FROM yieldstar_waiterpath p
         WHERE p.store_pk = p_store_pk AND p.kind = 2);
    RETURN ARRAY(SELECT DISTINCT u.id FROM unnest(v_ids) AS u(id) ORDER BY u.id);
END
$$;
