-- Reconciliation with Ad Manager (docs/RECONCILIATION.md): imported Ad Manager report exports,
-- kept as they were imported. An import is immutable: the same file (with the same time zone
-- and unit map) imported again answers the existing import, whose id is derived from them.

CREATE TABLE reconciliation_imports (
    id          text        PRIMARY KEY,
    tz          text        NOT NULL,
    rows        integer     NOT NULL,
    matched     integer     NOT NULL,
    first_day   date,
    last_day    date,
    imported_at timestamptz NOT NULL DEFAULT now(),
    imported_by text        NOT NULL
);

-- Every data row of the file: Ad Manager's day and ad unit, the tracker's ad unit path it
-- was matched to (NULL: unmatched, listed with the import), and Ad Manager's counts.
CREATE TABLE reconciliation_rows (
    import_id          text    NOT NULL REFERENCES reconciliation_imports (id),
    row                integer NOT NULL,
    day                date    NOT NULL,
    ad_manager_unit    text    NOT NULL,
    ad_unit            text,
    -- How ad_manager_unit became ad_unit: 'map' (the unit map), 'path' (it is one), 'code' (the
    -- last segment of one known path); or why it did not: 'unknown' (no path), 'ambiguous' (several).
    matched_by         text    NOT NULL CHECK (matched_by IN ('map', 'path', 'code', 'unknown', 'ambiguous')),
    impressions        bigint  NOT NULL,
    clicks             bigint  NOT NULL,
    PRIMARY KEY (import_id, row)
);

CREATE FUNCTION tracker_reject_import_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'reconciliation imports are immutable: % on % is not allowed', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege', HINT = 'Import the corrected file again: it becomes a new import.';
END
$$;
CREATE TRIGGER reconciliation_imports_immutable BEFORE UPDATE OR DELETE ON reconciliation_imports
    FOR EACH ROW EXECUTE FUNCTION tracker_reject_import_change();
CREATE TRIGGER reconciliation_rows_immutable BEFORE UPDATE OR DELETE ON reconciliation_rows
    FOR EACH ROW EXECUTE FUNCTION tracker_reject_import_change();

-- Imports arrive over HTTP with a report key and are written through the server's primary
-- connection (tracker_ingest); reports read them as tracker_report.
REVOKE ALL ON reconciliation_imports, reconciliation_rows FROM PUBLIC;
GRANT SELECT, INSERT ON reconciliation_imports, reconciliation_rows TO tracker_ingest;
GRANT SELECT ON reconciliation_imports, reconciliation_rows TO tracker_report, tracker_projector;
