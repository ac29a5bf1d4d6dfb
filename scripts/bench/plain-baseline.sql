-- The events of scripts/bench/events.lua as rows, for bench-ingest's \copy baselines: :rows
-- rows of the same mix (ad by ad: ad_loaded, impression, an SDK duplicate for one ad in six, a
-- click for one in four and a second for one in twelve, AdChoices for one in five, video play
-- and end for one in eight; times spread over the last day; half v7, half v4 ids; 40 user agents).
-- Usage: psql -v rows=N -f scripts/bench/plain-baseline.sql (makes bench_source).
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench_source;
CREATE UNLOGGED TABLE bench_source AS
WITH ads AS (
    SELECT a, now() - (random() * interval '1 day') AS t FROM generate_series(1, (:rows / 2.95)::int) a
), mix AS (
    SELECT a, t, e.kind, e.offs, e.extra
    FROM ads CROSS JOIN LATERAL (VALUES
        ('ad_loaded', 0, ''), ('impression', 2, CASE WHEN a % 5 = 0 THEN 'eea' END),
        (CASE WHEN a % 6 = 0 THEN 'impression' END, 3, 'sdk'),
        (CASE WHEN a % 4 = 0 THEN 'click' END, 20, ''), (CASE WHEN a % 12 = 0 THEN 'click' END, 40, 'second'),
        (CASE WHEN a % 5 = 0 THEN 'adchoices_impression' END, 2, ''),
        (CASE WHEN a % 8 = 0 THEN 'video_play' END, 5, ''), (CASE WHEN a % 8 = 0 THEN 'video_end' END, 35, '')
    ) AS e(kind, offs, extra)
    WHERE e.kind IS NOT NULL
)
SELECT CASE WHEN row_number() OVER () % 2 = 0
            THEN (lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') || '7' || substr(md5(random()::text), 1, 3)
                  || '8' || substr(md5(random()::text), 1, 15))::uuid
            ELSE gen_random_uuid() END AS id,
       kind::event_type AS type, 'p-' || a AS request_id,
       (ARRAY['/1234/home/native', '/1234/feed/native', '/5678/article/native'])[a % 3 + 1] AS ad_unit,
       '10063170'::text AS format_id,
       CASE WHEN kind = 'click' THEN (ARRAY['MainImage', 'Headline', 'CallToAction', 'Caption'])[(a + (coalesce(extra, '') = 'second')::int) % 4 + 1] END AS asset_key,
       NULL::click_action AS click_action, (CASE WHEN coalesce(extra, '') = 'sdk' THEN 'sdk' ELSE 'app' END)::event_source AS source,
       NULL::text AS adapter, coalesce(extra, '') = 'eea' AS eea, coalesce(extra, '') = 'eea' AS reservation, false AS test, NULL::jsonb AS attributes,
       t + offs * interval '1 second' AS occurred_at, NULL::timestamptz AS sent_at, now() AS received_at,
       t + offs * interval '1 second' AS corrected_at, 'bench'::text AS key_name,
       '127.0.0.1'::inet AS client_ip, (a % 40 + 1)::int AS user_agent_id
FROM mix
LIMIT :rows;
