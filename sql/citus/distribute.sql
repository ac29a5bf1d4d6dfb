-- The log spread over a Citus cluster (docs/SCALING.md, "Citus"): the last step of tracker
-- migrate's distribution (Sources/Tracker/Schema/CitusDistribution.swift), in one transaction
-- under the projector's lock, after the log (events), event_ids and the per-entity state
-- tables are on the workers' shards. A projector sees the layout before it or all of it.
--
-- Shards: an ad's rows share one shard by request_id (the log, its per-ad state; a load's
-- events carry the load's id there), so one entity's events are always read and folded on one
-- node. event_ids is spread by the id itself: an id is stored at most once across all ads,
-- which a unique index per ad could not promise. The projections (day and quarter-hour tables,
-- client minutes, checkpoints) stay on the coordinator: they are small, and a report reads
-- them without touching a worker.
--
-- The log's order: each row's (tx, seq) is the coordinator's transaction id and sequence, as on
-- one node (the columns' defaults are evaluated where the statement runs, the coordinator). A
-- stamp is a value that moves with its row, so a shard copied to another worker keeps its
-- order, and a log distributed in place keeps the checkpoint it had. Readers stay below the
-- coordinator's snapshot xmin once the workers' prepared transactions of that moment have
-- finished (CoordinatorHorizon.swift); log_shards keeps one checkpoint per shard.

-- One checkpoint per shard of the log, starting where the projections are (an empty log's is
-- 0). node_group and the worker_checkpoint columns serve only a log whose older rows were
-- stamped by their workers (coordinator-order.sql).
CREATE TABLE log_shards (
    shard_id              bigint  PRIMARY KEY,
    node_group            integer NOT NULL,
    checkpoint_tx         xid8    NOT NULL DEFAULT '0',
    checkpoint_seq        bigint  NOT NULL DEFAULT 0,
    worker_checkpoint_tx  xid8,
    worker_checkpoint_seq bigint,
    -- Every row of the shard whose tx is below it is projected (NULL: not known yet). With
    -- log_marks (019_append_marks.sql), what lets a report skip asking the workers.
    drained_below         xid8,
    -- The newest receipt projected from the shard (020_projector_groups.sql).
    projected_receipt     timestamptz
);
INSERT INTO log_shards (shard_id, node_group, checkpoint_tx, checkpoint_seq)
SELECT s.shardid, p.groupid, st.checkpoint_tx, st.checkpoint_seq
FROM pg_dist_shard s
JOIN pg_dist_placement p ON p.shardid = s.shardid
CROSS JOIN projection_state st
WHERE s.logicalrelid = 'events'::regclass;
REVOKE ALL ON log_shards FROM PUBLIC;
GRANT SELECT, UPDATE ON log_shards TO tracker_projector;
GRANT SELECT ON log_shards TO tracker_report;

-- The first UTC day whose rows the coordinator stamped ('-infinity': every row).
CREATE TABLE log_order (
    coordinator_from date NOT NULL
);
INSERT INTO log_order VALUES ('-infinity');
REVOKE ALL ON log_order FROM PUBLIC;
GRANT SELECT, UPDATE ON log_order TO tracker_projector;
GRANT SELECT ON log_order TO tracker_report;

-- The coordinator names every column in what it sends to a shard, tx and seq too (their
-- values are the coordinator's defaults: the tracker never sets them).
GRANT INSERT (tx, seq) ON events TO tracker_ingest;

-- A new day's partition is distributed as it is made, with the log's triggers (Citus calls
-- triggers on distributed tables unsafe because one that reached other shards would be; the
-- log's touch only their own row).
DO $$
BEGIN
    EXECUTE 'ALTER FUNCTION tracker_ensure_event_partitions(date, date) SET citus.enable_unsafe_triggers = on';
END
$$;

-- Every append marks its transaction in log_marks from this transaction's commit on
-- (019_append_marks.sql says why), after its rows. The lock waits for the appends in flight and
-- holds new ones until the commit: a session sees the new function once it has taken the log's
-- lock again, so an append that ran the old one took its transaction id before the commit.
LOCK TABLE events IN SHARE MODE;
CREATE OR REPLACE FUNCTION tracker_mark_append() RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO log_marks (backend, tx) VALUES (pg_backend_pid(), pg_current_xact_id())
    ON CONFLICT (backend) DO UPDATE SET tx = EXCLUDED.tx;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION tracker_mark_append() SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$;
