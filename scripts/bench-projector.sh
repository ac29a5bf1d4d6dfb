#!/usr/bin/env bash
# Usage: scripts/bench-projector.sh [INGEST_SECONDS=15]
# Where the projector's cost goes, next to ingestion's, in one run (docs/PROJECTOR-DESIGN.md):
#  (1) the tracker ingests the mixed stream of scripts/bench/events.lua (batches of 100 from 16
#      connections) for INGEST_SECONDS with the projector off: CPU of the tracker and of
#      PostgreSQL per event, WAL per event, and each statement's share (pg_stat_statements);
#  (2) `tracker project --once` projects that log alone: events/s, the same figures per event;
#  (3) bytes per event on disk of the log, event_ids and the projector's per-ad state.
# BASELINE_BIN=/path/to/an/older/tracker also runs that binary's projector over a copy of the
# same log (CREATE DATABASE … TEMPLATE) first, and prints the ratios: a baseline in the same run.
# BENCH_IVT=compare projects the log twice, without and with a real-sized GIVT rule set.
# BENCH_FUNNEL=on (the default) adds the ad funnel's events to the stream (a bit over a third
# of it, scripts/bench/events.lua); off gives the ads' events alone, which a tracker older than
# the funnel takes (for a BASELINE_BIN of such a commit).
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
baseline=${BASELINE_BIN:-}
say "projector benchmark: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources tracker-client sql || echo '+changes')${baseline:+, baseline $baseline}, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
cluster="postgresql://postgres@127.0.0.1:$port"
ingest_bin=$bin
if [ -n "$baseline" ]; then
  # The log is written under the baseline's schema; the candidate migrates its copy forward.
  psql "$cluster/postgres" -qc "CREATE DATABASE base"
  export DATABASE_URL="$cluster/base"
  "$baseline" migrate >/dev/null 2>&1
  psql "$DATABASE_URL" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
  ingest_bin=$baseline
fi
key=$("$ingest_bin" keys create --name bench --scope ingest | tail -n 1)

# (1) Ingestion alone.
TRACKER_PROJECTOR=off TRACKER_LOG_LEVEL=warning "$ingest_bin" serve --port "$http" >"$out/projector-server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
sql "SELECT pg_stat_statements_reset()" >/dev/null
t0=$(proc_cpu "$server_pid"); p0=$(pg_cpu); w0=$(wal_lsn); s0=$(date +%s.%N)
wrk -t2 -c16 -d"${duration}s" -s scripts/bench/events.lua "http://127.0.0.1:$http" -- "$key" 100 5 \
  "$([ "${BENCH_FUNNEL:-on}" = on ] && echo 1 || echo 0)" >"$out/projector-wrk.txt"
t1=$(proc_cpu "$server_pid"); p1=$(pg_cpu); s1=$(date +%s.%N)
n=$(sql "SELECT count(*) FROM events")
wal=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0')")
kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
say "(1) ingest: $n events in $(printf '%.1f' "$(echo "$s1 - $s0" | bc -l)") s = $(printf '%.0f' "$(echo "$n / ($s1 - $s0)" | bc -l)") events/s; per event: tracker $(per "($t1 - $t0) * 1000000" "$n") µs, PostgreSQL $(per "($p1 - $p0) * 1000000" "$n") µs CPU, WAL $(per "$wal" "$n") B"
statement_report "ingest" "$n" | tee -a "$result"
if [ -n "$baseline" ]; then
  # Both projectors read a copy made after the ingest, so both find the log's pages in the OS
  # cache rather than one of them in shared buffers.
  psql "$cluster/postgres" -qc "CREATE DATABASE baseline TEMPLATE base" -c "CREATE DATABASE candidate TEMPLATE base"
  DATABASE_URL="$cluster/candidate" "$bin" migrate >/dev/null 2>&1
fi

