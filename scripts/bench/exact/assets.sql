-- The assets report (after base.sql): one row per day, ad unit, format and asset key.
SELECT CAST(day AS varchar) AS day, ad_unit AS "adUnit", format_id AS "formatId", asset_key AS "assetKey",
       count(*) FILTER (WHERE NOT dup) AS clicks,
       count(*) FILTER (WHERE dup) AS "duplicateClicks",
       count(*) FILTER (WHERE outcome = 'attributed') AS "attributedClicks",
       count(*) FILTER (WHERE outcome = 'noImpression') AS "noImpression",
       count(*) FILTER (WHERE outcome = 'beforeImpression') AS "beforeImpression",
       count(*) FILTER (WHERE outcome = 'outsideWindow') AS "outsideWindow"
FROM click
WHERE day BETWEEN DATE '@FROM@' AND DATE '@TO@'
GROUP BY day, ad_unit, format_id, asset_key
ORDER BY 1, 2, 3, 4
