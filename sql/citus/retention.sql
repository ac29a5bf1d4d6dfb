-- Retention on a distributed log (docs/SCALING.md, "Citus"); tracker migrate applies it with
-- the Citus layout (distribute.sql) and again when it converts an older one
-- (coordinator-order.sql).
--
-- On shards: the partition's rows are projected when, shard by shard, none is past
-- that shard's checkpoint (counted on the workers); the ids leave event_ids under the guard,
-- whose setting must reach the workers. SET LOCAL statements do, with propagate_set_commands,
-- but only inside a transaction block: call it between BEGIN and COMMIT (tracker retention
-- does), or the guard refuses the DELETE on the workers and nothing is dropped.
CREATE OR REPLACE FUNCTION tracker_retire_partition(part_name text, keep_days integer, dry_run boolean)
RETURNS TABLE (logged bigint, unprojected bigint, forgotten bigint, dropped boolean)
LANGUAGE plpgsql AS $$
DECLARE
    part_day date;
    checkpoints text;
    shard record;
    -- Names are qualified: pg_catalog comes first in this function's search_path.
    sch text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.oid = 'events'::regclass);
BEGIN
    IF part_name IS NULL OR part_name !~ '^events_[0-9]{8}$' OR NOT EXISTS (
        SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'events'::regclass AND c.relname = part_name) THEN
        RAISE EXCEPTION '''%'' is not a daily partition of the log (events_YYYYMMDD); retention drops nothing else', part_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep_days IS NULL OR keep_days < 1 THEN
        RAISE EXCEPTION 'keep-days must be at least 1 (today is always kept), got %', keep_days
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    part_day := to_date(substr(part_name, 8), 'YYYYMMDD');
    IF part_day >= (now() AT TIME ZONE 'UTC')::date - keep_days THEN
        RAISE EXCEPTION '% is within the % kept days', part_name, keep_days
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('tracker.event_partitions'));
    IF NOT dry_run THEN
        -- A SET LOCAL reaches a worker only with the transaction's first command there, so the
        -- guard's setting goes first; nothing but this partition's ids is deleted after it.
        SET LOCAL citus.propagate_set_commands = 'local';
        EXECUTE format('SET LOCAL tracker.retention = %L', part_name);
        EXECUTE format('LOCK TABLE %I.%I IN SHARE MODE', sch, part_name);
    END IF;
    -- Each shard of the partition with the checkpoint of its shard of the log (same hash range)
    -- in the order its rows carry: their worker's, for a day before log_order's (all of them
    -- projected once that cursor retired), else the coordinator's.
    SELECT string_agg(CASE WHEN part_day < o.coordinator_from
                           THEN format('(%s, %L::xid8, %s)', p.shardid, coalesce(l.worker_checkpoint_tx, '18446744073709551615'),
                                       coalesce(l.worker_checkpoint_seq, 9223372036854775807))
                           ELSE format('(%s, %L::xid8, %s)', p.shardid, l.checkpoint_tx, l.checkpoint_seq) END, ', ')
    INTO checkpoints
    FROM pg_dist_shard p
    JOIN pg_dist_shard e ON e.logicalrelid = 'events'::regclass AND e.shardminvalue = p.shardminvalue
    JOIN log_shards l ON l.shard_id = e.shardid
    CROSS JOIN log_order o
    WHERE p.logicalrelid = format('%I.%I', sch, part_name)::regclass;
    logged := 0;
    unprojected := 0;
    FOR shard IN SELECT * FROM run_command_on_shards(format('%I.%I', sch, part_name), format(
        'SELECT count(*) || '' '' || count(*) FILTER (WHERE (p.tx, p.seq) > (c.tx, c.seq)) '
        'FROM %%1$s p, (VALUES %s) c(shard, tx, seq) WHERE c.shard = substring(%%1$L FROM ''_([0-9]+)$'')::bigint',
        checkpoints)) LOOP
        IF NOT shard.success THEN
            RAISE EXCEPTION 'shard % of % could not be counted (%); nothing was dropped', shard.shardid, part_name, shard.result
                USING ERRCODE = 'lock_not_available';
        END IF;
        logged := logged + split_part(shard.result, ' ', 1)::bigint;
        unprojected := unprojected + split_part(shard.result, ' ', 2)::bigint;
    END LOOP;
    forgotten := 0;
    dropped := false;
    IF unprojected > 0 OR dry_run THEN
        RETURN NEXT;
        RETURN;
    END IF;
    EXECUTE format('DELETE FROM %I.event_ids WHERE id IN (SELECT id FROM %I.%I)', sch, sch, part_name);
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    PERFORM set_config('lock_timeout', '2s', true);
    LOCK TABLE ONLY events IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('DROP TABLE %I.%I', sch, part_name);
    -- checkpoint_tx: the shards have one each (log_shards); 0 says so.
    INSERT INTO retention_runs AS r (day, partition_name, events, ids_forgotten, keep_days, checkpoint_tx)
    VALUES (part_day, part_name, logged, forgotten, keep_days, '0')
    ON CONFLICT (day) DO UPDATE SET events = r.events + EXCLUDED.events,
                                    ids_forgotten = r.ids_forgotten + EXCLUDED.ids_forgotten,
                                    keep_days = EXCLUDED.keep_days, checkpoint_tx = EXCLUDED.checkpoint_tx,
                                    dropped_at = now();
    dropped := true;
    RETURN NEXT;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION tracker_retire_partition(text, integer, boolean) SECURITY DEFINER SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION tracker_retire_partition(text, integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tracker_retire_partition(text, integer, boolean) TO tracker_projector;