# (2) A projector over that log, alone: project LABEL BINARY DATABASE_URL; sets rate.
project() {
  local label=$1 binary=$2 url=$3 real user sys rss projected state_bytes
  export DATABASE_URL=$url
  sql "CHECKPOINT" >/dev/null
  sql "SELECT pg_stat_statements_reset()" >/dev/null
  p0=$(pg_cpu); w0=$(wal_lsn)
  /usr/bin/time -f "%e %U %S %M" -o "$out/projector-time.txt" "$binary" project --once >"$out/projector-run.txt" 2>&1
  sleep 1  # the postmaster adds an exited backend's CPU to its children's once it has reaped it
  p1=$(pg_cpu)
  wal=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0')")
  read -r real user sys rss <"$out/projector-time.txt"
  projected=$(sql "SELECT events_projected FROM projection_state")
  rate=$(echo "$projected / $real" | bc -l)
  cpu_tracker=$(echo "($user + $sys) * 1000000 / $projected" | bc -l)
  cpu_pg=$(echo "($p1 - $p0) * 1000000 / $projected" | bc -l)
  wal_event=$(echo "$wal / $projected" | bc -l)
  state_bytes=$(sql "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public' AND c.relkind = 'r' AND c.relname IN ('ad_events', 'ad_state')")
  say "(2) $label projector: $projected events in $real s = $(printf '%.0f' "$rate") events/s; per event: tracker $(printf '%.1f' "$cpu_tracker") µs, PostgreSQL $(printf '%.1f' "$cpu_pg") µs CPU, WAL $(printf '%.0f' "$wal_event") B, per-ad state on disk $(per "$state_bytes" "$projected") B; tracker peak RSS $((rss / 1024)) MiB (load $(cut -d' ' -f1 /proc/loadavg))"
  statement_report "$label projection" "$projected" | tee -a "$result"
}
if [ "${BENCH_IVT:-off}" = compare ]; then
  # The same log projected without a rule set and, in a copy, with one the size of a real one
  # (2 000 patterns, 10 000 ranges): what the invalid-traffic rules cost the projector.
  psql "$cluster/postgres" -qc "CREATE DATABASE with_rules TEMPLATE projector"
  python3 scripts/bench/ivt-rule-set.py "$dir/ivt-rules.json"
  DATABASE_URL="$cluster/with_rules" "$bin" ivt activate "$dir/ivt-rules.json" | head -1
  project "without rules" "$bin" "$DATABASE_URL"
  b_rate=$rate b_tracker=$cpu_tracker b_pg=$cpu_pg
  project "with rules" "$bin" "$cluster/with_rules"
  say "    with / without the rule set: events/s $(printf '%.2f' "$(echo "$rate / $b_rate" | bc -l)") x, tracker CPU $(printf '%.2f' "$(echo "$cpu_tracker / $b_tracker" | bc -l)") x, PostgreSQL CPU $(printf '%.2f' "$(echo "$cpu_pg / $b_pg" | bc -l)") x"
elif [ -n "$baseline" ]; then
  project baseline "$baseline" "$cluster/baseline"
  b_rate=$rate b_tracker=$cpu_tracker b_pg=$cpu_pg b_wal=$wal_event
  project candidate "$bin" "$cluster/candidate"
  say "    candidate / baseline: events/s $(printf '%.2f' "$(echo "$rate / $b_rate" | bc -l)") x, tracker CPU $(printf '%.2f' "$(echo "$cpu_tracker / $b_tracker" | bc -l)") x, PostgreSQL CPU $(printf '%.2f' "$(echo "$cpu_pg / $b_pg" | bc -l)") x, WAL $(printf '%.2f' "$(echo "$wal_event / $b_wal" | bc -l)") x"
else
  project projector "$bin" "$DATABASE_URL"
fi

# (3) Bytes per event on disk.
log_bytes=$(sql "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'events'::regclass")
ids_bytes=$(sql "SELECT pg_total_relation_size('event_ids')")
day_bytes=$(sql "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['format_day', 'asset_day', 'source_day']::regclass[]) c")
say "(3) disk per event: log $(per "$log_bytes" "$n") B, event_ids $(per "$ids_bytes" "$n") B, day tables $(per "$day_bytes" "$n") B (load $(cut -d' ' -f1-3 /proc/loadavg))"
