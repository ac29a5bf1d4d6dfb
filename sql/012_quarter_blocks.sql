-- Local days and hours from half-day rows of running counts (docs/REPORTS.md, "Time zones
-- and hours").
--
-- The *_quarter_hour tables held one row per UTC quarter hour and key: a 30-day report in a
-- time zone summed 96 rows a day per key, 65 000 asset rows at 10 M events, 120-200 ms. The
-- *_quarters tables hold the same counts 48 quarter hours to a row: one row per UTC half day
-- (quarters_from, at 00:00 or 12:00 UTC) and key, each measure an array of 49 running counts,
-- element k + 1 being the events of the half day's first k quarter hours (element 1 is 0,
-- element 49 the half day's total). The events of quarter hours a to b - 1 of a row are
-- m[b + 1] - m[a + 1]: any local day or hour is one slice of one or two rows, two array reads
-- each. PLAIN storage keeps the arrays uncompressed in the row (the widest row, format's 14
-- arrays, is under 6 kB), so reading an element decompresses nothing.

CREATE TABLE format_quarters (
    traffic_class               smallint    NOT NULL,
    quarters_from               timestamptz NOT NULL,
    ad_unit                     text        NOT NULL,
    format_id                   text        NOT NULL,
    impressions                 bigint[]    NOT NULL,
    duplicate_impressions       bigint[]    NOT NULL,
    stale_impressions           bigint[]    NOT NULL,
    clicks                      bigint[]    NOT NULL,
    duplicate_clicks            bigint[]    NOT NULL,
    attributed_clicks           bigint[]    NOT NULL,
    adchoices_impressions       bigint[]    NOT NULL,
    adchoices_clicks            bigint[]    NOT NULL,
    video_plays                 bigint[]    NOT NULL,
    video_ends                  bigint[]    NOT NULL,
    eea_reservation_impressions bigint[]    NOT NULL,
    with_adchoices              bigint[]    NOT NULL,
    givt_impressions            bigint[]    NOT NULL,
    givt_clicks                 bigint[]    NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, traffic_class)
);

CREATE TABLE asset_quarters (
    traffic_class     smallint    NOT NULL,
    quarters_from     timestamptz NOT NULL,
    ad_unit           text        NOT NULL,
    format_id         text        NOT NULL,
    asset_key         text        NOT NULL,
    clicks            bigint[]    NOT NULL,
    duplicate_clicks  bigint[]    NOT NULL,
    attributed_clicks bigint[]    NOT NULL,
    no_impression     bigint[]    NOT NULL,
    before_impression bigint[]    NOT NULL,
    outside_window    bigint[]    NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, asset_key, traffic_class)
);

CREATE TABLE source_quarters (
    traffic_class                 smallint    NOT NULL,
    quarters_from                 timestamptz NOT NULL,
    ad_unit                       text        NOT NULL,
    format_id                     text        NOT NULL,
    adapter                       text        NOT NULL,
    app_impressions               bigint[]    NOT NULL,
    sdk_impressions               bigint[]    NOT NULL,
    mediation_impressions         bigint[]    NOT NULL,
    double_tracked_impression_ads bigint[]    NOT NULL,
    double_tracked_click_ads      bigint[]    NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, adapter, traffic_class)
);

CREATE TABLE ivt_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    label         text        NOT NULL,
    impressions   bigint[]    NOT NULL,
    clicks        bigint[]    NOT NULL,
    events        bigint[]    NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, label, traffic_class)
);

DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT a.attrelid::regclass AS t, a.attname FROM pg_attribute a
             WHERE a.attrelid IN ('format_quarters'::regclass, 'asset_quarters'::regclass, 'source_quarters'::regclass,
                                  'ivt_quarters'::regclass)
               AND a.atttypid = 'bigint[]'::regtype AND a.attnum > 0 AND NOT a.attisdropped LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET STORAGE PLAIN', c.t, c.attname);
    END LOOP;
END
$$;

-- Adds a step's running counts to a row's (element by element; both have 49 elements).
CREATE FUNCTION tracker_add_counts(total bigint[], delta bigint[]) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    FOR i IN 1..cardinality(total) LOOP
        total[i] := total[i] + delta[i];
    END LOOP;
    RETURN total;
END
$$;

DROP TABLE format_quarter_hour, asset_quarter_hour, source_quarter_hour, ivt_quarter_hour;

-- Projections made before this migration have their quarter hours in the dropped tables only:
-- until tracker rebuild fills the new ones, a report in another zone or by hour is refused
-- with that advice (UTC days still work).
UPDATE projection_state SET quarter_hours_complete = false WHERE events_projected > 0;

REVOKE ALL ON format_quarters, asset_quarters, source_quarters, ivt_quarters FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON format_quarters, asset_quarters, source_quarters, ivt_quarters TO tracker_projector;
GRANT SELECT ON format_quarters, asset_quarters, source_quarters, ivt_quarters TO tracker_report;
