-- The ad funnel (docs/PROTOCOL.md, section 10; docs/REPORTS.md, "The ad funnel"): the load's
-- events in the log, and the projections of the funnel, failures and waterfall reports.

-- Three event types: a load asked for (ad_request), a load that failed (ad_failed), and one
-- network's answer in the mediation waterfall (mediation_result).
ALTER TYPE event_type ADD VALUE 'ad_request';
ALTER TYPE event_type ADD VALUE 'ad_failed';
ALTER TYPE event_type ADD VALUE 'mediation_result';

-- The funnel's fields. A load's events have no request id: the log keeps them under the load's
-- id in request_id (the key of their state, and on Citus of their shard) and in load_id; an
-- ad_loaded keeps its ad's request id there and names its load in load_id. error_code and
-- result hold the protocol's names (the tracker validates them). Adding nullable columns to the
-- partitioned log rewrites nothing.
ALTER TABLE events
    ADD COLUMN load_id       text,
    ADD COLUMN ads_requested integer,
    ADD COLUMN latency_ms    integer,
    ADD COLUMN error_code    text,
    ADD COLUMN result        text,
    ADD COLUMN position      integer;
GRANT INSERT (load_id, ads_requested, latency_ms, error_code, result, position) ON events TO tracker_ingest;

-- The projections, as the others: a day table (a column per measure) and a half-day table of
-- sparse running counts (sql/014_sparse_quarters.sql). Latencies are counted per fixed bucket
-- (the column names its upper bound in milliseconds), from which reports read percentiles.

CREATE TABLE funnel_day (
    traffic_class       smallint    NOT NULL,
    day                 date        NOT NULL,
    ad_unit             text        NOT NULL,
    format_id           text        NOT NULL,
    requests            bigint      NOT NULL DEFAULT 0,
    ads_requested       bigint      NOT NULL DEFAULT 0,
    filled_requests     bigint      NOT NULL DEFAULT 0,
    failed_requests     bigint      NOT NULL DEFAULT 0,
    unanswered_requests bigint      NOT NULL DEFAULT 0,
    loaded_ads          bigint      NOT NULL DEFAULT 0,
    shown_ads           bigint      NOT NULL DEFAULT 0,
    load_latency_10     bigint      NOT NULL DEFAULT 0,
    load_latency_20     bigint      NOT NULL DEFAULT 0,
    load_latency_30     bigint      NOT NULL DEFAULT 0,
    load_latency_50     bigint      NOT NULL DEFAULT 0,
    load_latency_75     bigint      NOT NULL DEFAULT 0,
    load_latency_100    bigint      NOT NULL DEFAULT 0,
    load_latency_150    bigint      NOT NULL DEFAULT 0,
    load_latency_200    bigint      NOT NULL DEFAULT 0,
    load_latency_300    bigint      NOT NULL DEFAULT 0,
    load_latency_400    bigint      NOT NULL DEFAULT 0,
    load_latency_500    bigint      NOT NULL DEFAULT 0,
    load_latency_750    bigint      NOT NULL DEFAULT 0,
    load_latency_1000   bigint      NOT NULL DEFAULT 0,
    load_latency_1500   bigint      NOT NULL DEFAULT 0,
    load_latency_2000   bigint      NOT NULL DEFAULT 0,
    load_latency_3000   bigint      NOT NULL DEFAULT 0,
    load_latency_4000   bigint      NOT NULL DEFAULT 0,
    load_latency_5000   bigint      NOT NULL DEFAULT 0,
    load_latency_7500   bigint      NOT NULL DEFAULT 0,
    load_latency_10000  bigint      NOT NULL DEFAULT 0,
    load_latency_15000  bigint      NOT NULL DEFAULT 0,
    load_latency_20000  bigint      NOT NULL DEFAULT 0,
    load_latency_30000  bigint      NOT NULL DEFAULT 0,
    load_latency_60000  bigint      NOT NULL DEFAULT 0,
    load_latency_600000 bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (day, ad_unit, format_id, traffic_class)
);
CREATE TABLE funnel_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    mask          bigint      NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, traffic_class)
);
ALTER TABLE funnel_quarters ALTER COLUMN counts SET STORAGE EXTERNAL;
ALTER TABLE funnel_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN funnel_quarters.counts IS 'requests,ads_requested,filled_requests,failed_requests,unanswered_requests,loaded_ads,shown_ads,load_latency_10,load_latency_20,load_latency_30,load_latency_50,load_latency_75,load_latency_100,load_latency_150,load_latency_200,load_latency_300,load_latency_400,load_latency_500,load_latency_750,load_latency_1000,load_latency_1500,load_latency_2000,load_latency_3000,load_latency_4000,load_latency_5000,load_latency_7500,load_latency_10000,load_latency_15000,load_latency_20000,load_latency_30000,load_latency_60000,load_latency_600000';

