#!/usr/bin/env bash
# Usage: scripts/bench-capacity.sh [DURATION_SECONDS]
# What one event costs, for sizing (docs/SCALING.md): CPU time of the tracker and of
# PostgreSQL per ingested event (batches of 100 from 16 connections), CPU time of the
# projector per event, and the bytes each event takes in the log, in event_ids and in WAL.
# CPU time, unlike throughput, hardly depends on what else the machine runs.
# BENCH_WITHOUT=INDEX drops the log's order index or event_ids' key first, to price it (see below).
# Starts its own PostgreSQL cluster and a release build of the tracker; needs wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-20}
. scripts/bench/common.sh
bench_setup capacity
http=$((40000 + RANDOM % 20000))
key=$("$bin" keys create --name bench --scope ingest | tail -n 1)
sql() { psql "$DATABASE_URL" -qAtc "$1"; }
tick=$(getconf CLK_TCK)
# CPU seconds of one process (user + system).
cpu() { awk -v t="$tick" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }
# CPU seconds of the whole cluster: the postmaster, its live children, and its reaped ones.
pg_cpu() {
  local master; master=$(head -1 "$dir/data/postmaster.pid")
  { awk '{print $14 + $15 + $16 + $17}' "/proc/$master/stat"
    for c in $(pgrep -P "$master"); do awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || true; done
  } | awk -v t="$tick" '{s += $1} END {printf "%.2f", s / t}'
}
events() { sql "SELECT count(*) FROM events"; }
# load OUT COMMAND...: runs the load generator with its output in OUT and prints its CPU
# seconds (user + system): what the load itself takes of the cores it shares with the tracker
# and PostgreSQL.
load() {
  local out=$1 TIMEFORMAT='%U %S' times status=0; shift
  times=$( { time "$@" >"$out" 2>"$out.stderr"; } 2>&1 ) || status=$?
  cat "$out.stderr" >&2
  [ "$status" = 0 ] || { echo "the load generator failed (exit $status)" >&2; return "$status"; }
  echo "$times" | tail -1 | awk '{printf "%.2f", $1 + $2}'
}

# BENCH_WITHOUT=events_log_order or event_ids_pkey drops that index before the load: what it
# costs each event. Only a measurement: without the first the projector has no order to read
# (its phase is skipped), without the second a retried id is stored twice.
case "${BENCH_WITHOUT:-}" in
  "") ;;
  events_log_order) sql "DROP INDEX events_log_order" ;;
  event_ids_pkey) sql "ALTER TABLE event_ids DROP CONSTRAINT event_ids_pkey" ;;
  *) echo "BENCH_WITHOUT: events_log_order or event_ids_pkey, not '$BENCH_WITHOUT'" >&2; exit 2 ;;
esac
# The rate limit off: one key carries the whole load, and a machine faster than the limit
# (TRACKER_RATE_LIMIT, per key) would measure the limit instead of itself. A build whose
# default is no limit (0.9.0, a baseline) refuses 'off' and is given nothing.
rate_limit=off
if "$bin" serve --help 2>&1 | grep -q 'TRACKER_RATE_LIMIT \[no limit\]'; then rate_limit=; fi
env TRACKER_PROJECTOR=off ${rate_limit:+TRACKER_RATE_LIMIT=$rate_limit} TRACKER_LOG_LEVEL=warning "$bin" serve --port "$http" >"$dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done

# Each phase's figures are kept apart: batch_* for batches, single_* for single events.
n0=$(events); t0=$(cpu "$server_pid"); p0=$(pg_cpu); w0=$(sql "SELECT pg_current_wal_lsn()"); s0=$(date +%s.%N)
batch_wrk=$(load "$dir/wrk.txt" wrk -t2 -c16 -d"${duration}s" -s scripts/bench/events.lua "http://127.0.0.1:$http" -- "$key" 100 3)
n1=$(events); t1=$(cpu "$server_pid"); p1=$(pg_cpu); s1=$(date +%s.%N)
wal=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0')")
n=$((n1 - n0)); batch_tracker=$(echo "$t1 - $t0" | bc -l); batch_pg=$(echo "$p1 - $p0" | bc -l); batch_secs=$(echo "$s1 - $s0" | bc -l)
[ "$n" -gt 0 ] || { echo "no event was stored" >&2; cat "$dir/wrk.txt" >&2; exit 1; }
# The same with one event per request (clients that do not batch): the cost per request.
n0=$(events); t0=$(cpu "$server_pid"); p0=$(pg_cpu); s0=$(date +%s.%N)
single_wrk=$(load "$dir/wrk-single.txt" wrk -t2 -c32 -d"${duration}s" -s scripts/bench/events.lua "http://127.0.0.1:$http" -- "$key" 1 4)
n1=$(events); t1=$(cpu "$server_pid"); p1=$(pg_cpu); s1=$(date +%s.%N)
single=$((n1 - n0)); single_tracker=$(echo "$t1 - $t0" | bc -l); single_pg=$(echo "$p1 - $p0" | bc -l); single_secs=$(echo "$s1 - $s0" | bc -l)
kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
cores=$(nproc)
# per COUNT SECONDS: microseconds per event of each CPU figure given after (tracker, PostgreSQL,
# load generator) and of the cores' time none of them used.
per() {
  local count=$1 secs=$2; shift 2
  local used=0 x
  for x in "$@"; do printf '%.1f ' "$(echo "$x * 1000000 / $count" | bc -l)"; used=$(echo "$used + $x" | bc -l); done
  printf '%.1f\n' "$(echo "($cores * $secs - $used) * 1000000 / $count" | bc -l)"
}

