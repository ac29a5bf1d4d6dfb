-- Projectors per group of shards (`tracker project --group K/N`, on a distributed log). Each
-- group is the only writer of the states of its shards' ads and loads; what one group's step
-- owes a state of another group goes into that group's inbox, written in the same transaction
-- as the step's checkpoints, and the owner folds it into the state in its next step:
--   * an ad_loaded that names its load: the load's state is keyed by the load's id, on the
--     load's shard, while the ad_loaded is on its ad's (event: the reference, packed as
--     ad_state packs events, labelled by the group that read it);
--   * a high_rate group that went over its limit: every event of it projected before is
--     labelled, also those whose states another group writes (event NULL; event_id: the one
--     to label).
-- A report waits for the inbox as for the log (docs/ARCHITECTURE.md, "Projectors per group of
-- shards"). On a single node, and for a projector of the whole log, the inbox stays empty.
CREATE TABLE projection_inbox (
    seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The log shard whose group folds it (log_shards.shard_id).
    shard_id  bigint NOT NULL,
    -- The state's key: a load's id, or an ad's request id.
    state_key text   NOT NULL,
    event     bytea,
    event_id  uuid,
    -- A reference's network (its ad unit's first segment): what a key scoped to networks counts
    -- in its lag. NULL for a relabel.
    network   text,
    CHECK ((event IS NULL) <> (event_id IS NULL))
);
CREATE INDEX projection_inbox_shard ON projection_inbox (shard_id, seq);
REVOKE ALL ON projection_inbox FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON projection_inbox TO tracker_projector;
GRANT SELECT ON projection_inbox TO tracker_report;

-- The newest receipt each shard's projector has projected: the high_rate counts of a minute
-- (client_minutes) are forgotten only once every group is an hour past it. NULL: not known yet.
ALTER TABLE IF EXISTS log_shards ADD COLUMN IF NOT EXISTS projected_receipt timestamptz;
