#!/usr/bin/env bash
# Usage: scripts/bench-report.sh [EVENTS] [INGEST_EVENTS_PER_SECOND]
# Report benchmark, all in one run on this machine (figures go to docs/PERFORMANCE.md, "Reports"):
#  (1) loads EVENTS (default 10 000 000) synthetic events into the log inside PostgreSQL;
#  (2) `tracker rebuild` over them: the projector's catch-up throughput (events/s);
#  (3) each report over HTTP for a 7-day and a 30-day range: p50 of REPORT_CALLS (21) calls;
#  (4) the same reports by full-scan SQL over the raw log in PostgreSQL (scripts/bench/exact/,
#      every rule of docs/PROTOCOL.md section 5; FULLSCAN_RUNS, 1, runs each), their rows checked against the tracker's;
#  (5) the same SQL in DuckDB (PyPI, venv .local/bench-venv) over the log exported to Parquet,
#      DUCKDB_RUNS (5) runs each: p50 vs the report's, rows checked against the tracker's;
#  (6) the projector's lag (/readyz) while pgbench ingests INGEST_EVENTS_PER_SECOND (20 000)
#      in batches of 100 for INGEST_SECONDS (60);
#  (7) an Ad Manager report of RECONCILE_ROWS (100 000) rows imported: wall time, peak memory.
# Starts its own PostgreSQL cluster and a release build of the tracker.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-10000000}
ingest_rate=${2:-20000}
calls=${REPORT_CALLS:-21}
fullscan_runs=${FULLSCAN_RUNS:-1}
ingest_seconds=${INGEST_SECONDS:-60}
# The share of the ad funnel's events in the log (scripts/bench/load-events.sql); 0 gives the ads'
# mix alone, which a tracker older than the funnel can read (for a BENCH_BIN of another commit).
funnel=${BENCH_FUNNEL_SHARE:-0.333}
. scripts/bench/common.sh
bench_setup bench
pgbin=$(pg_config --bindir 2>/dev/null || true); [ -x "$pgbin/pgbench" ] || pgbin=/usr/lib/postgresql/15/bin
out=bench-results; mkdir -p "$out"; report="$out/report.txt"; : >"$report"
http=$((40000 + RANDOM % 20000))
say() { echo "$*" | tee -a "$report"; }
now() { date +%s.%N; }
seconds() { printf '%.1f' "$(echo "$2 - $1" | bc -l)"; }
say "report benchmark: $events events (a share $funnel of them the funnel's), $(nproc) cores, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"

# (1) The log: one transaction per million events, ids claimed in event_ids as the writer does.
start=$(now)
psql "$DATABASE_URL" -qAtc "SELECT tracker_ensure_event_partitions((now() AT TIME ZONE 'UTC')::date - 31, (now() AT TIME ZONE 'UTC')::date + 7)" >/dev/null
for chunk in $(seq 0 $(( (events - 1) / 1000000 ))); do
  psql "$DATABASE_URL" -q -v n="$events" -v chunk="$chunk" -v funnel="$funnel" -f scripts/bench/load-events.sql
done
psql "$DATABASE_URL" -qc "INSERT INTO event_ids SELECT id FROM events" -c "VACUUM ANALYZE events" -c "VACUUM ANALYZE event_ids"
# The load wrote gigabytes of WAL; flush them now, so the rebuild below is not charged for
# the load's checkpoint.
psql "$DATABASE_URL" -qc "CHECKPOINT"
say "(1) loaded $(psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM events") events ($(psql "$DATABASE_URL" -qAtc "SELECT count(DISTINCT request_id) FROM events") ads) in $(seconds "$start" "$(now)") s; log size $(psql "$DATABASE_URL" -qAtc "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass")"

# (2) Rebuild = replaying the whole log through the projection rules.
# CPU seconds of the rebuild's PostgreSQL backend, sampled from /proc while it runs: on a
# shared machine wall time alone does not say whether the work or the wait is slow.
( while true; do
    pid=$(psql "$DATABASE_URL" -qAtc "SELECT pid FROM pg_stat_activity WHERE application_name = 'tracker' AND backend_type = 'client backend' LIMIT 1")
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] && awk '{print $14 + $15}' "/proc/$pid/stat" >"$out/rebuild-pg-ticks.txt"
    sleep 1
  done ) &
