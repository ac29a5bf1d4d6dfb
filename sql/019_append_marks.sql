-- Read your writes on a distributed log, answered on the coordinator alone (docs/ARCHITECTURE.md,
-- "Read your writes on Citus"). Every append calls tracker_mark_append() in its transaction.
-- On one node that does nothing: a report there asks the log itself, one index descent. On
-- Citus it writes the append's coordinator transaction id into its connection's row of
-- log_marks, and the projector writes, per shard, a horizon below which it has read everything
-- (log_shards.drained_below). An append acknowledged before a report is asked is then either
-- below every shard's horizon, so projected, or its mark says so: the report need not ask the
-- workers (a union over every shard's daily partitions) unless a mark is past the horizons.
--
-- One row per connection that appended (its backend's pid): a connection's appends follow one
-- another, so its newest mark covers its older ones, and connections never wait for each
-- other's rows. Rows of connections that are gone are pruned by the projector. The row of
-- backend 0 is the projector's: the transaction id from which every append marks.
CREATE TABLE log_marks (
    backend integer PRIMARY KEY,
    tx      xid8    NOT NULL
);
-- The ingest role writes its mark only through tracker_mark_append(), which runs as the owner:
-- a mark written by hand could say an append is projected when it is not.
REVOKE ALL ON log_marks FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON log_marks TO tracker_projector;
GRANT SELECT ON log_marks TO tracker_report;

-- A no-op while the log is in one table; sql/citus/distribute.sql makes it mark.
CREATE FUNCTION tracker_mark_append() RETURNS void LANGUAGE sql AS '';
REVOKE EXECUTE ON FUNCTION tracker_mark_append() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tracker_mark_append() TO tracker_ingest;

-- A log distributed by an earlier version: its shards get their horizons (none yet: reports ask
-- the workers until the projector has read past one) and its appends their marks.
ALTER TABLE IF EXISTS log_shards ADD COLUMN IF NOT EXISTS drained_below xid8;
DO $$
BEGIN
    IF to_regclass('log_shards') IS NOT NULL THEN
        CREATE OR REPLACE FUNCTION tracker_mark_append() RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $mark$
        BEGIN
            INSERT INTO log_marks (backend, tx) VALUES (pg_backend_pid(), pg_current_xact_id())
            ON CONFLICT (backend) DO UPDATE SET tx = EXCLUDED.tx;
        END
        $mark$;
        EXECUTE format('ALTER FUNCTION tracker_mark_append() SET search_path = pg_catalog, %I, pg_temp', current_schema());
    END IF;
END
$$;
