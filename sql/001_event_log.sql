-- The append-only event log (SPEC section 4) and the index that makes ingestion idempotent.
--
-- Global order: every row carries the id of the transaction that wrote it (tx, an xid8)
-- and a sequence number (seq). Readers follow (tx, seq) and read only rows whose tx is
-- below the xmin of their snapshot: every transaction below xmin has finished, so no row
-- can later appear behind a reader's checkpoint. No writer lock is needed. See
-- docs/ARCHITECTURE.md, "The log".

CREATE TYPE event_type AS ENUM (
    'ad_loaded', 'impression', 'click', 'adchoices_impression', 'adchoices_click',
    'video_play', 'video_pause', 'video_end', 'video_mute', 'video_unmute'
);
CREATE TYPE event_source AS ENUM ('app', 'sdk', 'mediation');
CREATE TYPE click_action AS ENUM ('custom_handler', 'deep_link', 'destination_url');

CREATE SEQUENCE event_seq AS bigint CACHE 64;

CREATE TABLE events (
    tx           xid8         NOT NULL DEFAULT pg_current_xact_id(),
    seq          bigint       NOT NULL DEFAULT nextval('event_seq'),
    id           uuid         NOT NULL,
    type         event_type   NOT NULL,
    request_id   text         NOT NULL,
    ad_unit      text         NOT NULL,
    format_id    text         NOT NULL,
    asset_key    text,
    click_action click_action,
    source       event_source NOT NULL,
    adapter      text,
    eea          boolean      NOT NULL,
    reservation  boolean      NOT NULL,
    test         boolean      NOT NULL,
    attributes   jsonb,
    occurred_at  timestamptz  NOT NULL,
    sent_at      timestamptz,
    received_at  timestamptz  NOT NULL,
    corrected_at timestamptz  NOT NULL,
    key_name     text         NOT NULL
) PARTITION BY RANGE (received_at);

-- The readers' order. One index only: every further index costs ingest throughput.
CREATE INDEX events_log_order ON events (tx, seq);

-- Idempotency: an event id is stored at most once. Kept apart from the log because a
-- unique index on a partitioned table must include the partition key, and a retried
-- event arrives with a new received_at.
CREATE TABLE event_ids (
    id uuid PRIMARY KEY
);

-- Nothing updates or deletes a logged event; retention drops whole partitions only.
CREATE FUNCTION tracker_reject_log_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the event log is append-only: % on % is not allowed', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Retention drops whole partitions with tracker retention.';
END
$$;

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION tracker_reject_log_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION tracker_reject_log_change();
CREATE TRIGGER event_ids_append_only BEFORE UPDATE OR DELETE ON event_ids
    FOR EACH ROW EXECUTE FUNCTION tracker_reject_log_change();
CREATE TRIGGER event_ids_no_truncate BEFORE TRUNCATE ON event_ids
    FOR EACH STATEMENT EXECUTE FUNCTION tracker_reject_log_change();

-- Daily partitions of the log by received_at (UTC days), created ahead of time by the
-- server and on demand by the writer. Each gets its own TRUNCATE guard, because
-- statement triggers are not inherited by partitions.
CREATE FUNCTION tracker_ensure_event_partitions(first_day date, last_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d date;
    part text;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('tracker.event_partitions'));
    FOR d IN SELECT generate_series(first_day, last_day, interval '1 day')::date LOOP
        part := 'events_' || to_char(d, 'YYYYMMDD');
        IF to_regclass(part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                part,
                (d::timestamp AT TIME ZONE 'UTC'),
                ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            EXECUTE format(
                'CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION tracker_reject_log_change()',
                part || '_no_truncate', part);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

SELECT tracker_ensure_event_partitions(
    (now() AT TIME ZONE 'UTC')::date - 1,
    (now() AT TIME ZONE 'UTC')::date + 7);
