-- Reports in any time zone, by day or by hour (docs/PROTOCOL.md, "Time zones and hours").
--
-- Every time-zone offset in use since 1980 is a whole number of quarter hours, so every local
-- day and every local hour of every zone is a whole number of UTC quarter hours. The
-- *_quarter_hour tables hold the same measures as the *_day tables, per UTC quarter hour
-- (quarter_hour is its start); a report in another zone, or by hour, sums them by the local
-- day or hour each quarter hour falls in. The *_day tables stay: a report of UTC days reads a
-- few hundred rows there instead of 96 times as many here. The projector writes both from
-- one set of row changes, so they always agree.

CREATE TABLE format_quarter_hour (
    traffic_class               smallint    NOT NULL,
    quarter_hour                timestamptz NOT NULL,
    ad_unit                     text        NOT NULL,
    format_id                   text        NOT NULL,
    impressions                 bigint      NOT NULL DEFAULT 0,
    duplicate_impressions       bigint      NOT NULL DEFAULT 0,
    stale_impressions           bigint      NOT NULL DEFAULT 0,
    clicks                      bigint      NOT NULL DEFAULT 0,
    duplicate_clicks            bigint      NOT NULL DEFAULT 0,
    attributed_clicks           bigint      NOT NULL DEFAULT 0,
    adchoices_impressions       bigint      NOT NULL DEFAULT 0,
    adchoices_clicks            bigint      NOT NULL DEFAULT 0,
    video_plays                 bigint      NOT NULL DEFAULT 0,
    video_ends                  bigint      NOT NULL DEFAULT 0,
    eea_reservation_impressions bigint      NOT NULL DEFAULT 0,
    with_adchoices              bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (quarter_hour, ad_unit, format_id, traffic_class)
);

CREATE TABLE asset_quarter_hour (
    traffic_class     smallint    NOT NULL,
    quarter_hour      timestamptz NOT NULL,
    ad_unit           text        NOT NULL,
    format_id         text        NOT NULL,
    asset_key         text        NOT NULL,
    clicks            bigint      NOT NULL DEFAULT 0,
    duplicate_clicks  bigint      NOT NULL DEFAULT 0,
    attributed_clicks bigint      NOT NULL DEFAULT 0,
    no_impression     bigint      NOT NULL DEFAULT 0,
    before_impression bigint      NOT NULL DEFAULT 0,
    outside_window    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (quarter_hour, ad_unit, format_id, asset_key, traffic_class)
);

CREATE TABLE source_quarter_hour (
    traffic_class                 smallint    NOT NULL,
    quarter_hour                  timestamptz NOT NULL,
    ad_unit                       text        NOT NULL,
    format_id                     text        NOT NULL,
    adapter                       text        NOT NULL,
    app_impressions               bigint      NOT NULL DEFAULT 0,
    sdk_impressions               bigint      NOT NULL DEFAULT 0,
    mediation_impressions         bigint      NOT NULL DEFAULT 0,
    double_tracked_impression_ads bigint      NOT NULL DEFAULT 0,
    double_tracked_click_ads      bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (quarter_hour, ad_unit, format_id, adapter, traffic_class)
);

-- Projections made before this migration have no quarter hours: until tracker rebuild fills
-- them, a report in another zone or by hour is refused with that advice (UTC days still work).
ALTER TABLE projection_state ADD COLUMN quarter_hours_complete boolean NOT NULL DEFAULT true;
UPDATE projection_state SET quarter_hours_complete = false WHERE events_projected > 0;

REVOKE ALL ON format_quarter_hour, asset_quarter_hour, source_quarter_hour FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON format_quarter_hour, asset_quarter_hour, source_quarter_hour TO tracker_projector;
GRANT SELECT ON format_quarter_hour, asset_quarter_hour, source_quarter_hour TO tracker_report;
