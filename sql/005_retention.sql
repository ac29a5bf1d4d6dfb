-- Retention (tracker retention --keep-days N): whole daily partitions of the log are
-- dropped once the projector has read them, and the ids they held leave event_ids with
-- them. See docs/SCALING.md, "Retention".

-- One row per dropped partition: what went, when, and how far the projections had read.
-- tracker rebuild replays only the kept log, so this table also says which days a
-- rebuild could no longer reproduce.
CREATE TABLE retention_runs (
    day            date        PRIMARY KEY,
    partition_name text        NOT NULL,
    events         bigint      NOT NULL,
    ids_forgotten  bigint      NOT NULL,
    keep_days      integer     NOT NULL CHECK (keep_days > 0),
    checkpoint_tx  xid8        NOT NULL,
    dropped_at     timestamptz NOT NULL DEFAULT now()
);

-- event_ids stays append-only for everyone but retention: a DELETE is allowed only in a
-- transaction that set tracker.retention to the partition it is dropping (SET LOCAL), so
-- an accidental DELETE FROM event_ids still fails. The guard prevents mistakes; it is not
-- a permission (grant the application role only INSERT, SELECT in production).
CREATE FUNCTION tracker_reject_event_id_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND coalesce(current_setting('tracker.retention', true), '') ~ '^events_[0-9]{8}$' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the event log is append-only: % on % is not allowed', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Retention drops whole partitions with tracker retention.';
END
$$;

DROP TRIGGER event_ids_append_only ON event_ids;
CREATE TRIGGER event_ids_append_only BEFORE UPDATE OR DELETE ON event_ids
    FOR EACH ROW EXECUTE FUNCTION tracker_reject_event_id_change();
