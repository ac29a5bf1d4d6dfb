-- Loads :n synthetic events for the report benchmark straight into the log, in one
-- transaction per million (so the log has many transactions, as in production).
-- Mix: 80% impressions (about 3 per ad: many duplicates), 10% clicks on 4 asset keys,
-- 5% ad_loaded, 5% AdChoices; 3 ad units, 2 formats, 30 days, 1% test ads, 10% sdk source,
-- a fifth of the ads mediated. Run with psql -v n=… -v chunk=… (chunk number, 0-based);
-- -v first_ad=… (default 0) shifts the ads' numbers, so that several loads of n events
-- (bench-scale) have disjoint ads of the same shape.
\if :{?first_ad}
\else
\set first_ad 0
\endif
INSERT INTO events (id, type, request_id, ad_unit, format_id, asset_key, source, adapter, eea, reservation, test,
                    occurred_at, received_at, corrected_at, key_name)
SELECT gen_random_uuid(), t.type, 'r' || (:first_ad::bigint + s.a),
       (ARRAY['/1234/home/native', '/1234/feed/native', '/5678/article/native'])[1 + s.a % 3],
       (ARRAY['10063170', 'native'])[1 + (s.a / 3) % 2],
       CASE WHEN t.type = 'click' THEN (ARRAY['MainImage', 'Headline', 'CallToAction', 'Caption'])[1 + s.g % 4] END,
       (CASE WHEN s.g % 10 = 0 THEN 'sdk' WHEN s.a % 5 = 0 THEN 'mediation' ELSE 'app' END)::event_source,
       CASE WHEN s.a % 5 = 0 THEN 'AppLovin' END,
       s.a % 4 = 0, s.a % 3 = 0, s.a % 100 = 0,
       t.ts, t.ts + interval '2 s', t.ts, 'bench'
FROM (SELECT g, (random() * (:n / 4))::bigint AS a, random() AS r
      FROM generate_series(:chunk::bigint * 1000000 + 1, least((:chunk::bigint + 1) * 1000000, :n)) g) s
CROSS JOIN LATERAL (
    SELECT (CASE WHEN s.r < 0.80 THEN 'impression' WHEN s.r < 0.90 THEN 'click' WHEN s.r < 0.95 THEN 'ad_loaded'
                 WHEN s.r < 0.975 THEN 'adchoices_impression' ELSE 'adchoices_click' END)::event_type AS type,
           date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '30 days'
               + (s.a::float8 / (:n / 4)) * interval '30 days' + random() * interval '120 s' AS ts
) t;
