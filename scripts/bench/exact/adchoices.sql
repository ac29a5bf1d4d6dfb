-- The adchoices report (after base.sql): one row per day, ad unit and format.
, part (day, ad_unit, format_id, m) AS (
    SELECT i.day, i.ad_unit, i.format_id, CASE WHEN a.has_adchoices THEN 'with' ELSE 'without' END
    FROM counted i JOIN ad a ON a.request_id = i.request_id WHERE i.eea AND i.reservation
    UNION ALL
    SELECT day, ad_unit, format_id, 'click' FROM e WHERE type = 'adchoices_click'
)
SELECT CAST(day AS varchar) AS day, ad_unit AS "adUnit", format_id AS "formatId",
       count(*) FILTER (WHERE m IN ('with', 'without')) AS "eeaReservationImpressions",
       count(*) FILTER (WHERE m = 'with') AS "withAdChoices",
       count(*) FILTER (WHERE m = 'click') AS "adchoicesClicks"
FROM part
WHERE day BETWEEN DATE '@FROM@' AND DATE '@TO@'
GROUP BY day, ad_unit, format_id
ORDER BY 1, 2, 3