sampler=$!
/usr/bin/time -f "%U %S" -o "$out/rebuild-time.txt" "$bin" rebuild >"$out/rebuild.txt" 2>&1
kill "$sampler"; wait "$sampler" 2>/dev/null || true
sed 's/^/(2) /' "$out/rebuild.txt" | tee -a "$report"
read -r user sys <"$out/rebuild-time.txt"
say "    CPU: tracker process $(echo "$user + $sys" | bc) s, its PostgreSQL backend $(echo "$(cat "$out/rebuild-pg-ticks.txt" 2>/dev/null || echo 0) / $(getconf CLK_TCK)" | bc -l | xargs printf '%.1f') s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
say "    projections: $(psql "$DATABASE_URL" -qAtc "SELECT (SELECT count(*) FROM format_day) || ' format_day, ' || (SELECT count(*) FROM asset_day) || ' asset_day, ' || (SELECT count(*) FROM source_day) || ' source_day rows, ' || (SELECT pg_size_pretty(pg_total_relation_size('ad_state'))) || ' ad_state'")"

# (3) Reports over HTTP, served from the projections.
key=$("$bin" keys create --name bench-analyst --scope report | tail -n 1)
# A key of one network (two of the three ad units): its reports read the same rows with one more condition.
# A tracker without keys scoped to networks (an older BENCH_BIN) is timed without them.
scoped=$("$bin" keys create --name bench-network --scope report --networks 1234 2>/dev/null | tail -n 1) || scoped=""
reports="summary assets sources adchoices"
[ "$funnel" != 0 ] && reports="$reports funnel failures waterfall"
TRACKER_LOG_LEVEL=warning "$bin" serve --port "$http" >"$out/report-server.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
today=$(date -u +%F)
from7=$(date -u -d "$today - 7 days" +%F); from30=$(date -u -d "$today - 30 days" +%F); to=$(date -u -d "$today - 1 day" +%F)
declare -A p50 fullscan
for r in $reports; do
  for range in 7 30; do
    from=$from7; [ "$range" = 30 ] && from=$from30
    url="http://127.0.0.1:$http/v1/reports/$r?from=$from&to=$to"
    curl -sf -H "Authorization: Bearer $key" "$url" >"$out/report-$r-$range.json"
    curl -sf -H "Authorization: Bearer $key" "$url&format=csv" >"$out/report-$r-$range.csv"
    ms=$(for _ in $(seq "$calls"); do
           curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $key" "$url"
         done | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)] * 1000}')
    p50[$r-$range]=$ms
    rows=$(grep -o '"day"' "$out/report-$r-$range.json" | wc -l)
    say "(3) $r ${range} days ($from..$to): p50 ${ms} ms over $calls calls, $rows rows"
  done
done
# The same reports in a time zone (local days and hours are sums of the quarter-hour tables):
# a 30-day range by day and a 7-day range by hour in America/New_York, next to the UTC ones.
tz=America/New_York
for r in $reports; do
  for shape in "30 day" "7 hour"; do
    read -r range granularity <<<"$shape"
    from=$from7; [ "$range" = 30 ] && from=$from30
    url="http://127.0.0.1:$http/v1/reports/$r?from=$from&to=$to&tz=$tz&granularity=$granularity"
    curl -sf -H "Authorization: Bearer $key" "$url" >"$out/report-$r-$range-$granularity-tz.json"
    ms=$(for _ in $(seq "$calls"); do
           curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $key" "$url"
         done | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)] * 1000}')
    rows=$(grep -o '"day"' "$out/report-$r-$range-$granularity-tz.json" | wc -l)
    say "(3) $r ${range} days in $tz by $granularity ($from..$to): p50 ${ms} ms over $calls calls, $rows rows (UTC by day: ${p50[$r-$range]} ms)"
    if [ "$shape" = "30 day" ] && [ -n "$scoped" ]; then
      ms=$(for _ in $(seq "$calls"); do
             curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $scoped" "$url"
           done | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)] * 1000}')
      say "(3)   the same with a key of network 1234 (two of the three ad units): p50 ${ms} ms"
    fi
  done
