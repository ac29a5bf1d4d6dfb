-- PROTOCOL.md 5's rules as one SQL query per report over the raw events, for PostgreSQL and DuckDB
-- alike (scripts/bench-report.sh runs them on both and checks their rows against the
-- tracker's). This file is the shared head of the query; each report's file (summary.sql,
-- assets.sql, sources.sql, adchoices.sql) is its tail. They read a relation `ev`: request_id,
-- id (lower-case UUID text), type and source (text), ts (corrected time, UTC, without time
-- zone), ad_unit, format_id, asset_key, adapter, eea, reservation, test. @FROM@ and @TO@ are
-- replaced by the report's first and last day.
--
-- Like the tracker they leave test traffic out (test events and the SDK's sample ad units),
-- order an ad's events by corrected time then id, count the earliest impression per ad and
-- the rest as duplicates, take each ad's clicks per asset key in order and count one as a
-- duplicate when it comes at most 1 s after the last counted one (the recursive walk below),
-- attribute counted clicks to the counted impression with 1 s of tolerance and a 1 h window,
-- and count an impression stale more than 1 h after the ad's earliest ad_loaded.
WITH RECURSIVE
e AS (
    SELECT request_id, id, type, ts, CAST(ts AS date) AS day, ad_unit, format_id,
           coalesce(asset_key, '') AS asset_key, source, coalesce(adapter, '') AS adapter, eea, reservation,
           row_number() OVER (PARTITION BY request_id, type ORDER BY ts, id) AS k
    FROM ev
    WHERE NOT test
      AND ad_unit NOT IN ('/6499/example/native', '/6499/example/native-backfill',
                          '/21775744923/example/native', '/21775744923/example/native-backfill')
      AND type IN ('impression', 'click', 'ad_loaded', 'adchoices_impression', 'adchoices_click', 'video_play', 'video_end')
),
-- Per ad: impressions or clicks from more than one source, its earliest ad_loaded, whether
-- it has any AdChoices impression.
ad AS (
    SELECT request_id,
           min(source) FILTER (WHERE type = 'impression') <> max(source) FILTER (WHERE type = 'impression') AS impressions_double,
           min(source) FILTER (WHERE type = 'click') <> max(source) FILTER (WHERE type = 'click') AS clicks_double,
           min(ts) FILTER (WHERE type = 'ad_loaded') AS loaded_at,
           bool_or(type = 'adchoices_impression') AS has_adchoices
    FROM e
    GROUP BY request_id
),
counted AS (
    SELECT request_id, ts, day, ad_unit, format_id, adapter, eea, reservation
    FROM e WHERE type = 'impression' AND k = 1
),
clk AS (
    SELECT request_id, asset_key, ts, day, ad_unit, format_id,
           row_number() OVER (PARTITION BY request_id, asset_key ORDER BY ts, id) AS n
    FROM e WHERE type = 'click'
),
-- The duplicate-click rule walks each ad's clicks on one asset in order, carrying the time
-- of the last counted click (anchor): one step per click, as many steps as the longest run.
walk (request_id, asset_key, n, anchor, dup) AS (
    SELECT request_id, asset_key, n, ts, false FROM clk WHERE n = 1
    UNION ALL
    SELECT c.request_id, c.asset_key, c.n,
           CASE WHEN c.ts <= w.anchor + INTERVAL '1 second' THEN w.anchor ELSE c.ts END,
           c.ts <= w.anchor + INTERVAL '1 second'
    FROM walk w JOIN clk c ON c.request_id = w.request_id AND c.asset_key = w.asset_key AND c.n = w.n + 1
),
click AS (
    SELECT c.day, c.ad_unit, c.format_id, c.asset_key, w.dup,
           CASE WHEN w.dup THEN NULL
                WHEN i.ts IS NULL THEN 'noImpression'
                WHEN c.ts < i.ts - INTERVAL '1 second' THEN 'beforeImpression'
                WHEN c.ts > i.ts + INTERVAL '1 hour' THEN 'outsideWindow'
                ELSE 'attributed' END AS outcome
    FROM clk c
    JOIN walk w ON w.request_id = c.request_id AND w.asset_key = c.asset_key AND w.n = c.n
    LEFT JOIN counted i ON i.request_id = c.request_id
)
