-- Projections: what the reports read (SPEC sections 5 and 6). They are maintained from the
-- log by the projector and can be rebuilt from the log alone (tracker rebuild).
--
-- ad_events keeps, per ad (request_id), the fields the report rules need, so that when an
-- event arrives the projector can recompute that ad's contribution exactly: subtract what
-- the ad contributed before, add what it contributes now. The three *_day tables hold the
-- sums the reports read. traffic_class: 0 = ads without test events (in every report),
-- 1 = ads with test events, computed over all their events (reports that include test
-- traffic), 2 = the same ads over their non-test events only (reports that exclude it).

CREATE TABLE ad_events (
    request_id   text         NOT NULL,
    id           uuid         NOT NULL,
    type         event_type   NOT NULL,
    corrected_at timestamptz  NOT NULL,
    ad_unit      text         NOT NULL,
    format_id    text         NOT NULL,
    asset_key    text,
    source       event_source NOT NULL,
    adapter      text,
    eea          boolean      NOT NULL,
    reservation  boolean      NOT NULL,
    is_test      boolean      NOT NULL
);
CREATE INDEX ad_events_by_ad ON ad_events (request_id);

CREATE TABLE format_day (
    traffic_class               smallint NOT NULL,
    day                         date     NOT NULL,
    ad_unit                     text     NOT NULL,
    format_id                   text     NOT NULL,
    impressions                 bigint   NOT NULL DEFAULT 0,
    duplicate_impressions       bigint   NOT NULL DEFAULT 0,
    stale_impressions           bigint   NOT NULL DEFAULT 0,
    clicks                      bigint   NOT NULL DEFAULT 0,
    duplicate_clicks            bigint   NOT NULL DEFAULT 0,
    attributed_clicks           bigint   NOT NULL DEFAULT 0,
    adchoices_impressions       bigint   NOT NULL DEFAULT 0,
    adchoices_clicks            bigint   NOT NULL DEFAULT 0,
    video_plays                 bigint   NOT NULL DEFAULT 0,
    video_ends                  bigint   NOT NULL DEFAULT 0,
    eea_reservation_impressions bigint   NOT NULL DEFAULT 0,
    with_adchoices              bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (day, ad_unit, format_id, traffic_class)
);

CREATE TABLE asset_day (
    traffic_class     smallint NOT NULL,
    day               date     NOT NULL,
    ad_unit           text     NOT NULL,
    format_id         text     NOT NULL,
    asset_key         text     NOT NULL,
    clicks            bigint   NOT NULL DEFAULT 0,
    duplicate_clicks  bigint   NOT NULL DEFAULT 0,
    attributed_clicks bigint   NOT NULL DEFAULT 0,
    no_impression     bigint   NOT NULL DEFAULT 0,
    before_impression bigint   NOT NULL DEFAULT 0,
    outside_window    bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (day, ad_unit, format_id, asset_key, traffic_class)
);

CREATE TABLE source_day (
    traffic_class                 smallint NOT NULL,
    day                           date     NOT NULL,
    ad_unit                       text     NOT NULL,
    format_id                     text     NOT NULL,
    adapter                       text     NOT NULL,
    app_impressions               bigint   NOT NULL DEFAULT 0,
    sdk_impressions               bigint   NOT NULL DEFAULT 0,
    mediation_impressions         bigint   NOT NULL DEFAULT 0,
    double_tracked_impression_ads bigint   NOT NULL DEFAULT 0,
    double_tracked_click_ads      bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (day, ad_unit, format_id, adapter, traffic_class)
);

-- How far the projections have read the log, and with which attribution window they were
-- computed. One row; it commits in the same transaction as the changes it describes.
CREATE TABLE projection_state (
    singleton          boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    checkpoint_tx      xid8        NOT NULL DEFAULT '0',
    checkpoint_seq     bigint      NOT NULL DEFAULT 0,
    events_projected   bigint      NOT NULL DEFAULT 0,
    attribution_window interval    NOT NULL DEFAULT '1 hour',
    updated_at         timestamptz NOT NULL DEFAULT now()
);
INSERT INTO projection_state DEFAULT VALUES;
