-- The sources report (after base.sql): one row per day, ad unit and adapter.
, part (day, ad_unit, adapter, m) AS (
    SELECT day, ad_unit, adapter, source FROM e WHERE type = 'impression'
    UNION ALL
    SELECT i.day, i.ad_unit, i.adapter, 'doubleImpressions'
    FROM counted i JOIN ad a ON a.request_id = i.request_id WHERE a.impressions_double
    UNION ALL
    SELECT c.day, c.ad_unit, c.adapter, 'doubleClicks'
    FROM e c JOIN ad a ON a.request_id = c.request_id WHERE c.type = 'click' AND c.k = 1 AND a.clicks_double
)
SELECT CAST(day AS varchar) AS day, ad_unit AS "adUnit", adapter,
       count(*) FILTER (WHERE m = 'app') AS "appImpressions",
       count(*) FILTER (WHERE m = 'sdk') AS "sdkImpressions",
       count(*) FILTER (WHERE m = 'mediation') AS "mediationImpressions",
       count(*) FILTER (WHERE m = 'doubleImpressions') AS "doubleTrackedImpressionAds",
       count(*) FILTER (WHERE m = 'doubleClicks') AS "doubleTrackedClickAds"
FROM part
WHERE day BETWEEN DATE '@FROM@' AND DATE '@TO@'
GROUP BY day, ad_unit, adapter
ORDER BY 1, 2, 3
