#!/usr/bin/env bash
# Usage: scripts/bench/citus-distribute.sh [EVENTS]
# The pause a distribution in place needs (figures go to docs/SCALING.md, "Citus"): a
# single-node tracker database holding EVENTS (1 000 000) synthetic events and their
# projections, on a coordinator with the citus extension and two workers (all three on this
# machine's cores), is distributed by `tracker migrate` while a tracker serves it: appends in
# batches of 100 from 4 connections, the projector running. It prints each step's wall time as
# `tracker migrate` reports it, the appends' answers during the command (wrk counts every
# answer other than 2xx; the server logs why it refused each, a lock timeout answered 503), their
# latency (a stalled append waits up to 300 s), and the largest projector lag /readyz reported meanwhile (the
# `layout` step holds the projector's lock, so the projector's pause is that step's time).
# Needs the citus extension for PostgreSQL 15 (see scripts/test-citus.sh) and wrk.
set -euo pipefail
cd "$(dirname "$0")/../.."
events=${1:-1000000}
pkglibdir=$(/usr/lib/postgresql/15/bin/pg_config --pkglibdir 2>/dev/null || echo /usr/lib/postgresql/15/lib)
[ -f "$pkglibdir/citus.so" ] || { echo "citus-distribute needs the citus extension for PostgreSQL 15; see scripts/test-citus.sh for how to install it" >&2; exit 1; }
scripts/setup.sh
. scripts/lib/packages.sh
# wrk drives the appends, bc the arithmetic, curl reads /readyz, util-linux gives pg.sh its runuser.
need_packages wrk bc git procps curl util-linux
if [ -n "${BENCH_BIN:-}" ]; then
  bin=$BENCH_BIN
else
  swift build -c release --product tracker >/dev/null
  bin="$(swift build -c release --show-bin-path)/tracker"
fi
out=bench-results; mkdir -p "$out"; report="$out/citus-distribute.txt"; : >"$report"
say() { echo "$*" | tee -a "$report"; }
now() { date +%s.%N; }

# The settings a distribution in place needs on every node (docs/OPERATIONS.md, "On Citus"),
# and room for the copy's connections: with 1 000, tracker migrate copies 16 partitions at once,
# a connection per shard each (fewer at once on workers with fewer connections free).
conf=$'shared_preload_libraries = \'citus\'\nmax_connections = 1000\nmax_prepared_transactions = 1000\nwal_level = logical
output_plugin_libraries = \'pgoutput, test_decoding, citus\'\nmax_worker_processes = 32
max_replication_slots = 16\nmax_wal_senders = 16'
ports=(); dirs=(); server_pid=""; wrk_pid=""; watch_pid=""
cleanup() {
  local i
  for p in "$wrk_pid" "$watch_pid" "$server_pid"; do { [ -n "$p" ] && kill "$p" 2>/dev/null; } || true; done
  for i in "${!dirs[@]}"; do scripts/pg.sh stop "${dirs[$i]}" "${ports[$i]}" || true; rm -rf "${dirs[$i]}"; done
}
trap cleanup EXIT
for node in coordinator worker1 worker2; do
  d=$(mktemp -d "/tmp/tracker-bench-distribute-$node.XXXXXX"); chmod 755 "$d"
  p=$((20000 + RANDOM % 20000))
  PG_EXTRA_CONF=$conf scripts/pg.sh start "$d" "$p"
  dirs+=("$d"); ports+=("$p")
  psql "postgresql://postgres@127.0.0.1:$p/postgres" -qc "CREATE DATABASE bench"
  psql "postgresql://postgres@127.0.0.1:$p/bench" -qc "CREATE EXTENSION citus"
done
url="postgresql://postgres@127.0.0.1:${ports[0]}/bench"
psql "$url" -qAtc "SELECT citus_set_coordinator_host('127.0.0.1', ${ports[0]})" >/dev/null
# No worker yet: the log stays in one table on the coordinator, as a single node holds it.
DATABASE_URL=$url "$bin" migrate >/dev/null
say "citus distribution in place: $(nproc) cores, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources sql || echo "+changes")${BENCH_BIN:+ (binary $BENCH_BIN)}; Citus $(psql "$url" -qAtc "SELECT extversion FROM pg_extension WHERE extname = 'citus'")"

start=$(now)
psql "$url" -qAtc "SELECT tracker_ensure_event_partitions((now() AT TIME ZONE 'UTC')::date - 31, (now() AT TIME ZONE 'UTC')::date + 7)" >/dev/null
for chunk in $(seq 0 $(( (events - 1) / 1000000 ))); do
  psql "$url" -q -v n="$events" -v chunk="$chunk" -v first_ad=100000000 -f scripts/bench/load-events.sql
