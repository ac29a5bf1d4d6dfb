-- The half-day rows' running counts kept sparsely (docs/REPORTS.md, "Time zones and hours").
--
-- A half-day row holds 49 running counts of each measure (running count j: the events of the
-- half day's first j quarter hours). Stored densely, a key seen once in a half day cost as much
-- as a key seen in every quarter hour of it (5.5 kB for a format row), so a client that sends
-- many distinct ad units or asset keys multiplied the database's size. A row now keeps only the
-- running counts that differ from the one before:
--
-- mask:   bit k (0 to 47) set when quarter hour k changed any count of the row;
-- counts: for each set bit, in order, the running counts after that quarter hour, measure by
--         measure in the order the column's comment names them, each a big-endian int64.
--
-- Running count j is the entry of the last set bit below j (bit_count of the mask's low j bits,
-- less one), or 0 when no bit below j is set; the half day's total is the last entry. A row
-- whose quarter hours all had events is no larger than the dense form was.
--
-- EXTERNAL storage: a row stays uncompressed in its page while it fits (toast_tuple_target =
-- 8160), so reading it decompresses nothing; a wider table's busiest rows go out of line
-- uncompressed, where a substring reads only the chunks it needs.
--
-- Each table is made anew and filled from the dense one, which is then dropped (grants added by
-- hand to the old tables are not carried over; tracker rebuild keeps them).

ALTER TABLE format_quarters RENAME TO format_quarters_dense;
ALTER TABLE format_quarters_dense RENAME CONSTRAINT format_quarters_pkey TO format_quarters_dense_pkey;
CREATE TABLE format_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    mask          bigint      NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, traffic_class)
);
ALTER TABLE format_quarters ALTER COLUMN counts SET STORAGE EXTERNAL;
ALTER TABLE format_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN format_quarters.counts IS 'impressions,duplicate_impressions,stale_impressions,clicks,duplicate_clicks,attributed_clicks,adchoices_impressions,adchoices_clicks,video_plays,video_ends,eea_reservation_impressions,with_adchoices,givt_impressions,givt_clicks';
INSERT INTO format_quarters
SELECT d.traffic_class, d.quarters_from, d.ad_unit, d.format_id, s.mask, s.counts
FROM format_quarters_dense AS d,
     LATERAL (SELECT coalesce(sum(1::int8 << (j - 1)), 0)::int8 AS mask,
                     coalesce(string_agg(substring(d.counts FROM j * 112 + 1 FOR 112), ''::bytea ORDER BY j), ''::bytea) AS counts
              FROM generate_series(1, 48) AS j
              WHERE substring(d.counts FROM j * 112 + 1 FOR 112) <> substring(d.counts FROM (j - 1) * 112 + 1 FOR 112)) AS s
WHERE s.mask <> 0;
DROP TABLE format_quarters_dense;

ALTER TABLE asset_quarters RENAME TO asset_quarters_dense;
ALTER TABLE asset_quarters_dense RENAME CONSTRAINT asset_quarters_pkey TO asset_quarters_dense_pkey;
CREATE TABLE asset_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    asset_key     text        NOT NULL,
    mask          bigint      NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, asset_key, traffic_class)
);
ALTER TABLE asset_quarters ALTER COLUMN counts SET STORAGE EXTERNAL;
ALTER TABLE asset_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN asset_quarters.counts IS 'clicks,duplicate_clicks,attributed_clicks,no_impression,before_impression,outside_window';
INSERT INTO asset_quarters
SELECT d.traffic_class, d.quarters_from, d.ad_unit, d.format_id, d.asset_key, s.mask, s.counts
FROM asset_quarters_dense AS d,
     LATERAL (SELECT coalesce(sum(1::int8 << (j - 1)), 0)::int8 AS mask,
                     coalesce(string_agg(substring(d.counts FROM j * 48 + 1 FOR 48), ''::bytea ORDER BY j), ''::bytea) AS counts
              FROM generate_series(1, 48) AS j
              WHERE substring(d.counts FROM j * 48 + 1 FOR 48) <> substring(d.counts FROM (j - 1) * 48 + 1 FOR 48)) AS s
WHERE s.mask <> 0;
DROP TABLE asset_quarters_dense;

ALTER TABLE source_quarters RENAME TO source_quarters_dense;
ALTER TABLE source_quarters_dense RENAME CONSTRAINT source_quarters_pkey TO source_quarters_dense_pkey;
CREATE TABLE source_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    adapter       text        NOT NULL,
    mask          bigint      NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, adapter, traffic_class)
);
ALTER TABLE source_quarters ALTER COLUMN counts SET STORAGE EXTERNAL;
ALTER TABLE source_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN source_quarters.counts IS 'app_impressions,sdk_impressions,mediation_impressions,double_tracked_impression_ads,double_tracked_click_ads';
INSERT INTO source_quarters
SELECT d.traffic_class, d.quarters_from, d.ad_unit, d.format_id, d.adapter, s.mask, s.counts
FROM source_quarters_dense AS d,
     LATERAL (SELECT coalesce(sum(1::int8 << (j - 1)), 0)::int8 AS mask,
                     coalesce(string_agg(substring(d.counts FROM j * 40 + 1 FOR 40), ''::bytea ORDER BY j), ''::bytea) AS counts
              FROM generate_series(1, 48) AS j
              WHERE substring(d.counts FROM j * 40 + 1 FOR 40) <> substring(d.counts FROM (j - 1) * 40 + 1 FOR 40)) AS s
WHERE s.mask <> 0;
DROP TABLE source_quarters_dense;

ALTER TABLE ivt_quarters RENAME TO ivt_quarters_dense;
ALTER TABLE ivt_quarters_dense RENAME CONSTRAINT ivt_quarters_pkey TO ivt_quarters_dense_pkey;
CREATE TABLE ivt_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    label         text        NOT NULL,
    mask          bigint      NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, label, traffic_class)
);
ALTER TABLE ivt_quarters ALTER COLUMN counts SET STORAGE EXTERNAL;
ALTER TABLE ivt_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN ivt_quarters.counts IS 'impressions,clicks,events';
INSERT INTO ivt_quarters
SELECT d.traffic_class, d.quarters_from, d.ad_unit, d.format_id, d.label, s.mask, s.counts
FROM ivt_quarters_dense AS d,
     LATERAL (SELECT coalesce(sum(1::int8 << (j - 1)), 0)::int8 AS mask,
                     coalesce(string_agg(substring(d.counts FROM j * 24 + 1 FOR 24), ''::bytea ORDER BY j), ''::bytea) AS counts
              FROM generate_series(1, 48) AS j
              WHERE substring(d.counts FROM j * 24 + 1 FOR 24) <> substring(d.counts FROM (j - 1) * 24 + 1 FOR 24)) AS s
WHERE s.mask <> 0;
DROP TABLE ivt_quarters_dense;

REVOKE ALL ON format_quarters, asset_quarters, source_quarters, ivt_quarters FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON format_quarters, asset_quarters, source_quarters, ivt_quarters TO tracker_projector;
GRANT SELECT ON format_quarters, asset_quarters, source_quarters, ivt_quarters TO tracker_report;

ANALYZE format_quarters, asset_quarters, source_quarters, ivt_quarters;
