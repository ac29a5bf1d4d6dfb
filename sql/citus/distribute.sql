-- The log spread over a Citus cluster (docs/SCALING.md, "Citus"). tracker migrate runs this
-- once, after the numbered migrations, in a database that has the citus extension and an
-- empty log; everything else keeps the single-node layout.
--
-- Shards: an ad's rows share one shard by request_id (the log, its per-ad state), so one ad's
-- events are always read and folded on one node. event_ids is spread by the id itself: an id
-- is stored at most once across all ads, which a unique index per ad could not promise.
-- The projections (day and quarter-hour tables, client minutes, checkpoints) stay on the
-- coordinator: they are small, and a report reads them without touching a worker.
--
-- The log's order: each row's (tx, seq) is stamped by a trigger on the worker that stores it,
-- from that worker's transaction id and sequence; the coordinator's own values (which it
-- sends explicitly) are overwritten. A reader follows each shard in its own order up to the
-- xmin of its worker, so the single-node rule (a row below xmin can no longer appear behind
-- a reader) holds shard by shard; log_shards keeps one checkpoint per shard.

-- Triggers on distributed tables run on the shards (Citus calls them unsafe because a trigger
-- that reached other shards would not be; these touch only their own row).
SET LOCAL citus.enable_unsafe_triggers = on;

-- Colocated tables must agree on the distribution column's collation: ad_state's "C". The
-- ad_events view depends on the column, so it is made again around the change.
DO $$
DECLARE
    definition text := pg_get_viewdef('ad_events'::regclass);
BEGIN
    DROP VIEW ad_events;
    ALTER TABLE events ALTER COLUMN request_id TYPE text COLLATE "C";
    EXECUTE 'CREATE VIEW ad_events AS ' || definition;
END
$$;
GRANT SELECT ON ad_events TO tracker_projector, tracker_report;

CREATE FUNCTION tracker_stamp_log_order() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.tx := pg_current_xact_id();
    NEW.seq := nextval('event_seq');
    RETURN NEW;
END
$$;

SELECT create_distributed_table('events', 'request_id');
SELECT create_distributed_table('ad_state', 'request_id', colocate_with => 'events');
SELECT create_distributed_table('event_ids', 'id');
-- Joined with the log's user_agent_id on every node.
SELECT create_reference_table('user_agents');
CREATE TRIGGER events_log_order BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION tracker_stamp_log_order();

-- The coordinator names every column in what it sends to a shard, tx and seq too; the
-- worker's trigger replaces both, so granting them forges nothing.
GRANT INSERT (tx, seq) ON events TO tracker_ingest;

-- A new day's partition is distributed as it is made, with the log's triggers.
DO $$
BEGIN
    EXECUTE 'ALTER FUNCTION tracker_ensure_event_partitions(date, date) SET citus.enable_unsafe_triggers = on';
END
$$;

-- One checkpoint per shard of the log: the last (tx, seq) of that shard projected, in the
-- order of the worker holding it (node_group). A shard moved to another worker would bring
-- rows stamped by its old worker, so the projector stops when the placement changed.
CREATE TABLE log_shards (
    shard_id       bigint  PRIMARY KEY,
    node_group     integer NOT NULL,
    checkpoint_tx  xid8    NOT NULL DEFAULT '0',
    checkpoint_seq bigint  NOT NULL DEFAULT 0
);
INSERT INTO log_shards (shard_id, node_group)
SELECT s.shardid, p.groupid
FROM pg_dist_shard s JOIN pg_dist_placement p ON p.shardid = s.shardid
WHERE s.logicalrelid = 'events'::regclass;
REVOKE ALL ON log_shards FROM PUBLIC;
GRANT SELECT, UPDATE ON log_shards TO tracker_projector;
GRANT SELECT ON log_shards TO tracker_report;

-- Retention on shards: the partition's rows are projected when, shard by shard, none is past
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
    -- Each shard of the partition with the checkpoint of its shard of the log (same hash range).
    SELECT string_agg(format('(%s, %L::xid8, %s)', p.shardid, l.checkpoint_tx, l.checkpoint_seq), ', ')
    INTO checkpoints
    FROM pg_dist_shard p
    JOIN pg_dist_shard e ON e.logicalrelid = 'events'::regclass AND e.shardminvalue = p.shardminvalue
    JOIN log_shards l ON l.shard_id = e.shardid
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
