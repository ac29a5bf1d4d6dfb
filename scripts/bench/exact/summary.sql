-- The summary report (after base.sql): one row per day, ad unit and format.
, part (day, ad_unit, format_id, m) AS (
    SELECT day, ad_unit, format_id, CASE WHEN k = 1 THEN 'impressions' ELSE 'duplicateImpressions' END
    FROM e WHERE type = 'impression'
    UNION ALL
    SELECT i.day, i.ad_unit, i.format_id, 'staleImpressions'
    FROM counted i JOIN ad a ON a.request_id = i.request_id WHERE i.ts > a.loaded_at + INTERVAL '1 hour'
    UNION ALL
    SELECT day, ad_unit, format_id, CASE WHEN dup THEN 'duplicateClicks' ELSE 'clicks' END FROM click
    UNION ALL
    SELECT day, ad_unit, format_id, 'attributedClicks' FROM click WHERE outcome = 'attributed'
    UNION ALL
    SELECT day, ad_unit, format_id,
           CASE type WHEN 'adchoices_impression' THEN 'adchoicesImpressions' WHEN 'video_play' THEN 'videoPlays' ELSE 'videoEnds' END
    FROM e WHERE type IN ('adchoices_impression', 'video_play', 'video_end') AND k = 1
    UNION ALL
    SELECT day, ad_unit, format_id, 'adchoicesClicks' FROM e WHERE type = 'adchoices_click'
)
SELECT CAST(day AS varchar) AS day, ad_unit AS "adUnit", format_id AS "formatId",
       count(*) FILTER (WHERE m = 'impressions') AS impressions,
       count(*) FILTER (WHERE m = 'duplicateImpressions') AS "duplicateImpressions",
       count(*) FILTER (WHERE m = 'staleImpressions') AS "staleImpressions",
       count(*) FILTER (WHERE m = 'clicks') AS clicks,
       count(*) FILTER (WHERE m = 'duplicateClicks') AS "duplicateClicks",
       count(*) FILTER (WHERE m = 'attributedClicks') AS "attributedClicks",
       count(*) FILTER (WHERE m = 'clicks') - count(*) FILTER (WHERE m = 'attributedClicks') AS "unattributedClicks",
       count(*) FILTER (WHERE m = 'adchoicesImpressions') AS "adchoicesImpressions",
       count(*) FILTER (WHERE m = 'adchoicesClicks') AS "adchoicesClicks",
       count(*) FILTER (WHERE m = 'videoPlays') AS "videoPlays",
       count(*) FILTER (WHERE m = 'videoEnds') AS "videoEnds"
FROM part
WHERE day BETWEEN DATE '@FROM@' AND DATE '@TO@'
GROUP BY day, ad_unit, format_id
ORDER BY 1, 2, 3
