"""The four reports computed by DuckDB over the log exported to Parquet: what a user would
pick instead of the tracker's projections (scripts/bench-report.sh, docs/PERFORMANCE.md).

    python duckdb_reports.py export CSV PARQUET
        converts the log exported by psql (CSV, the columns of exact/base.sql's `ev`) to Parquet
    python duckdb_reports.py run PARQUET RUNS OUT_DIR REPORT:FROM:TO...
        runs each report's query (exact/base.sql + exact/REPORT.sql) RUNS times over the Parquet
        file, prints "REPORT FROM TO p50_ms min_ms rows" per report and writes its rows to
        OUT_DIR/duckdb-REPORT-FROM.csv
    python duckdb_reports.py compare TRACKER_CSV OTHER_CSV...
        checks that every CSV has the tracker's rows (ctr and share, derived, left out);
        exits 1 naming the first difference
"""
import csv
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = {
    "request_id": "VARCHAR", "id": "VARCHAR", "type": "VARCHAR", "ts": "TIMESTAMP", "ad_unit": "VARCHAR",
    "format_id": "VARCHAR", "asset_key": "VARCHAR", "source": "VARCHAR", "adapter": "VARCHAR",
    "eea": "BOOLEAN", "reservation": "BOOLEAN", "test": "BOOLEAN",
}
DERIVED = {"ctr", "share"}


def query(report, first, last):
    with open(os.path.join(HERE, "exact", "base.sql")) as f:
        base = f.read()
    with open(os.path.join(HERE, "exact", report + ".sql")) as f:
        tail = f.read()
    return (base + tail).replace("@FROM@", first).replace("@TO@", last)


def export(csv_path, parquet_path):
    import duckdb
    con = duckdb.connect()
    started = time.monotonic()
    con.execute(f"""COPY (SELECT * FROM read_csv('{csv_path}', header = false, columns = {COLUMNS!r}))
                    TO '{parquet_path}' (FORMAT parquet)""")
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{parquet_path}')").fetchone()[0]
    print(f"{rows} events to Parquet in {time.monotonic() - started:.1f} s, {os.path.getsize(parquet_path) / 1e6:.0f} MB "
          f"(duckdb {duckdb.__version__}, {con.execute('SELECT current_setting(' + repr('threads') + ')').fetchone()[0]} threads)")


def run(parquet_path, runs, out_dir, specs):
    import duckdb
    con = duckdb.connect()
    con.execute(f"CREATE VIEW ev AS SELECT * FROM read_parquet('{parquet_path}')")
    for spec in specs:
        report, first, last = spec.split(":")
        sql = query(report, first, last)
        times = []
        for _ in range(runs):
            started = time.monotonic()
            result = con.execute(sql)
            rows = result.fetchall()
            times.append((time.monotonic() - started) * 1000)
            names = [d[0] for d in result.description]
        with open(os.path.join(out_dir, f"duckdb-{report}-{first}.csv"), "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(names)
            w.writerows(rows)
        print(f"{report} {first} {last} {statistics.median(times):.0f} {min(times):.0f} {len(rows)}", flush=True)


def load(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        keep = [i for i, name in enumerate(header) if name not in DERIVED]
        return [header[i] for i in keep], sorted(tuple(row[i] for i in keep) for row in r)


def difference(tracker_path, other_path):
    """None when the other file has the tracker's rows, else what differs. The reference
    computations know no invalid-traffic rules: the tracker's givt… columns, which they lack,
    must all be 0 (no rule set labelled anything) and are then left out."""
    header, rows = load(tracker_path)
    h, r = load(other_path)
    extra = [i for i, name in enumerate(header) if name not in h]
    if extra and all(header[i].startswith("givt") for i in extra):
        if any(row[i] != "0" for row in rows for i in extra):
            return f"the tracker counted GIVT ({[header[i] for i in extra]}), which {other_path} cannot compute"
        keep = [i for i in range(len(header)) if i not in extra]
        header = [header[i] for i in keep]
        rows = sorted(tuple(row[i] for i in keep) for row in rows)
    if h != header:
        return f"{other_path}: columns {h} differ from the tracker's {header}"
    if r != rows:
        missing = sorted(set(rows) - set(r))[:3]
        extra_rows = sorted(set(r) - set(rows))[:3]
        return f"{other_path}: {len(r)} rows, the tracker {len(rows)}; only the tracker: {missing}; only here: {extra_rows}"
    return None


def compare(tracker_path, others):
    for path in others:
        problem = difference(tracker_path, path)
        if problem:
            sys.exit(problem)
    print(f"same {len(load(tracker_path)[1])} rows")


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "export":
        export(sys.argv[2], sys.argv[3])
    elif command == "run":
        run(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:])
    elif command == "compare":
        compare(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"unknown command {command}")
