-- What PostgreSQL spends on each statement that can write a group of events (docs/PERFORMANCE.md,
-- "Batches: goal met with the plain insert"). The log now writes a group with binary COPY,
-- which a DO block cannot send; bench-capacity.sh measures that ("The append as binary COPY").
-- Run on a migrated, otherwise idle database:
--   psql "$DATABASE_URL" -f scripts/bench/append-variants.sql
-- Each variant writes 300 groups of 500 new events, one commit per group, inside the server
-- (no client, no network), and prints milliseconds per 1 000 events; 'arrays only' is the
-- cost of building the arrays, to subtract from the others. Every variant runs twice.
-- It writes 600 000 events into the log and event_ids: use a scratch database.
DO $$
DECLARE
  n int := 500; groups int := 300; base bigint; t0 timestamptz; variant text;
  ids uuid[]; types text[]; rids text[]; units text[]; fmts text[]; nulls text[]; srcs text[];
  bools bool[]; jsons jsonb[]; ts timestamptz[]; keys text[]; stored bigint;
BEGIN
  FOREACH variant IN ARRAY ARRAY['arrays only', 'on conflict (tracker_append_checking_conflicts)', 'plain insert (before COPY)',
                                 'log only', 'event_ids only',
                                 'arrays only', 'on conflict (tracker_append_checking_conflicts)', 'plain insert (before COPY)',
                                 'log only', 'event_ids only'] LOOP
    t0 := clock_timestamp();
    FOR g IN 1..groups LOOP
      base := nextval('event_seq') * 100000;  -- time-ordered ids, as UUIDv7 clients send
      SELECT array_agg(('00000000-0000-7000-8000-' || lpad(to_hex(base + i), 12, '0'))::uuid),
             array_agg('impression'::text), array_agg('b1-1-' || (base + i)), array_agg('/1234/home/native'::text),
             array_agg('10063170'::text), array_agg(NULL::text), array_agg('app'::text), array_agg(false),
             array_agg(NULL::jsonb), array_agg(now()), array_agg('bench'::text)
        INTO ids, types, rids, units, fmts, nulls, srcs, bools, jsons, ts, keys
        FROM generate_series(1, n) i;
      -- The tracker's two statements (EventLogSQL in Sources/Tracker/Log/AppendBatch.swift), with
      -- the arrays inlined; tracker_append_checking_conflicts's stored ids are counted here instead of sent.
      IF variant LIKE 'on conflict%' THEN
        WITH fresh AS (INSERT INTO event_ids (id) SELECT id FROM unnest(ids) AS u(id) ORDER BY id
                       ON CONFLICT DO NOTHING RETURNING id),
             logged AS (INSERT INTO events (id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea,
                            reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name)
        SELECT i.id, i.type::event_type, i.request_id, i.ad_unit, i.format_id, i.asset_key, i.click_action::click_action,
               i.source::event_source, i.adapter, i.eea, i.reservation, i.test, i.attributes, i.occurred_at, i.sent_at,
               i.received_at, i.corrected_at, i.key_name
        FROM unnest(ids, types, rids, units, fmts, nulls, nulls, srcs, nulls, bools, bools, bools, jsons, ts, ts, ts, ts, keys)
             WITH ORDINALITY AS i(id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea,
                                  reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name, ord)
        WHERE i.id IN (SELECT id FROM fresh)
        ORDER BY i.ord
        RETURNING id)
        SELECT count(*) INTO stored FROM logged;
      ELSIF variant LIKE 'plain%' OR variant = 'log only' THEN
        -- 'log only' is the same statement with no ids for event_ids (it still unnests them).
        WITH new_ids AS (INSERT INTO event_ids (id) SELECT id FROM unnest(ids) AS u(id)
                         WHERE variant LIKE 'plain%' ORDER BY id)
        INSERT INTO events (id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea,
                            reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name)
        SELECT i.id, i.type::event_type, i.request_id, i.ad_unit, i.format_id, i.asset_key, i.click_action::click_action,
               i.source::event_source, i.adapter, i.eea, i.reservation, i.test, i.attributes, i.occurred_at, i.sent_at,
               i.received_at, i.corrected_at, i.key_name
        FROM unnest(ids, types, rids, units, fmts, nulls, nulls, srcs, nulls, bools, bools, bools, jsons, ts, ts, ts, ts, keys)
             WITH ORDINALITY AS i(id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea,
                                  reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name, ord)
        ORDER BY i.ord;
      ELSIF variant = 'event_ids only' THEN
        INSERT INTO event_ids (id) SELECT id FROM unnest(ids) AS u(id) ORDER BY id;
      END IF;
      COMMIT;
    END LOOP;
    RAISE NOTICE '%: % ms per 1 000 events', rpad(variant, 30),
                 round(extract(epoch FROM clock_timestamp() - t0) * 1000 / (n * groups / 1000.0), 2);
  END LOOP;
END $$;