done
for t in format_day asset_day source_day format_quarters asset_quarters source_quarters funnel_day funnel_quarters failure_day \
         failure_quarters waterfall_day waterfall_quarters; do
  column=day; case $t in *quarters) column=quarters_from ;; esac
  say "    $t: $(psql "$DATABASE_URL" -qAtc "SELECT count(*) || ' rows, ' || pg_size_pretty(pg_total_relation_size('$t')) || ', ' || pg_size_pretty(pg_total_relation_size('$t') / GREATEST(count(DISTINCT $column::date), 1)) || ' per day with data' FROM $t")"
done
imp30=$(grep -o '"impressions":[0-9]*' "$out/report-summary-30.json" | cut -d: -f2 | paste -sd+ | bc)
dup30=$(grep -o '"duplicateImpressions":[0-9]*' "$out/report-summary-30.json" | cut -d: -f2 | paste -sd+ | bc)
say "    summary 30 days totals: impressions $imp30, duplicateImpressions $dup30"

# BENCH_REPORT_COMPARE=off skips (4) and (5), the slow comparisons, when only the tracker's
# own figures are wanted.
if [ "${BENCH_REPORT_COMPARE:-on}" != off ]; then
# (4) The same rows by full scans of the log in PostgreSQL: the report rules as SQL (docs/PROTOCOL.md 5)
# (scripts/bench/exact/, duplicate-click rule included), FULLSCAN_RUNS runs each; their rows
# must equal the tracker's. Nested loops off: the planner's estimates for the CTEs are far
# too low and a nested loop over them is quadratic; work_mem as an analyst would set it.
# `ev` is the log as exact/base.sql reads it (the same columns DuckDB gets from Parquet).
exact_sql() { { echo "SET enable_nestloop = off; SET work_mem = '256MB'; SET max_parallel_workers_per_gather = 2;"
                echo "CREATE TEMP VIEW ev AS SELECT request_id, id::text AS id, type::text AS type, corrected_at AT TIME ZONE 'UTC' AS ts,"
                echo "  ad_unit, format_id, asset_key, source::text AS source, adapter, eea, reservation, test FROM events;"
                cat scripts/bench/exact/base.sql "scripts/bench/exact/$1.sql"; } | sed -e "s/@FROM@/$2/" -e "s/@TO@/$3/"; }
setup_bench_venv
same_rows=yes
for r in summary assets sources adchoices; do
  for range in 7 30; do
    from=$from7; [ "$range" = 30 ] && from=$from30
    times=()
    for _ in $(seq "$fullscan_runs"); do
      start=$(now)
      exact_sql "$r" "$from" "$to" | psql "$DATABASE_URL" -q -v ON_ERROR_STOP=1 --csv -f - >"$out/fullscan-$r-$from.csv"
      times+=("$(echo "($(now) - $start) * 1000" | bc -l)")
    done
    ms=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.0f", a[int((NR+1)/2)]}')
    fullscan[$r-$range]=$ms
    check=$("$bench_python" scripts/bench/duckdb_reports.py compare "$out/report-$r-$range.csv" "$out/fullscan-$r-$from.csv" 2>&1) || same_rows=no
    say "(4) full scan $r ${range} days: ${ms} ms = $(printf '%.0f' "$(echo "$ms / ${p50[$r-$range]}" | bc -l)") x the report's p50; vs the tracker's rows: $check"
  done
done