CREATE TABLE failure_day (
    traffic_class       smallint    NOT NULL,
    day                 date        NOT NULL,
    ad_unit             text        NOT NULL,
    format_id           text        NOT NULL,
    error_code          text        NOT NULL,
    failed_requests     bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (day, ad_unit, format_id, error_code, traffic_class)
);
CREATE TABLE failure_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    error_code    text        NOT NULL,
    mask          bigint      NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, error_code, traffic_class)
);
ALTER TABLE failure_quarters ALTER COLUMN counts SET STORAGE EXTERNAL;
ALTER TABLE failure_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN failure_quarters.counts IS 'failed_requests';

CREATE TABLE waterfall_day (
    traffic_class       smallint    NOT NULL,
    day                 date        NOT NULL,
    ad_unit             text        NOT NULL,
    format_id           text        NOT NULL,
    adapter             text        NOT NULL,
    position            integer     NOT NULL,
    attempts            bigint      NOT NULL DEFAULT 0,
    loaded              bigint      NOT NULL DEFAULT 0,
    failed              bigint      NOT NULL DEFAULT 0,
    timeouts            bigint      NOT NULL DEFAULT 0,
    latency_10          bigint      NOT NULL DEFAULT 0,
    latency_20          bigint      NOT NULL DEFAULT 0,
    latency_30          bigint      NOT NULL DEFAULT 0,
    latency_50          bigint      NOT NULL DEFAULT 0,
    latency_75          bigint      NOT NULL DEFAULT 0,
    latency_100         bigint      NOT NULL DEFAULT 0,
    latency_150         bigint      NOT NULL DEFAULT 0,
    latency_200         bigint      NOT NULL DEFAULT 0,
    latency_300         bigint      NOT NULL DEFAULT 0,
    latency_400         bigint      NOT NULL DEFAULT 0,
    latency_500         bigint      NOT NULL DEFAULT 0,
    latency_750         bigint      NOT NULL DEFAULT 0,
    latency_1000        bigint      NOT NULL DEFAULT 0,
    latency_1500        bigint      NOT NULL DEFAULT 0,
    latency_2000        bigint      NOT NULL DEFAULT 0,
    latency_3000        bigint      NOT NULL DEFAULT 0,
    latency_4000        bigint      NOT NULL DEFAULT 0,
    latency_5000        bigint      NOT NULL DEFAULT 0,
    latency_7500        bigint      NOT NULL DEFAULT 0,
    latency_10000       bigint      NOT NULL DEFAULT 0,
    latency_15000       bigint      NOT NULL DEFAULT 0,
    latency_20000       bigint      NOT NULL DEFAULT 0,
    latency_30000       bigint      NOT NULL DEFAULT 0,
    latency_60000       bigint      NOT NULL DEFAULT 0,
    latency_600000      bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (day, ad_unit, format_id, adapter, position, traffic_class)
);
CREATE TABLE waterfall_quarters (
    traffic_class smallint    NOT NULL,
    quarters_from timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    adapter       text        NOT NULL,
    position      integer     NOT NULL,
    mask          bigint      NOT NULL,
    counts        bytea       NOT NULL,
    PRIMARY KEY (quarters_from, ad_unit, format_id, adapter, position, traffic_class)
);
ALTER TABLE waterfall_quarters ALTER COLUMN counts SET STORAGE EXTERNAL;
ALTER TABLE waterfall_quarters SET (toast_tuple_target = 8160);
COMMENT ON COLUMN waterfall_quarters.counts IS 'attempts,loaded,failed,timeouts,latency_10,latency_20,latency_30,latency_50,latency_75,latency_100,latency_150,latency_200,latency_300,latency_400,latency_500,latency_750,latency_1000,latency_1500,latency_2000,latency_3000,latency_4000,latency_5000,latency_7500,latency_10000,latency_15000,latency_20000,latency_30000,latency_60000,latency_600000';

REVOKE ALL ON funnel_day, funnel_quarters, failure_day, failure_quarters, waterfall_day, waterfall_quarters FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON funnel_day, funnel_quarters, failure_day, failure_quarters, waterfall_day, waterfall_quarters TO tracker_projector;
GRANT SELECT ON funnel_day, funnel_quarters, failure_day, failure_quarters, waterfall_day, waterfall_quarters TO tracker_report;

-- ad_events reads the funnel's part of a packed record (AdState: the flag 128, then a byte of
-- funnel flags and the fields they announce); load_reference marks a load's copy of an ad_loaded.
DROP VIEW ad_events;
DROP FUNCTION tracker_ad_events();
DROP FUNCTION tracker_unpack_ad_events(bytea);

