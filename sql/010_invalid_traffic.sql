-- General invalid traffic (GIVT): who sent each event, the versioned rule sets that label it,
-- and the projections of labelled traffic (docs/PROTOCOL.md, "Invalid traffic";
-- docs/REPORTS.md, "Invalid traffic").

-- User agents repeat endlessly, so the log keeps each one once, here, and an event keeps its
-- number. "C": byte comparisons for a key nobody sorts for humans.
CREATE TABLE user_agents (
    id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_agent text COLLATE "C" NOT NULL UNIQUE
);

-- The client of each event: its user agent and IP address (the request's, or the event's own
-- `userAgent`/`ip` from a server key). NULL for events stored before this migration, which
-- match no rule. Adding nullable columns to the partitioned log rewrites nothing.
ALTER TABLE events ADD COLUMN user_agent_id integer, ADD COLUMN client_ip inet;

-- A key that may set an event's userAgent and ip (a server sending on devices' behalf).
ALTER TABLE api_keys ADD COLUMN server boolean NOT NULL DEFAULT false;

-- Rule sets, numbered 0, 1, 2, …; the newest is the one `tracker ivt show` prints and the one
-- a rebuild applies. `document` is the whole rule set, lists inlined (IVTRuleSet.storedDocument).
-- Version 0 is the empty rule set: it labels nothing.
CREATE TABLE ivt_rule_sets (
    version      integer     PRIMARY KEY CHECK (version >= 0),
    name         text,
    document     text        NOT NULL,
    activated_at timestamptz NOT NULL DEFAULT now(),
    activated_by text        NOT NULL DEFAULT current_user
);
INSERT INTO ivt_rule_sets (version, name, document, activated_by)
VALUES (0, 'the empty rule set', '{}', 'tracker migrate');

-- The rule set the projections were computed with (like the attribution window).
ALTER TABLE projection_state ADD COLUMN ivt_rules integer NOT NULL DEFAULT 0;

-- Labelled impression and click events, under each event's own day, ad unit and format.
ALTER TABLE format_day
    ADD COLUMN givt_impressions bigint NOT NULL DEFAULT 0,
    ADD COLUMN givt_clicks      bigint NOT NULL DEFAULT 0;
ALTER TABLE format_quarter_hour
    ADD COLUMN givt_impressions bigint NOT NULL DEFAULT 0,
    ADD COLUMN givt_clicks      bigint NOT NULL DEFAULT 0;

-- The ivt report: labelled events by label.
CREATE TABLE ivt_day (
    traffic_class smallint NOT NULL,
    day           date     NOT NULL,
    ad_unit       text     NOT NULL,
    format_id     text     NOT NULL,
    label         text     NOT NULL,
    impressions   bigint   NOT NULL DEFAULT 0,
    clicks        bigint   NOT NULL DEFAULT 0,
    events        bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (day, ad_unit, format_id, label, traffic_class)
);
CREATE TABLE ivt_quarter_hour (
    traffic_class smallint    NOT NULL,
    quarter_hour  timestamptz NOT NULL,
    ad_unit       text        NOT NULL,
    format_id     text        NOT NULL,
    label         text        NOT NULL,
    impressions   bigint      NOT NULL DEFAULT 0,
    clicks        bigint      NOT NULL DEFAULT 0,
    events        bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (quarter_hour, ad_unit, format_id, label, traffic_class)
);

-- The high_rate rule's groups: stored events per client (IP and user agent) and UTC minute of
-- receipt. While a group holds no more events than the rule allows, `members` lists them
-- (u16 length + request id, 16-byte id, each), so that the event that takes it over the limit
-- can relabel them; past the limit every further event is labelled as it comes and `members`
-- is NULL. The projector forgets groups an hour behind the newest receipt it has projected:
-- an event is committed within seconds of its receipt, so such a group takes no more events.
CREATE TABLE client_minutes (
    minute        timestamptz NOT NULL,
    user_agent_id integer     NOT NULL,
    client_ip     inet        NOT NULL,
    events        integer     NOT NULL,
    members       bytea,
    PRIMARY KEY (minute, user_agent_id, client_ip)
);

-- ad_state records may now carry a label: flags & 64, then one byte, the label's index
-- (IVTLabel: declared_bot, datacenter, high_rate). The ad_events view shows it.
DROP VIEW ad_events;
DROP FUNCTION tracker_ad_events();
DROP FUNCTION tracker_unpack_ad_events(bytea);

CREATE FUNCTION tracker_unpack_ad_events(state bytea)
RETURNS TABLE (id uuid, type event_type, corrected_at timestamptz, ad_unit text, format_id text, asset_key text,
               source event_source, adapter text, eea boolean, reservation boolean, is_test boolean, label text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    o integer := 0;
    n integer := length(state);
    flags integer;
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
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE FUNCTION tracker_ad_events()
RETURNS TABLE (request_id text, id uuid, type event_type, corrected_at timestamptz, ad_unit text, format_id text,
               asset_key text, source event_source, adapter text, eea boolean, reservation boolean, is_test boolean,
               label text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT s.request_id::text, e.* FROM ad_state s CROSS JOIN LATERAL tracker_unpack_ad_events(s.events) e;
END
$$;

CREATE VIEW ad_events AS SELECT * FROM tracker_ad_events();

-- Projections made before this migration hold no video pause, mute or unmute events, which
-- the ivt report's `events` counts when labelled; they are stored with no client, so no rule
-- labels them, and the reports stay exact. A rebuild adds them to ad_state.

REVOKE ALL ON user_agents, ivt_rule_sets, ivt_day, ivt_quarter_hour, client_minutes FROM PUBLIC;
GRANT INSERT (user_agent_id, client_ip) ON events TO tracker_ingest;
GRANT SELECT, INSERT ON user_agents TO tracker_ingest;
GRANT SELECT (server) ON api_keys TO tracker_ingest;
GRANT SELECT ON user_agents, ivt_rule_sets TO tracker_projector;
GRANT SELECT, INSERT, UPDATE, DELETE ON ivt_day, ivt_quarter_hour, client_minutes TO tracker_projector;
GRANT SELECT ON ad_events TO tracker_projector, tracker_report;
GRANT SELECT ON ivt_day, ivt_quarter_hour, ivt_rule_sets TO tracker_report;
