-- Least-privilege roles (docs/OPERATIONS.md, "Database roles"). The role that runs
-- tracker migrate owns every table and function; the tracker's processes connect as one of:
--
--   tracker_ingest     tracker serve's DATABASE_URL: appends to the log (INSERT only), reads
--                      keys, records refused beacons, creates the log's daily partitions
--                      through tracker_ensure_event_partitions.
--   tracker_projector  PROJECTOR_DATABASE_URL and tracker project: reads the log, writes the
--                      projections, drops old partitions through tracker_retire_partition.
--   tracker_report     REPORT_DATABASE_URL, tracker report and tracker explain: reads the
--                      projections, and the log for an ad's audit trail; never keys.
--
-- None may update or delete the log or event_ids, alter a table, or change a trigger. The two
-- jobs that need the owner's rights (making and dropping partitions) are functions owned by
-- it and run as it (SECURITY DEFINER), each checking its arguments.
--
-- The roles can log in but have no password: password authentication fails until
-- tracker roles sets one (trust, peer and certificate authentication work as configured).
-- Roles belong to the whole cluster, so two tracker databases in one cluster share them;
-- the grants below are per database.

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['tracker_ingest', 'tracker_projector', 'tracker_report'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE', r);
            EXCEPTION
                -- Another database of this cluster is migrating at the same moment.
                WHEN duplicate_object OR unique_violation THEN NULL;
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'tracker migrate needs to create the role %, and % may not create roles', r, current_user
                        USING HINT = 'Run tracker migrate once as a superuser, grant CREATEROLE to the owner, '
                                     'or create tracker_ingest, tracker_projector and tracker_report (LOGIN) beforehand.';
            END;
        END IF;
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO tracker_ingest, tracker_projector, tracker_report', current_schema());
    -- The owner's functions below resolve names through the schema: a role that could create a
    -- function there (public before PostgreSQL 15, or a cluster upgraded from one) could shadow
    -- a built-in one with a closer match and run code as the owner. PostgreSQL 15 grants no
    -- CREATE on public; where it still is granted, take it back or stop.
    FOREACH r IN ARRAY ARRAY['tracker_ingest', 'tracker_projector', 'tracker_report'] LOOP
        IF has_schema_privilege(r, current_schema(), 'CREATE') THEN
            BEGIN
                EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', current_schema());
                EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM %I', current_schema(), r);
            EXCEPTION WHEN insufficient_privilege THEN NULL;
            END;
            IF has_schema_privilege(r, current_schema(), 'CREATE') THEN
                RAISE EXCEPTION '% may create objects in schema %, so it could run code as the owner of the log', r, current_schema()
                    USING HINT = format('As the schema''s owner: REVOKE CREATE ON SCHEMA %I FROM PUBLIC; then run tracker migrate again.', current_schema());
            END IF;
        END IF;
    END LOOP;
END
$$;

-- Nothing is granted to PUBLIC on tables; functions are executable by PUBLIC by default,
-- which the two owner-run ones must not be.
REVOKE ALL ON events, event_ids, api_keys, format_day, asset_day, source_day, projection_state,
    retention_runs, ad_state, beacon_rejections, schema_migrations FROM PUBLIC;

-- Ingest: append to the log. RETURNING id needs SELECT on that column only. Not tx and seq:
-- they are the log's order, which only their defaults may set (a forged low tx would never be
-- projected, a high one would hold the projector's lag and retention forever).
GRANT INSERT (id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea,
              reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name)
    ON events TO tracker_ingest;
GRANT SELECT (id) ON events TO tracker_ingest;
GRANT INSERT ON event_ids TO tracker_ingest;
GRANT SELECT (id) ON event_ids TO tracker_ingest;
GRANT USAGE ON SEQUENCE event_seq TO tracker_ingest;
GRANT SELECT (name, scope, key_hash, revoked_at) ON api_keys TO tracker_ingest;
GRANT SELECT, INSERT, UPDATE ON beacon_rejections TO tracker_ingest;
GRANT SELECT ON schema_migrations TO tracker_ingest;

-- Projector: read the log, write the projections.
GRANT SELECT ON events, retention_runs, schema_migrations TO tracker_projector;
GRANT SELECT ON SEQUENCE event_seq TO tracker_projector;
GRANT SELECT, INSERT, UPDATE, DELETE ON format_day, asset_day, source_day, ad_state, projection_state TO tracker_projector;
GRANT SELECT ON ad_events TO tracker_projector;

-- Reports: read the projections; the log for the audit trail of an ad (GET /v1/ads/...) and
-- for the read-your-writes wait (how far the log goes). No keys, no refused beacons.
GRANT SELECT ON format_day, asset_day, source_day, ad_state, ad_events, projection_state,
    retention_runs, events, schema_migrations TO tracker_report;
GRANT SELECT ON SEQUENCE event_seq TO tracker_report;

-- Partitions are made by the owner, for the days around today only unless the caller is the
-- owner (a non-owner asking for ten thousand days would fill the catalog).
CREATE OR REPLACE FUNCTION tracker_ensure_event_partitions(first_day date, last_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d date;
    part text;
    created integer := 0;
    today date := (now() AT TIME ZONE 'UTC')::date;
    -- Names are qualified: pg_catalog comes first in this function's search_path.
    sch text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.oid = 'events'::regclass);
BEGIN
    IF first_day IS NULL OR last_day IS NULL OR last_day < first_day THEN
        RAISE EXCEPTION 'tracker_ensure_event_partitions: first_day and last_day must be days with first_day <= last_day'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (first_day < today - 1 OR last_day > today + 31)
       AND NOT pg_has_role(session_user, (SELECT relowner FROM pg_class WHERE oid = 'events'::regclass), 'MEMBER') THEN
        RAISE EXCEPTION 'tracker_ensure_event_partitions: % may create partitions from % to % only', session_user, today - 1, today + 31
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('tracker.event_partitions'));
    FOR d IN SELECT generate_series(first_day, last_day, interval '1 day')::date LOOP
        part := 'events_' || to_char(d, 'YYYYMMDD');
        IF to_regclass(format('%I.%I', sch, part)) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I.%I PARTITION OF %I.events FOR VALUES FROM (%L) TO (%L)',
                sch, part, sch,
                (d::timestamp AT TIME ZONE 'UTC'),
                ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            EXECUTE format(
                'CREATE TRIGGER %I BEFORE TRUNCATE ON %I.%I FOR EACH STATEMENT EXECUTE FUNCTION %I.tracker_reject_log_change()',
                part || '_no_truncate', sch, part, sch);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

