-- The projector's per-ad memory becomes one row per ad: ad_state (request_id, events), where
-- events packs every projected event of the ad (the layout is documented on AdState in
-- Sources/Tracker/Projection/AdState.swift). It replaces ad_events (one row per event, which
-- rewrote most of the log a second time): a projector step reads and rewrites one row per
-- touched ad, updating it by its ctid without touching the index. docs/PROJECTOR-DESIGN.md
-- has the measurements. ad_events stays readable as a view for people and tests.

CREATE TABLE ad_state (
    request_id text COLLATE "C" PRIMARY KEY,  -- "C": byte comparisons, the cheapest for a key nobody sorts for humans
    events     bytea NOT NULL
) WITH (fillfactor = 90);                     -- room for an ad's next version on its own page (HOT update)

-- One event in the packed layout (without the "same ad unit and format as the previous
-- record" shortcut, which only the tracker's encoder uses).
CREATE FUNCTION tracker_pack_ad_event(type event_type, source event_source, eea boolean, reservation boolean,
                                      is_test boolean, id uuid, corrected_at timestamptz, ad_unit text,
                                      format_id text, asset_key text, adapter text) RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT set_byte(set_byte(set_byte('\x000000'::bytea,
               0, array_position(enum_range(NULL::event_type), type) - 1),
               1, array_position(enum_range(NULL::event_source), source) - 1),
               2, (CASE WHEN eea THEN 1 ELSE 0 END) | (CASE WHEN reservation THEN 2 ELSE 0 END)
                | (CASE WHEN is_test THEN 4 ELSE 0 END) | (CASE WHEN asset_key IS NOT NULL THEN 8 ELSE 0 END)
                | (CASE WHEN adapter IS NOT NULL THEN 16 ELSE 0 END))
        || uuid_send(id)
        || int8send((extract(epoch FROM corrected_at) * 1000000)::bigint)
        || int2send(octet_length(convert_to(ad_unit, 'UTF8'))::int2) || convert_to(ad_unit, 'UTF8')
        || int2send(octet_length(convert_to(format_id, 'UTF8'))::int2) || convert_to(format_id, 'UTF8')
        || COALESCE(int2send(octet_length(convert_to(asset_key, 'UTF8'))::int2) || convert_to(asset_key, 'UTF8'), '\x'::bytea)
        || COALESCE(int2send(octet_length(convert_to(adapter, 'UTF8'))::int2) || convert_to(adapter, 'UTF8'), '\x'::bytea)
$$;

-- The events of one packed value, as rows (for the ad_events view; the tracker decodes in Swift).
CREATE FUNCTION tracker_unpack_ad_events(state bytea)
RETURNS TABLE (id uuid, type event_type, corrected_at timestamptz, ad_unit text, format_id text, asset_key text,
               source event_source, adapter text, eea boolean, reservation boolean, is_test boolean)
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
        id := encode(substring(state FROM o + 4 FOR 16), 'hex')::uuid;
        micros := ('x' || encode(substring(state FROM o + 20 FOR 8), 'hex'))::bit(64)::bigint;
        corrected_at := to_timestamp(div(micros, 1000000)) + mod(micros, 1000000) * interval '1 microsecond';
        o := o + 27;
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

-- Existing projections keep their memory: each ad's events, in SPEC order, packed.
INSERT INTO ad_state (request_id, events)
SELECT request_id,
       string_agg(tracker_pack_ad_event(type, source, eea, reservation, is_test, id, corrected_at, ad_unit,
                                        format_id, asset_key, adapter), '\x'::bytea ORDER BY corrected_at, id)
FROM ad_events
GROUP BY request_id;

DROP TABLE ad_events;

-- Every ad's events as rows, shaped like the old table. The function names ad_state only in
-- its body, resolved when it runs (search_path), so the view does not pin the table: a
-- rebuild can swap ad_state underneath it.
CREATE FUNCTION tracker_ad_events()
RETURNS TABLE (request_id text, id uuid, type event_type, corrected_at timestamptz, ad_unit text, format_id text,
               asset_key text, source event_source, adapter text, eea boolean, reservation boolean, is_test boolean)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT s.request_id::text, e.* FROM ad_state s CROSS JOIN LATERAL tracker_unpack_ad_events(s.events) e;
END
$$;

CREATE VIEW ad_events AS SELECT * FROM tracker_ad_events();