done
psql "$url" -qc "INSERT INTO event_ids SELECT id FROM events WHERE key_name = 'bench'" -c "VACUUM ANALYZE events" -c "VACUUM ANALYZE event_ids"
DATABASE_URL=$url "$bin" rebuild >/dev/null 2>&1
psql "$url" -qc "CHECKPOINT"
say "single node: $(psql "$url" -qAtc "SELECT count(*) FROM events") events loaded and projected in $(printf '%.0f' "$(echo "$(now) - $start" | bc -l)") s; ad_state $(psql "$url" -qAtc "SELECT count(*) FROM ad_state") rows"

key=$(DATABASE_URL=$url "$bin" keys create --name bench-distribute --scope ingest | tail -n 1)
http=$((40000 + RANDOM % 20000))
env DATABASE_URL="$url" TRACKER_LOG_LEVEL=warning "$bin" serve --port "$http" >"$out/citus-distribute-server.log" 2>&1 &
server_pid=$!
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
for p in "${ports[@]:1}"; do psql "$url" -qAtc "SELECT citus_add_node('127.0.0.1', $p)" >/dev/null; done

# The projector's lag as /readyz reports it, sampled every 0.2 s while the command runs.
( while :; do
    echo "$(now) $(curl -s "http://127.0.0.1:$http/readyz" | tr -d '\n' | sed -n 's/.*"projectionLag" *: *{[^}]*"events" *: *\([0-9]*\).*/\1/p')"
    sleep 0.2
  done ) >"$out/citus-distribute-lag.txt" 2>/dev/null &
watch_pid=$!
wrk -t1 -c4 -d3600s --timeout 300s --latency -s scripts/bench/events.lua "http://127.0.0.1:$http" -- "$key" 100 1 >"$out/citus-distribute-wrk.txt" 2>&1 &
wrk_pid=$!
sleep 5
before=$(psql "$url" -qAtc "SELECT count(*) FROM events")
start=$(now)
status=0
: >"$out/citus-distribute-migrate.txt"
DATABASE_URL=$url TRACKER_LOG_LEVEL=warning "$bin" migrate >"$out/citus-distribute-migrate.txt" 2>&1 &
migrate_pid=$!
tail -f --pid="$migrate_pid" "$out/citus-distribute-migrate.txt" | while read -r line; do
  say "    $(printf '%6.1f' "$(echo "$(now) - $start" | bc -l)") s  $line"
done
wait "$migrate_pid" || status=$?
end=$(now)
if [ "$status" -ne 0 ]; then
  for i in "${!dirs[@]}"; do echo "--- node on ${ports[$i]}, its first errors:"; grep -E 'ERROR|FATAL|PANIC' "${dirs[$i]}/server.log" | grep -v 'canceling statement' | head -8 | cut -c1-400; done >&2
  exit "$status"
fi
sleep 5
kill -INT "$wrk_pid"; wait "$wrk_pid" || true; wrk_pid=""
kill "$watch_pid"; wait "$watch_pid" 2>/dev/null || true; watch_pid=""
say "tracker migrate over $before events: $(printf '%.1f' "$(echo "$end - $start" | bc -l)") s, appends going on (4 connections, batches of 100, from 5 s before to 5 s after)"
say "    appends: $(grep -E 'requests in' "$out/citus-distribute-wrk.txt" | sed 's/^ *//'); latency $(awk '/^ +Latency +[0-9]/{print "mean " $2 ", max " $4} / 99%/{print "p99 " $2}' "$out/citus-distribute-wrk.txt" | paste -sd' ' -); $(grep -E 'Non-2xx|Socket errors' "$out/citus-distribute-wrk.txt" | sed 's/^ *//' | paste -sd';' - || true)"
say "    failed appends in the server's log, by SQLSTATE: $(grep -o 'event append failed.*SQLSTATE [0-9A-Z]*' "$out/citus-distribute-server.log" | grep -o 'SQLSTATE [0-9A-Z]*' | sort | uniq -c | paste -sd',' - || echo none)"
grep -qE 'Non-2xx' "$out/citus-distribute-wrk.txt" || say "    appends: every answer 2xx"
say "    projector lag (/readyz, every 0.2 s during the command): $(awk -v s="$start" -v e="$end" '$1 >= s && $1 <= e && $2 != "" { n++; if ($2 > m) { m = $2; t = $1 - s } } END { printf "max %d events at %.1f s, %d samples", m, t, n }' "$out/citus-distribute-lag.txt")"
say "    shards: $(psql "$url" -qAtc "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'events'::regclass") of events; log now $(psql "$url" -qAtc "SELECT count(*) FROM events") events"