-- Retention: one old partition checked and, when every event in it is projected, dropped with
-- its ids (docs/SCALING.md, "Retention"). The checks are here, not in the caller, because the
-- caller is not trusted to make them: a partition within the kept days, or one holding events
-- the projector has not read, is never dropped.
CREATE FUNCTION tracker_retire_partition(part_name text, keep_days integer, dry_run boolean)
RETURNS TABLE (logged bigint, unprojected bigint, forgotten bigint, dropped boolean)
LANGUAGE plpgsql AS $$
DECLARE
    part_day date;
    checkpoint xid8;
    -- Names are qualified: pg_catalog comes first in this function's search_path.
    sch text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.oid = 'events'::regclass);
BEGIN
    IF part_name IS NULL OR part_name !~ '^events_[0-9]{8}$' OR NOT EXISTS (
        SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'events'::regclass AND c.relname = part_name) THEN
        RAISE EXCEPTION '''%'' is not a daily partition of the log (events_YYYYMMDD); retention drops nothing else', part_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep_days IS NULL OR keep_days < 1 THEN
        RAISE EXCEPTION 'keep-days must be at least 1 (today is always kept), got %', keep_days
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    part_day := to_date(substr(part_name, 8), 'YYYYMMDD');
    IF part_day >= (now() AT TIME ZONE 'UTC')::date - keep_days THEN
        RAISE EXCEPTION '% is within the % kept days', part_name, keep_days
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('tracker.event_partitions'));
    IF NOT dry_run THEN
        -- No writer may add to the partition between the count and the drop. SHARE, not
        -- ACCESS EXCLUSIVE: readers of the log lock the parent and then every partition, so
        -- holding the partition exclusively while waiting for the parent would deadlock.
        EXECUTE format('LOCK TABLE %I.%I IN SHARE MODE', sch, part_name);
    END IF;
    SELECT s.checkpoint_tx INTO checkpoint FROM projection_state s;
    EXECUTE format(
        'SELECT count(*), count(*) FILTER (WHERE (p.tx, p.seq) > (s.checkpoint_tx, s.checkpoint_seq))
         FROM %I.%I p, %I.projection_state s', sch, part_name, sch)
        INTO logged, unprojected;
    forgotten := 0;
    dropped := false;
    IF unprojected > 0 OR dry_run THEN
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM set_config('tracker.retention', part_name, true);
    EXECUTE format('DELETE FROM %I.event_ids WHERE id IN (SELECT id FROM %I.%I)', sch, sch, part_name);
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    PERFORM set_config('tracker.retention', '', true);
    -- Dropping a partition locks the parent, which queues every writer behind it: give up (the
    -- caller rolls back and retries later) rather than stall ingestion behind a long reader.
    PERFORM set_config('lock_timeout', '2s', true);
    LOCK TABLE ONLY events IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('DROP TABLE %I.%I', sch, part_name);
    -- A day can be dropped twice: its partition can be made again (the writer makes yesterday's).
    INSERT INTO retention_runs AS r (day, partition_name, events, ids_forgotten, keep_days, checkpoint_tx)
    VALUES (part_day, part_name, logged, forgotten, keep_days, checkpoint)
    ON CONFLICT (day) DO UPDATE SET events = r.events + EXCLUDED.events,
                                    ids_forgotten = r.ids_forgotten + EXCLUDED.ids_forgotten,
                                    keep_days = EXCLUDED.keep_days, checkpoint_tx = EXCLUDED.checkpoint_tx,
                                    dropped_at = now();
    dropped := true;
    RETURN NEXT;
END
$$;

-- event_ids rows leave only with their partition, inside tracker_retire_partition: the
-- session setting alone no longer opens the door, the deleting role must be the owner
-- (which, inside that function, it is).
CREATE OR REPLACE FUNCTION tracker_reject_event_id_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND coalesce(current_setting('tracker.retention', true), '') ~ '^events_[0-9]{8}$'
       AND pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER') THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the event log is append-only: % on % is not allowed', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Retention drops whole partitions with tracker retention.';
END
$$;

-- Run as the owner, with a search path no caller can put a table or function in front of.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION tracker_ensure_event_partitions(date, date) SECURITY DEFINER SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION tracker_retire_partition(text, integer, boolean) SECURITY DEFINER SET search_path = pg_catalog, %I, pg_temp',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION tracker_ensure_event_partitions(date, date), tracker_retire_partition(text, integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tracker_ensure_event_partitions(date, date) TO tracker_ingest;
GRANT EXECUTE ON FUNCTION tracker_retire_partition(text, integer, boolean) TO tracker_projector;
