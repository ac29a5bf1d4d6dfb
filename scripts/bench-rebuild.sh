#!/usr/bin/env bash
# Usage: scripts/bench-rebuild.sh [EVENTS=10000000]
# Rebuild benchmark (docs/PROJECTOR-DESIGN.md), in one run:
#  (1) loads EVENTS synthetic events into the log inside PostgreSQL (scripts/bench/load-events.sql,
#      as bench-report does: about 3 events per ad over 30 days);
#  (2) the floor: reading the log's projected columns once with a binary COPY to /dev/null;
#  (3) `tracker rebuild`: events/s, seconds per phase, CPU of the tracker and of its backend.
# BASELINE_BIN=/path/to/an/older/tracker first runs that binary's rebuild over a copy of the same
# log (CREATE DATABASE … TEMPLATE) and prints the ratios. BENCH_FUNNEL_SHARE (default 0.333) is
# the share of the ad funnel's events in the log; 0 for a baseline older than the funnel.
# Starts its own PostgreSQL cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-10000000}
. scripts/bench/common.sh
bench_setup rebuild
. scripts/bench/measure.sh
out=bench-results; mkdir -p "$out"; result="$out/rebuild.txt"; : >"$result"
say() { echo "$*" | tee -a "$result"; }
now() { date +%s.%N; }
baseline=${BASELINE_BIN:-}
cluster="postgresql://postgres@127.0.0.1:$port"
say "rebuild benchmark: $events events, commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources tracker-client sql || echo '+changes')${baseline:+, baseline $baseline}, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$baseline" ]; then
  psql "$cluster/postgres" -qc "CREATE DATABASE base"
  export DATABASE_URL="$cluster/base"
  "$baseline" migrate >/dev/null 2>&1
fi

# (1) The log: one transaction per million events, ids claimed in event_ids as the writer does.
start=$(now)
psql "$DATABASE_URL" -qAtc "SELECT tracker_ensure_event_partitions((now() AT TIME ZONE 'UTC')::date - 31, (now() AT TIME ZONE 'UTC')::date + 7)" >/dev/null
for chunk in $(seq 0 $(( (events - 1) / 1000000 ))); do
  psql "$DATABASE_URL" -q -v n="$events" -v chunk="$chunk" -v funnel="${BENCH_FUNNEL_SHARE:-0.333}" -f scripts/bench/load-events.sql
done
psql "$DATABASE_URL" -qc "INSERT INTO event_ids SELECT id FROM events" -c "VACUUM ANALYZE events" -c "VACUUM ANALYZE event_ids" -c "CHECKPOINT"
say "(1) loaded $(psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM events") events ($(psql "$DATABASE_URL" -qAtc "SELECT count(DISTINCT request_id) FROM events") ads) in $(printf '%.0f' "$(echo "$(now) - $start" | bc -l)") s"
if [ -n "$baseline" ]; then
  psql "$cluster/postgres" -qc "CREATE DATABASE candidate TEMPLATE base"
  DATABASE_URL="$cluster/candidate" "$bin" migrate >/dev/null 2>&1
fi

# (2) The floor: PostgreSQL reading every projected column of the log once, nothing written.
start=$(now)
psql "$DATABASE_URL" -qc "\\copy (SELECT request_id, id, type, corrected_at, ad_unit, format_id, asset_key, source, adapter, eea, reservation, test FROM events) TO '/dev/null' WITH (FORMAT binary)"
floor=$(echo "$(now) - $start" | bc -l)
say "(2) binary COPY of the log's projected columns to /dev/null: $(printf '%.1f' "$floor") s = $(printf '%.0f' "$(echo "$events / $floor" | bc -l)") events/s"

# (3) rebuild LABEL BINARY URL: sets rate.
rebuild() {
  local label=$1 binary=$2 url=$3 user sys ticks
  export DATABASE_URL=$url
  psql "$DATABASE_URL" -qc "CHECKPOINT"
  # CPU seconds of the rebuild's PostgreSQL backend, sampled from /proc while it runs.
  : >"$out/rebuild-pg-ticks.txt"
  ( while true; do
      pid=$(psql "$DATABASE_URL" -qAtc "SELECT pid FROM pg_stat_activity WHERE application_name = 'tracker' AND backend_type = 'client backend' LIMIT 1")
      [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] && awk '{print $14 + $15}' "/proc/$pid/stat" >"$out/rebuild-pg-ticks.txt"
      sleep 1
    done ) &
  sampler=$!
  start=$(now)
  /usr/bin/time -f "%U %S %M" -o "$out/rebuild-time.txt" "$binary" rebuild >"$out/rebuild-$label.txt" 2>&1
  seconds=$(echo "$(now) - $start" | bc -l)
  kill "$sampler"; wait "$sampler" 2>/dev/null || true
  read -r user sys rss <"$out/rebuild-time.txt"
  ticks=$(cat "$out/rebuild-pg-ticks.txt" 2>/dev/null || echo 0); ticks=${ticks:-0}
  rate=$(echo "$events / $seconds" | bc -l)
  sed "s/^/(3) $label: /" "$out/rebuild-$label.txt" | tee -a "$result"
  say "    $label: $(printf '%.0f' "$rate") events/s = $(printf '%.2f' "$(echo "$rate * $floor / $events" | bc -l)") x the COPY floor; CPU: tracker $(echo "$user + $sys" | bc) s (peak RSS $((rss / 1024)) MiB), its backend $(printf '%.1f' "$(echo "$ticks / $bench_tick" | bc -l)") s (at least; sampled each second); load $(cut -d' ' -f1-3 /proc/loadavg)"
  say "    $label projections: $(psql "$DATABASE_URL" -qAtc "SELECT (SELECT count(*) FROM format_day) || ' format_day, ' || (SELECT count(*) FROM asset_day) || ' asset_day, ' || (SELECT count(*) FROM source_day) || ' source_day rows; per-ad state ' || pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'public' AND c.relkind = 'r' AND c.relname IN ('ad_events', 'ad_state')")"
}
if [ -n "$baseline" ]; then
  rebuild baseline "$baseline" "$cluster/base"
  b_rate=$rate
  psql "$cluster/base" -qAtc "SELECT day, ad_unit, format_id, traffic_class, impressions, duplicate_impressions, clicks, attributed_clicks FROM format_day ORDER BY 1, 2, 3, 4" >"$out/rebuild-base-format.txt"
  rebuild candidate "$bin" "$cluster/candidate"
  psql "$cluster/candidate" -qAtc "SELECT day, ad_unit, format_id, traffic_class, impressions, duplicate_impressions, clicks, attributed_clicks FROM format_day ORDER BY 1, 2, 3, 4" >"$out/rebuild-candidate-format.txt"
  same=$(cmp -s "$out/rebuild-base-format.txt" "$out/rebuild-candidate-format.txt" && echo "the same format_day rows" || echo "DIFFERENT format_day rows")
  say "    candidate / baseline: $(printf '%.2f' "$(echo "$rate / $b_rate" | bc -l)") x events/s; both rebuilt $same"
else
  rebuild rebuild "$bin" "$DATABASE_URL"
fi
