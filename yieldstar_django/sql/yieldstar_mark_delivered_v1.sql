CREATE OR REPLACE FUNCTION yieldstar_mark_delivered_v1(p_ids bigint[])
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
-- Mark wake intents delivered. A mark lost in a crash only means that the relay delivers
-- the wake again (a spurious wake), so this transaction does not wait for its WAL flush.
DECLARE
    v_count integer;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE yieldstar_wakeintent SET delivered_at = now()
     WHERE id = ANY (p_ids) AND delivered_at IS NULL;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
