-- A log distributed by an older tracker, whose rows carry the transaction id and sequence of the
-- worker that stored them (a trigger stamped them there), goes over to the coordinator's order
-- (distribute.sql says why: a stamp that moves with its row). tracker migrate applies it once,
-- in one transaction under the projector's lock, then retention.sql.
--
-- Nothing is stamped again. The partitions that exist before the next UTC day keep the
-- worker's trigger, so each partition holds rows of one order; the partitions from that day on
-- get none. log_shards keeps each shard's worker-order checkpoint beside a new one in the
-- coordinator's order; the projector reads both until every worker-stamped row is projected
-- (an hour after that day began at the earliest), then forgets the older.

SET LOCAL citus.enable_unsafe_triggers = on;
-- One connection per worker for the whole transaction: the trigger changes on the shards and the
-- function changes after them (retention.sql) must share it.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

CREATE TABLE log_order (
    coordinator_from date NOT NULL
);
INSERT INTO log_order VALUES ((now() AT TIME ZONE 'UTC')::date + 1);
REVOKE ALL ON log_order FROM PUBLIC;
GRANT SELECT, UPDATE ON log_order TO tracker_projector;
GRANT SELECT ON log_order TO tracker_report;

ALTER TABLE log_shards ADD COLUMN worker_checkpoint_tx xid8, ADD COLUMN worker_checkpoint_seq bigint;
UPDATE log_shards SET worker_checkpoint_tx = checkpoint_tx, worker_checkpoint_seq = checkpoint_seq,
                      checkpoint_tx = '0', checkpoint_seq = 0;

DROP TRIGGER events_log_order ON events;
DO $$
DECLARE
    part record;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'events'::regclass AND c.relname ~ '^events_[0-9]{8}$'
          AND to_date(substr(c.relname, 8), 'YYYYMMDD') < (SELECT coordinator_from FROM log_order)
    LOOP
        EXECUTE format('CREATE TRIGGER events_log_order BEFORE INSERT ON %I FOR EACH ROW EXECUTE FUNCTION tracker_stamp_log_order()',
                       part.relname);
    END LOOP;
END
$$;