CREATE FUNCTION tracker_unpack_ad_events(state bytea)
RETURNS TABLE (id uuid, type event_type, corrected_at timestamptz, ad_unit text, format_id text, asset_key text,
               source event_source, adapter text, eea boolean, reservation boolean, is_test boolean, label text,
               load_reference boolean, latency_ms integer, error_code text, result text, "position" integer,
               ads_requested integer)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    o integer := 0;
    n integer := length(state);
    flags integer;
    funnel integer;
    len integer;
    micros bigint;
BEGIN
    WHILE o < n LOOP
        type := (enum_range(NULL::event_type))[get_byte(state, o) + 1];
        source := (enum_range(NULL::event_source))[get_byte(state, o + 1) + 1];
        flags := get_byte(state, o + 2);
        o := o + 3;
        label := NULL;
        IF flags & 64 <> 0 THEN
            label := (ARRAY['declared_bot', 'datacenter', 'high_rate'])[get_byte(state, o) + 1];
            o := o + 1;
        END IF;
        id := encode(substring(state FROM o + 1 FOR 16), 'hex')::uuid;
        micros := ('x' || encode(substring(state FROM o + 17 FOR 8), 'hex'))::bit(64)::bigint;
        corrected_at := to_timestamp(div(micros, 1000000)) + mod(micros, 1000000) * interval '1 microsecond';
        o := o + 24;
        IF flags & 32 = 0 THEN
            len := get_byte(state, o) * 256 + get_byte(state, o + 1);
            ad_unit := convert_from(substring(state FROM o + 3 FOR len), 'UTF8');
            o := o + 2 + len;
            len := get_byte(state, o) * 256 + get_byte(state, o + 1);
            format_id := convert_from(substring(state FROM o + 3 FOR len), 'UTF8');
            o := o + 2 + len;
        END IF;
        asset_key := NULL;
        IF flags & 8 <> 0 THEN
            len := get_byte(state, o) * 256 + get_byte(state, o + 1);
            asset_key := convert_from(substring(state FROM o + 3 FOR len), 'UTF8');
            o := o + 2 + len;
        END IF;
        adapter := NULL;
        IF flags & 16 <> 0 THEN
            len := get_byte(state, o) * 256 + get_byte(state, o + 1);
            adapter := convert_from(substring(state FROM o + 3 FOR len), 'UTF8');
            o := o + 2 + len;
        END IF;
        eea := flags & 1 <> 0;
        reservation := flags & 2 <> 0;
        is_test := flags & 4 <> 0;
        load_reference := false;
        latency_ms := NULL;
        error_code := NULL;
        result := NULL;
        "position" := NULL;
        ads_requested := NULL;
        IF flags & 128 <> 0 THEN
            funnel := get_byte(state, o);
            o := o + 1;
            load_reference := funnel & 1 <> 0;
            IF funnel & 2 <> 0 THEN
                latency_ms := ('x' || encode(substring(state FROM o + 1 FOR 4), 'hex'))::bit(32)::integer;
                o := o + 4;
            END IF;
            IF funnel & 4 <> 0 THEN
                error_code := (ARRAY['no_fill', 'network_error', 'timeout', 'server_error', 'invalid_request', 'invalid_argument',
                                     'received_invalid_response', 'mediation_no_fill', 'mediation_adapter_error',
                                     'mediation_data_error', 'mediation_invalid_ad_size', 'internal_error', 'ad_already_used',
                                     'os_version_too_low', 'application_identifier_missing', 'other'])[get_byte(state, o) + 1];
                o := o + 1;
            END IF;
            IF funnel & 8 <> 0 THEN
                result := (ARRAY['loaded', 'failed', 'timeout'])[get_byte(state, o) + 1];
                o := o + 1;
            END IF;
            IF funnel & 16 <> 0 THEN
                "position" := get_byte(state, o);
                o := o + 1;
            END IF;
            IF funnel & 32 <> 0 THEN
                ads_requested := get_byte(state, o);
                o := o + 1;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE FUNCTION tracker_ad_events()
RETURNS TABLE (request_id text, id uuid, type event_type, corrected_at timestamptz, ad_unit text, format_id text,
               asset_key text, source event_source, adapter text, eea boolean, reservation boolean, is_test boolean,
               label text, load_reference boolean, latency_ms integer, error_code text, result text, "position" integer,
               ads_requested integer)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT s.request_id::text, e.* FROM ad_state s CROSS JOIN LATERAL tracker_unpack_ad_events(s.events) e;
END
$$;

CREATE VIEW ad_events AS SELECT * FROM tracker_ad_events();
GRANT SELECT ON ad_events TO tracker_projector, tracker_report;

-- Reconciliation: Ad Manager's total ad requests, when the imported file has that column
-- (has_requests; then every row has one), beside the funnel's requests.
ALTER TABLE reconciliation_imports ADD COLUMN has_requests boolean NOT NULL DEFAULT false;
ALTER TABLE reconciliation_rows ADD COLUMN requests bigint;