# (5) What a user would pick instead: DuckDB (PyPI) over the same log exported to Parquet,
# the same SQL as (4), DUCKDB_RUNS (5) runs each; its rows must equal the tracker's.
# It runs before (6), so the log holds the same events as for (3) and (4).
psql "$DATABASE_URL" -qc "\\copy (SELECT request_id, id::text, type::text, corrected_at AT TIME ZONE 'UTC', ad_unit, format_id, asset_key, source::text, adapter, eea, reservation, test FROM events) TO '$dir/events.csv' WITH (FORMAT csv)"
say "(5) DuckDB: $("$bench_python" scripts/bench/duckdb_reports.py export "$dir/events.csv" "$dir/events.parquet")"
rm -f "$dir/events.csv"
specs=()
for r in summary assets sources adchoices; do specs+=("$r:$from7:$to" "$r:$from30:$to"); done
"$bench_python" scripts/bench/duckdb_reports.py run "$dir/events.parquet" "${DUCKDB_RUNS:-5}" "$out" "${specs[@]}" >"$out/duckdb.txt"
while read -r r from last ms fastest rows; do
  range=7; [ "$from" = "$from30" ] && range=30
  check=$("$bench_python" scripts/bench/duckdb_reports.py compare "$out/report-$r-$range.csv" "$out/duckdb-$r-$from.csv" 2>&1) || same_rows=no
  ratio=$(echo "$ms / ${p50[$r-$range]}" | bc -l)
  say "(5) DuckDB $r ${range} days: p50 ${ms} ms (fastest $fastest ms, $rows rows) = $(printf '%.0f' "$ratio") x the report's p50 ${p50[$r-$range]} ms; vs the tracker's rows: $check"
done <"$out/duckdb.txt"
say "    tracker, full-scan SQL and DuckDB rows all equal: $same_rows"

fi

# (6) Projector lag while events keep arriving (the server's projector, batched ingest by pgbench).
tps=$((ingest_rate / 100))
"$pgbin/pgbench" -n -c 4 -j 2 -R "$tps" -T "$ingest_seconds" -f scripts/bench/ingest.sql "$DATABASE_URL" >"$out/pgbench.txt" 2>&1 &
bench_pid=$!
: >"$out/lag.txt"
while kill -0 "$bench_pid" 2>/dev/null; do
  curl -s "http://127.0.0.1:$http/readyz" | grep -o '"projectionLag":{[^}]*}' >>"$out/lag.txt" || true
  sleep 0.5
done
wait "$bench_pid" || true
sleep 3
final=$(curl -s "http://127.0.0.1:$http/readyz" | grep -o '"projectionLag":{[^}]*}')
done_tps=$(awk '/^tps/ {print $3; exit}' "$out/pgbench.txt")
stats=$(lag_pairs "$out/lag.txt" | sort -k2 -g |
  awk '{e[NR]=$1; s[NR]=$2; if ($1>me) me=$1} END {printf "p50 %.2f s, p99 %.2f s, max %.2f s; max %d events behind; %d samples", s[int((NR+1)/2)], s[int(NR*0.99+0.5)], s[NR], me, NR}')
say "(6) lag during ingest of $ingest_rate events/s (pgbench: $done_tps batches of 100/s achieved) for $ingest_seconds s: $stats; 3 s after: $final"

kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""

# (7) An Ad Manager report of 100 000 rows (RECONCILE_ROWS) imported by the command line: wall
# time and the process's peak memory. Rows: 31 days x the 3 ad units the log holds, then
# ad units the tracker does not know (matched to nothing, as a network's other units are).
rows=${RECONCILE_ROWS:-100000}
python3 - "$out/admanager.csv" "$rows" "$from30" <<'PY'
import datetime, sys
path, rows, first = sys.argv[1], int(sys.argv[2]), datetime.date.fromisoformat(sys.argv[3])
units = ["/1234/home/native", "/1234/feed/native", "/5678/article/native"]
with open(path, "w", newline="") as f:
    f.write("Date,Ad unit,Ad server impressions,Ad server clicks\r\n")
    for i in range(rows):
        day, n = first + datetime.timedelta(days=i % 31), i // 31
        unit = units[n] if n < len(units) else f"/1234/other/unit-{n}"
        f.write(f'{day.isoformat()},{unit},"{(i * 7919) % 2000000:,}",{(i * 31) % 9000}\r\n')
PY
/usr/bin/time -f "%e %M" -o "$out/reconcile-time.txt" "$bin" reconcile import "$out/admanager.csv" --tz UTC >"$out/reconcile.txt" 2>&1
read -r wall kib <"$out/reconcile-time.txt"
say "(7) reconciliation import of $rows rows ($(du -h "$out/admanager.csv" | cut -f1)): ${wall} s, peak RSS $((kib / 1024)) MiB; $(head -1 "$out/reconcile.txt")"