log_bytes=$(sql "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'events'::regclass")
ids_bytes=$(sql "SELECT pg_total_relation_size('event_ids')")
echo "ingest: $n events in $(printf '%.1f' "$batch_secs") s = $(echo "$n / $batch_secs" | bc) events/s on this machine ($cores cores, load $(cut -d' ' -f1 /proc/loadavg))"
grep "non-2xx" "$dir/wrk.txt" | sed 's/^/  /'
read -r tr pg lg idle <<<"$(per "$n" "$batch_secs" "$batch_tracker" "$batch_pg" "$batch_wrk")"
printf '  tracker CPU: %s µs/event = %.0f events per core-second\n' "$tr" "$(echo "$n / $batch_tracker" | bc -l)"
printf '  PostgreSQL CPU: %s µs/event = %.0f events per core-second\n' "$pg" "$(echo "$n / $batch_pg" | bc -l)"
printf '  the load generator (wrk): %s µs/event; no process busy: %s µs/event of the %d cores\n' "$lg" "$idle" "$cores"
total=$(events)
printf '  WAL: %.0f bytes/event; log (heap + index): %.0f bytes/event; event_ids: %.0f bytes/event\n' \
  "$(echo "$wal / $n" | bc -l)" "$(echo "$log_bytes / $total" | bc -l)" "$(echo "$ids_bytes / $total" | bc -l)"

echo "single-event requests: $single in $(printf '%.1f' "$single_secs") s = $(echo "$single / $single_secs" | bc) requests/s"
grep "non-2xx" "$dir/wrk-single.txt" | sed 's/^/  /'
read -r tr pg lg idle <<<"$(per "$single" "$single_secs" "$single_tracker" "$single_pg" "$single_wrk")"
printf '  tracker CPU: %s µs/request; PostgreSQL CPU: %s µs/request; the load generator (wrk): %s µs/request; no process busy: %s µs/request of the %d cores\n' \
  "$tr" "$pg" "$lg" "$idle" "$cores"

[ -n "${BENCH_WITHOUT:-}" ] && { echo "projector: skipped (BENCH_WITHOUT=$BENCH_WITHOUT)"; exit 0; }
sleep 1  # the stopped server's backends reaped first (see below)
p0=$(pg_cpu); w0=$(sql "SELECT pg_current_wal_lsn()")
TIMEFORMAT='%R %U %S'
times=$( { time "$bin" project --once >/dev/null 2>&1; } 2>&1 )
# A backend's CPU reaches the postmaster's count of its children only once it has exited and
# been reaped, a moment after its client ends: read too early, the projector's PostgreSQL CPU
# read 0.
sleep 1
p1=$(pg_cpu)
wal=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0')")
read -r real user sys <<<"$times"
projected=$(sql "SELECT events_projected FROM projection_state")
printf 'projector: %d events in %.1f s = %.0f events/s; its CPU %.1f µs/event, PostgreSQL CPU %.1f µs/event, WAL %.0f bytes/event\n' \
  "$projected" "$real" "$(echo "$projected / $real" | bc -l)" "$(echo "($user + $sys) * 1000000 / $projected" | bc -l)" \
  "$(echo "($p1 - $p0) * 1000000 / $projected" | bc -l)" "$(echo "$wal / $projected" | bc -l)"
echo "  left unprojected after one catch-up: $(sql "SELECT count(*) FROM events e, projection_state s WHERE (e.tx, e.seq) > (s.checkpoint_tx, s.checkpoint_seq)") of $total"
echo "projection tables: $(sql "SELECT pg_size_pretty(sum(pg_total_relation_size(c))) FROM unnest(ARRAY['ad_events','format_day','asset_day','source_day']::regclass[]) c"), ad_events $(sql "SELECT (pg_total_relation_size('ad_events') / greatest(count(*), 1)) FROM ad_events") bytes/event"
