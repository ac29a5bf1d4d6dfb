-- pgbench script: one ingest batch of 100 fresh events, written the way the tracker's log
-- writer does (ids claimed in event_ids, then the log rows), one transaction per batch.
\set ad random(1, 1000000000)
WITH input AS (
    SELECT gen_random_uuid() AS id, g, random() AS r FROM generate_series(1, 100) g
), fresh AS (
    INSERT INTO event_ids (id) SELECT id FROM input ON CONFLICT DO NOTHING RETURNING id
)
INSERT INTO events (id, type, request_id, ad_unit, format_id, asset_key, source, eea, reservation, test,
                    occurred_at, received_at, corrected_at, key_name)
SELECT i.id,
       (CASE WHEN i.r < 0.80 THEN 'impression' WHEN i.r < 0.90 THEN 'click' WHEN i.r < 0.95 THEN 'ad_loaded'
             ELSE 'adchoices_impression' END)::event_type,
       'live-' || (:ad + i.g / 4), '/1234/home/native', '10063170',
       CASE WHEN i.r >= 0.80 AND i.r < 0.90 THEN 'MainImage' END, 'app', false, false, false,
       now(), now(), now(), 'bench'
FROM input i JOIN fresh f ON f.id = i.id;
