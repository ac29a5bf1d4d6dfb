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
-- The chunk is made in a temporary table and copied into the columns the log has, so that a
-- tracker older than the funnel's columns takes the ads' mix (:funnel 0) as well; the types are
-- compared as text, since an older log's event_type does not know the funnel's.
BEGIN;
CREATE TEMPORARY TABLE bench_chunk ON COMMIT DROP AS
SELECT gen_random_uuid() AS id, t.type::event_type AS type,
       CASE WHEN t.funnel THEN 'l' ELSE 'r' END || (:first_ad::bigint + s.a) AS request_id,
       (ARRAY['/1234/home/native', '/1234/feed/native', '/5678/article/native'])[1 + s.a % 3] AS ad_unit,
       CASE WHEN t.funnel THEN '' ELSE (ARRAY['10063170', 'native'])[1 + (s.a / 3) % 2] END AS format_id,
       CASE WHEN t.type = 'click' THEN (ARRAY['MainImage', 'Headline', 'CallToAction', 'Caption'])[1 + s.g % 4] END AS asset_key,
       (CASE WHEN t.type = 'mediation_result' THEN 'mediation' WHEN t.funnel THEN 'app'
             WHEN s.g % 10 = 0 THEN 'sdk' WHEN s.a % 5 = 0 THEN 'mediation' ELSE 'app' END)::event_source AS source,
       CASE WHEN t.type = 'mediation_result' THEN (ARRAY['AppLovin', 'Meta', 'Unity'])[1 + s.g % 3]
            WHEN NOT t.funnel AND s.a % 5 = 0 THEN 'AppLovin' END AS adapter,
       NOT t.funnel AND s.a % 4 = 0 AS eea, NOT t.funnel AND s.a % 3 = 0 AS reservation, s.a % 100 = 0 AS test,
       t.ts AS occurred_at, t.ts + interval '2 s' AS received_at, t.ts AS corrected_at, 'bench'::text AS key_name,
       CASE WHEN t.funnel OR t.type = 'ad_loaded' THEN 'l' || (:first_ad::bigint + s.a) END AS load_id,
       CASE WHEN t.type = 'ad_request' THEN 1 + s.a % 3 END AS ads_requested,
       CASE WHEN t.type IN ('ad_loaded', 'ad_failed', 'mediation_result') THEN (20 + random() * random() * 4000)::int END AS latency_ms,
       CASE WHEN t.type = 'ad_failed' THEN (ARRAY['no_fill', 'network_error', 'timeout'])[1 + s.g % 3]
            WHEN t.type = 'mediation_result' AND s.g % 2 = 0 THEN 'mediation_no_fill' END AS error_code,
       CASE WHEN t.type = 'mediation_result' THEN (ARRAY['failed', 'loaded', 'failed', 'timeout'])[1 + s.g % 4] END AS result,
       CASE WHEN t.type = 'mediation_result' THEN 1 + s.g % 3 END AS position
FROM (SELECT g, (random() * (:n / 4))::bigint AS a, random() AS r, random() AS f
      FROM generate_series(:chunk::bigint * 1000000 + 1, least((:chunk::bigint + 1) * 1000000, :n)) g) s
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.f < :funnel::float8 THEN
                    (CASE WHEN s.a % 5 = 0 AND s.r < 0.45 THEN 'mediation_result'
                          WHEN s.a % 5 = 1 AND s.r < 0.60 THEN 'ad_failed'
                          ELSE 'ad_request' END)
                ELSE (CASE WHEN s.r < 0.80 THEN 'impression' WHEN s.r < 0.90 THEN 'click' WHEN s.r < 0.95 THEN 'ad_loaded'
                           WHEN s.r < 0.975 THEN 'adchoices_impression' ELSE 'adchoices_click' END)
           END AS type,
           s.f < :funnel::float8 AS funnel,
           date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '30 days'
               + (s.a::float8 / (:n / 4)) * interval '30 days' + random() * interval '120 s' AS ts
) t;
DO $$
DECLARE
    columns text;
BEGIN
    SELECT string_agg(quote_ident(c.attname), ', ' ORDER BY c.attnum) INTO columns
    FROM pg_attribute c
    WHERE c.attrelid = 'pg_temp.bench_chunk'::regclass AND c.attnum > 0
      AND EXISTS (SELECT 1 FROM pg_attribute e WHERE e.attrelid = 'events'::regclass AND e.attname = c.attname AND NOT e.attisdropped);
    EXECUTE format('INSERT INTO events (%s) SELECT %s FROM bench_chunk', columns, columns);
END
$$;
COMMIT;
