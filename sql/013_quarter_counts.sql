-- The half-day rows' running counts as one bytea per row (docs/REPORTS.md, "Time zones and
-- hours").
--
-- A report in a time zone reads the half-day rows of its range and cuts the local days or
-- hours out of them in the tracker. PostgreSQL sends a bigint[] element by element, through
-- the element type's send function; it sends a bytea as the bytes it holds (docs/PERFORMANCE.md
-- measures both).
--
-- counts: the 49 running counts of each measure (element k + 1 being the events of the half
-- day's first k quarter hours), element by element and, within an element, measure by measure
-- in the order the column's comment names them: bytes 8 * (k * W + m) to 8 * (k * W + m) + 7
-- hold element k + 1 of measure m (both from 0; W measures) as a big-endian int64. A row is
-- 49 * 8 * W bytes: 5 488 for the format table's 14 measures. PLAIN storage keeps it
-- uncompressed in the row, so reading it decompresses nothing.
--
-- The projector reads a row's counts, adds its step's and writes them back (it is the only
-- writer, one step at a time under its lock); PostgreSQL does no arithmetic on them.
--
-- toast_tuple_target = 8160: a row's counts alone are past PostgreSQL's 2 kB TOAST threshold,
-- and without it every key text longer than a few bytes (a real ad unit path) would be moved
-- out of the row, to be fetched back for every row a report reads.
--
-- Each table is made anew and filled from its arrays, which are then dropped (grants added by
-- hand to the old tables are not carried over); the packing is written out in each INSERT so
-- that the migration needs no temporary objects (a role may lack TEMP): the counts in order,
-- count i / W + 1 of measure i % W + 1 for i from 0.

ALTER TABLE format_quarters RENAME TO format_quarters_arrays;
ALTER TABLE format_quarters_arrays RENAME CONSTRAINT format_quarters_pkey TO format_quarters_arrays_pkey;
CREATE TABLE format_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, traffic_class)
);
ALTER TABLE format_quarters ALTER COLUMN counts SET STORAGE PLAIN;
ALTER TABLE format_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN format_quarters.counts IS 'impressions,duplicate_impressions,stale_impressions,clicks,duplicate_clicks,attributed_clicks,adchoices_impressions,adchoices_clicks,video_plays,video_ends,eea_reservation_impressions,with_adchoices,givt_impressions,givt_clicks';
INSERT INTO format_quarters
SELECT traffic_class, quarters_from, ad_unit, format_id,
       (SELECT string_agg(int8send(a[i % 14 + 1][i / 14 + 1]), ''::bytea ORDER BY i) FROM generate_series(0, 49 * 14 - 1) AS i)
FROM (SELECT traffic_class, quarters_from, ad_unit, format_id,
             ARRAY[impressions, duplicate_impressions, stale_impressions, clicks, duplicate_clicks, attributed_clicks,
                   adchoices_impressions, adchoices_clicks, video_plays, video_ends, eea_reservation_impressions, with_adchoices,
                   givt_impressions, givt_clicks] AS a
      FROM format_quarters_arrays) AS arrays;
DROP TABLE format_quarters_arrays;

ALTER TABLE asset_quarters RENAME TO asset_quarters_arrays;
ALTER TABLE asset_quarters_arrays RENAME CONSTRAINT asset_quarters_pkey TO asset_quarters_arrays_pkey;
CREATE TABLE asset_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    asset_key     text        NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, asset_key, traffic_class)
);
ALTER TABLE asset_quarters ALTER COLUMN counts SET STORAGE PLAIN;
ALTER TABLE asset_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN asset_quarters.counts IS 'clicks,duplicate_clicks,attributed_clicks,no_impression,before_impression,outside_window';
INSERT INTO asset_quarters
SELECT traffic_class, quarters_from, ad_unit, format_id, asset_key,
       (SELECT string_agg(int8send(a[i % 6 + 1][i / 6 + 1]), ''::bytea ORDER BY i) FROM generate_series(0, 49 * 6 - 1) AS i)
FROM (SELECT traffic_class, quarters_from, ad_unit, format_id, asset_key,
             ARRAY[clicks, duplicate_clicks, attributed_clicks, no_impression, before_impression, outside_window] AS a
      FROM asset_quarters_arrays) AS arrays;
DROP TABLE asset_quarters_arrays;

ALTER TABLE source_quarters RENAME TO source_quarters_arrays;
ALTER TABLE source_quarters_arrays RENAME CONSTRAINT source_quarters_pkey TO source_quarters_arrays_pkey;
CREATE TABLE source_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    adapter       text        NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, adapter, traffic_class)
);
ALTER TABLE source_quarters ALTER COLUMN counts SET STORAGE PLAIN;
ALTER TABLE source_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN source_quarters.counts IS 'app_impressions,sdk_impressions,mediation_impressions,double_tracked_impression_ads,double_tracked_click_ads';
INSERT INTO source_quarters
SELECT traffic_class, quarters_from, ad_unit, format_id, adapter,
       (SELECT string_agg(int8send(a[i % 5 + 1][i / 5 + 1]), ''::bytea ORDER BY i) FROM generate_series(0, 49 * 5 - 1) AS i)
FROM (SELECT traffic_class, quarters_from, ad_unit, format_id, adapter,
             ARRAY[app_impressions, sdk_impressions, mediation_impressions, double_tracked_impression_ads, double_tracked_click_ads] AS a
      FROM source_quarters_arrays) AS arrays;
DROP TABLE source_quarters_arrays;

ALTER TABLE ivt_quarters RENAME TO ivt_quarters_arrays;
ALTER TABLE ivt_quarters_arrays RENAME CONSTRAINT ivt_quarters_pkey TO ivt_quarters_arrays_pkey;
CREATE TABLE ivt_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    label         text        NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, label, traffic_class)
);
ALTER TABLE ivt_quarters ALTER COLUMN counts SET STORAGE PLAIN;
ALTER TABLE ivt_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN ivt_quarters.counts IS 'impressions,clicks,events';
INSERT INTO ivt_quarters
SELECT traffic_class, quarters_from, ad_unit, format_id, label,
       (SELECT string_agg(int8send(a[i % 3 + 1][i / 3 + 1]), ''::bytea ORDER BY i) FROM generate_series(0, 49 * 3 - 1) AS i)
FROM (SELECT traffic_class, quarters_from, ad_unit, format_id, label, ARRAY[impressions, clicks, events] AS a
      FROM ivt_quarters_arrays) AS arrays;
DROP TABLE ivt_quarters_arrays;

DROP FUNCTION tracker_add_counts(bigint[], bigint[]);

REVOKE ALL ON format_quarters, asset_quarters, source_quarters, ivt_quarters FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON format_quarters, asset_quarters, source_quarters, ivt_quarters TO tracker_projector;
GRANT SELECT ON format_quarters, asset_quarters, source_quarters, ivt_quarters TO tracker_report;

ANALYZE format_quarters, asset_quarters, source_quarters, ivt_quarters;
