-- Keys scoped to Ad Manager networks (docs/PROTOCOL.md, section 11): a key with networks sends
-- and reads the ad units of those networks only; NULL is a key of every network. Network codes
-- are digits, 1 to 20 of them, kept sorted and without repeats by the tracker.
ALTER TABLE api_keys ADD COLUMN networks text[]
    CHECK (networks IS NULL OR (cardinality(networks) > 0 AND array_to_string(networks, ',') ~ '^[0-9]{1,20}(,[0-9]{1,20})*$'));
GRANT SELECT (networks) ON api_keys TO tracker_ingest;

-- The networks of the key that made an import (NULL: an unscoped key): a scoped key sees only
-- the imports made by keys whose networks lie within its own.
ALTER TABLE reconciliation_imports ADD COLUMN networks text[];
