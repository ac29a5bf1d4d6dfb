-- The half-day rows of the funnel and the waterfall carry latency buckets beside their counts:
-- 256 and 232 bytes per running count, so a row with most of its quarter hours is past the
-- 8160 bytes these tables keep inline (their toast_tuple_target) and its counts go to TOAST.
-- A report by local day reads two elements of each row, the cut and the total (the last
-- running count), and each element read from TOAST is an index lookup of its own. The total
-- is kept inline beside the counts, computed by PostgreSQL from them at every write, so that
-- the total costs no lookup and a half day that a local day takes whole (its cut is its
-- total) costs none at all.
ALTER TABLE funnel_quarters
    ADD COLUMN totals bytea GENERATED ALWAYS AS (substring(counts FROM octet_length(counts) - 255 FOR 256)) STORED;
ALTER TABLE waterfall_quarters
    ADD COLUMN totals bytea GENERATED ALWAYS AS (substring(counts FROM octet_length(counts) - 231 FOR 232)) STORED;
-- Never compressed nor moved out: a row a little past the limit would otherwise have its totals
-- compressed in place before its counts went to TOAST.
ALTER TABLE funnel_quarters ALTER COLUMN totals SET STORAGE PLAIN;
ALTER TABLE waterfall_quarters ALTER COLUMN totals SET STORAGE PLAIN;
COMMENT ON COLUMN funnel_quarters.totals IS 'the last running count of counts: the half day''s totals';
COMMENT ON COLUMN waterfall_quarters.totals IS 'the last running count of counts: the half day''s totals';
