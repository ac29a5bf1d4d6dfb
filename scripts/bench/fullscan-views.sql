-- The report numbers computed by a full scan of the raw log, for comparison with the
-- projections (this file: the views; scripts/bench-report.sh holds one query per report).
-- They compute each report's main measures with PROTOCOL.md 5's per-ad rules: the counted
-- impression is the earliest per ad (ties by id), duplicates are the rest, clicks are
-- attributed against the counted impression (1 s tolerance, 1 h window). The duplicate-click
-- rule is left out, which makes these queries cheaper than the real thing, not dearer.
CREATE TEMP VIEW ev AS
    SELECT request_id, id, type, corrected_at, (corrected_at AT TIME ZONE 'UTC')::date AS day, ad_unit, format_id,
           asset_key, source, coalesce(adapter, '') AS adapter, eea, reservation
    FROM events
    WHERE NOT test AND ad_unit NOT IN ('/6499/example/native', '/6499/example/native-backfill',
                                       '/21775744923/example/native', '/21775744923/example/native-backfill');
CREATE TEMP VIEW imp AS
    SELECT *, row_number() OVER (PARTITION BY request_id ORDER BY corrected_at, id::text) AS rn,
           min(source::text) OVER (PARTITION BY request_id) <> max(source::text) OVER (PARTITION BY request_id) AS double_tracked
    FROM ev WHERE type = 'impression';
CREATE TEMP VIEW counted AS
    SELECT DISTINCT ON (request_id) request_id, corrected_at
    FROM ev WHERE type = 'impression' ORDER BY request_id, corrected_at, id::text;
CREATE TEMP VIEW clk AS
    SELECT c.day, c.ad_unit, c.format_id, c.asset_key,
           i.corrected_at IS NULL AS no_impression,
           c.corrected_at < i.corrected_at - interval '1 s' AS before_impression,
           c.corrected_at > i.corrected_at + interval '1 hour' AS outside_window
    FROM ev c LEFT JOIN counted i ON i.request_id = c.request_id
    WHERE c.type = 'click';
