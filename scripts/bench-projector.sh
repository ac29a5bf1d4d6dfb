#!/usr/bin/env bash
# Usage: scripts/bench-projector.sh [INGEST_SECONDS=15]
# Where the projector's cost goes, next to ingestion's, in one run (docs/PROJECTOR-DESIGN.md):
#  (1) the tracker ingests the mixed stream of scripts/bench/events.lua (batches of 100 from 16
#      connections) for INGEST_SECONDS with the projector off: CPU of the tracker and of
#      PostgreSQL per event, WAL per event, and each statement's share (pg_stat_statements);
#  (2) `tracker project --once` projects that log alone: events/s, the same figures per event;
#  (3) bytes per event on disk of the log, event_ids and the projector's per-ad state.
# Starts its own PostgreSQL cluster (with pg_stat_statements) and a release build of the tracker.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-15}
. scripts/bench/common.sh
bench_setup projector
. scripts/bench/measure.sh
bench_enable_stat_statements
out=bench-results; mkdir -p "$out"; result="$out/projector.txt"; : >"$result"
say() { echo "$*" | tee -a "$result"; }
sql() { psql "$DATABASE_URL" -qAtc "$1"; }
per() { printf '%.1f' "$(echo "$1 / $2" | bc -l)"; }
http=$((40000 + RANDOM % 20000))
key=$("$bin" keys create --name bench --scope ingest | tail -n 1)
say "projector benchmark: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources sql || echo '+changes'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# (1) Ingestion alone.
TRACKER_PROJECTOR=off TRACKER_LOG_LEVEL=warning "$bin" serve --port "$http" >"$out/projector-server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
sql "SELECT pg_stat_statements_reset()" >/dev/null
t0=$(proc_cpu "$server_pid"); p0=$(pg_cpu); w0=$(wal_lsn); s0=$(date +%s.%N)
wrk -t2 -c16 -d"${duration}s" -s scripts/bench/events.lua "http://127.0.0.1:$http" -- "$key" 100 5 >"$out/projector-wrk.txt"
t1=$(proc_cpu "$server_pid"); p1=$(pg_cpu); s1=$(date +%s.%N)
n=$(sql "SELECT count(*) FROM events")
wal=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0')")
kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
say "(1) ingest: $n events in $(printf '%.1f' "$(echo "$s1 - $s0" | bc -l)") s = $(printf '%.0f' "$(echo "$n / ($s1 - $s0)" | bc -l)") events/s; per event: tracker $(per "($t1 - $t0) * 1000000" "$n") µs, PostgreSQL $(per "($p1 - $p0) * 1000000" "$n") µs CPU, WAL $(per "$wal" "$n") B"
statement_report "ingest" "$n" | tee -a "$result"

# (2) The projector over that log, alone.
sql "CHECKPOINT" >/dev/null
sql "SELECT pg_stat_statements_reset()" >/dev/null
p0=$(pg_cpu); w0=$(wal_lsn)
/usr/bin/time -f "%e %U %S %M" -o "$out/projector-time.txt" "$bin" project --once >"$out/projector-run.txt" 2>&1
p1=$(pg_cpu)
wal=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0')")
read -r real user sys rss <"$out/projector-time.txt"
projected=$(sql "SELECT events_projected FROM projection_state")
say "(2) projector: $projected events in $real s = $(printf '%.0f' "$(echo "$projected / $real" | bc -l)") events/s; per event: tracker $(per "($user + $sys) * 1000000" "$projected") µs, PostgreSQL $(per "($p1 - $p0) * 1000000" "$projected") µs CPU, WAL $(per "$wal" "$projected") B; tracker peak RSS $((rss / 1024)) MiB"
statement_report "projection" "$projected" | tee -a "$result"

# (3) Bytes per event on disk.
log_bytes=$(sql "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'events'::regclass")
ids_bytes=$(sql "SELECT pg_total_relation_size('event_ids')")
state_bytes=$(sql "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public' AND c.relkind = 'r' AND c.relname IN ('ad_events', 'ad_state')")
day_bytes=$(sql "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['format_day', 'asset_day', 'source_day']::regclass[]) c")
say "(3) disk per event: log $(per "$log_bytes" "$n") B, event_ids $(per "$ids_bytes" "$n") B, per-ad state $(per "$state_bytes" "$n") B, day tables $(per "$day_bytes" "$n") B (load $(cut -d' ' -f1-3 /proc/loadavg))"
