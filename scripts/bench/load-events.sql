-- Loads :n synthetic events for the report benchmark straight into the log, in one
-- transaction per million (so the log has many transactions, as in production).
-- Mix of the ads' events: 80% impressions (about 3 per ad: many duplicates), 10% clicks on 4
-- asset keys, 5% ad_loaded, 5% AdChoices; 3 ad units, 2 formats, 30 days, 1% test ads, 10% sdk
-- source, a fifth of the ads mediated. A share :funnel of all events (default a third; 0 gives
-- the ads' mix alone) are the ad funnel's: each ad's load ('l' and the ad's number; its
-- ad_loaded events name it) has ad_request events (40%), a fifth of the loads ad_failed
-- events (15%, so some failed loads are filled later), and the mediated ads' loads
-- mediation_result events of three networks at positions 1 to 3 (45%), with latencies.
-- Run with psql -v n=… -v chunk=… (chunk number, 0-based); -v first_ad=… (default 0) shifts
-- the ads' numbers, so that several loads of n events (bench-scale) have disjoint ads of the
-- same shape.
\if :{?first_ad}
\else
\set first_ad 0
\endif
\if :{?funnel}
\else
\set funnel 0.333
\endif
INSERT INTO events (id, type, request_id, ad_unit, format_id, asset_key, source, adapter, eea, reservation, test,
                    occurred_at, received_at, corrected_at, key_name, load_id, ads_requested, latency_ms, error_code,
                    result, position)
SELECT gen_random_uuid(), t.type,
       CASE WHEN t.funnel THEN 'l' ELSE 'r' END || (:first_ad::bigint + s.a),
       (ARRAY['/1234/home/native', '/1234/feed/native', '/5678/article/native'])[1 + s.a % 3],
       CASE WHEN t.funnel THEN '' ELSE (ARRAY['10063170', 'native'])[1 + (s.a / 3) % 2] END,
       CASE WHEN t.type = 'click' THEN (ARRAY['MainImage', 'Headline', 'CallToAction', 'Caption'])[1 + s.g % 4] END,
       (CASE WHEN t.type = 'mediation_result' THEN 'mediation' WHEN t.funnel THEN 'app'
             WHEN s.g % 10 = 0 THEN 'sdk' WHEN s.a % 5 = 0 THEN 'mediation' ELSE 'app' END)::event_source,
       CASE WHEN t.type = 'mediation_result' THEN (ARRAY['AppLovin', 'Meta', 'Unity'])[1 + s.g % 3]
            WHEN NOT t.funnel AND s.a % 5 = 0 THEN 'AppLovin' END,
       NOT t.funnel AND s.a % 4 = 0, NOT t.funnel AND s.a % 3 = 0, s.a % 100 = 0,
       t.ts, t.ts + interval '2 s', t.ts, 'bench',
       CASE WHEN t.funnel OR t.type = 'ad_loaded' THEN 'l' || (:first_ad::bigint + s.a) END,
       CASE WHEN t.type = 'ad_request' THEN 1 + s.a % 3 END,
       CASE WHEN t.type IN ('ad_loaded', 'ad_failed', 'mediation_result') THEN (20 + random() * random() * 4000)::int END,
       CASE WHEN t.type = 'ad_failed' THEN (ARRAY['no_fill', 'network_error', 'timeout'])[1 + s.g % 3]
            WHEN t.type = 'mediation_result' AND s.g % 2 = 0 THEN 'mediation_no_fill' END,
       CASE WHEN t.type = 'mediation_result' THEN (ARRAY['failed', 'loaded', 'failed', 'timeout'])[1 + s.g % 4] END,
       CASE WHEN t.type = 'mediation_result' THEN 1 + s.g % 3 END
FROM (SELECT g, (random() * (:n / 4))::bigint AS a, random() AS r, random() AS f
      FROM generate_series(:chunk::bigint * 1000000 + 1, least((:chunk::bigint + 1) * 1000000, :n)) g) s
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.f < :funnel::float8 THEN
                    (CASE WHEN s.a % 5 = 0 AND s.r < 0.45 THEN 'mediation_result'
                          WHEN s.a % 5 = 1 AND s.r < 0.60 THEN 'ad_failed'
                          ELSE 'ad_request' END)::event_type
                ELSE (CASE WHEN s.r < 0.80 THEN 'impression' WHEN s.r < 0.90 THEN 'click' WHEN s.r < 0.95 THEN 'ad_loaded'
                           WHEN s.r < 0.975 THEN 'adchoices_impression' ELSE 'adchoices_click' END)::event_type
           END AS type,
           s.f < :funnel::float8 AS funnel,
           date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '30 days'
               + (s.a::float8 / (:n / 4)) * interval '30 days' + random() * interval '120 s' AS ts
) t;
