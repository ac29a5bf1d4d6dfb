#!/usr/bin/env bash
# Usage: scripts/bench-citus.sh [DURATION_SECONDS] [REPORT_EVENTS]
# The cost of distribution, measured in one run on this machine (figures go to docs/SCALING.md,
# "Citus"): the same work on a single-node database and on a Citus coordinator with two workers,
# all three servers on this machine's cores. It is not a scale figure: the workers share the
# cores the single node has alone, so it prices what distribution adds per event (two-phase
# commits, routing, a round trip per worker), not what more machines give.
#  (1) ingest: batches of 100 from 16 connections for DURATION_SECONDS (20), events/s;
#  (2) projection: the projector alone (tracker project --once) over what (1) logged, events/s;
#  (2b) on Citus, one projector against two projectors of groups of shards at once (tracker
#      project --once, and --once --group 1/2 beside --group 2/2, then a pass of the whole log
#      for what the last group's step left in the other's inbox), each over a window of the same
#      ingest with the ad funnel's events (DURATION_SECONDS each), alternating GROUP_ROUNDS (2)
#      times: events/s and their ratio;
#  (3) REPORT_EVENTS (10 000 000) synthetic events loaded into each log: tracker rebuild's rate,
#      then each report over 30 days over HTTP, p50 of 21 calls.
# Needs the citus extension for PostgreSQL 15 (see scripts/test-citus.sh) and wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-20}
events=${2:-10000000}
pkglibdir=$(/usr/lib/postgresql/15/bin/pg_config --pkglibdir 2>/dev/null || echo /usr/lib/postgresql/15/lib)
[ -f "$pkglibdir/citus.so" ] || { echo "bench-citus needs the citus extension for PostgreSQL 15; see scripts/test-citus.sh for how to install it" >&2; exit 1; }
. scripts/bench/common.sh
bench_setup bench
single=$DATABASE_URL
out=bench-results; mkdir -p "$out"; report="$out/citus.txt"; : >"$report"
say() { echo "$*" | tee -a "$report"; }
now() { date +%s.%N; }

# The Citus cluster: a coordinator and two workers, each its own PostgreSQL on loopback.
citus_ports=()
citus_dirs=()
stop_citus() {
  local i
  for i in "${!citus_dirs[@]}"; do scripts/pg.sh stop "${citus_dirs[$i]}" "${citus_ports[$i]}" || true; rm -rf "${citus_dirs[$i]}"; done
}
trap '{ [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null; } || true; stop_citus; bench_cleanup' EXIT
for node in coordinator worker1 worker2; do
  d=$(mktemp -d "/tmp/tracker-bench-citus-$node.XXXXXX"); chmod 755 "$d"
  p=$((20000 + RANDOM % 20000))
  PG_EXTRA_CONF=$'shared_preload_libraries = \'citus\'\nmax_prepared_transactions = 200' scripts/pg.sh start "$d" "$p"
  citus_dirs+=("$d"); citus_ports+=("$p")
done
for p in "${citus_ports[@]}"; do
  psql "postgresql://postgres@127.0.0.1:$p/postgres" -qc "CREATE DATABASE bench"
  psql "postgresql://postgres@127.0.0.1:$p/bench" -qc "CREATE EXTENSION citus"
done
citus="postgresql://postgres@127.0.0.1:${citus_ports[0]}/bench"
psql "$citus" -qAtc "SELECT citus_set_coordinator_host('127.0.0.1', ${citus_ports[0]})" >/dev/null
psql "$citus" -qAtc "SELECT citus_add_node('127.0.0.1', ${citus_ports[1]})" -qAtc "SELECT citus_add_node('127.0.0.1', ${citus_ports[2]})" >/dev/null
DATABASE_URL=$citus "$bin" migrate | tail -1
say "citus benchmark: $(nproc) cores, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources sql || echo "+changes")${BENCH_BIN:+ (binary $BENCH_BIN)}; Citus $(psql "$citus" -qAtc "SELECT extversion FROM pg_extension WHERE extname = 'citus'"), $(psql "$citus" -qAtc "SELECT count(*) FROM log_shards") shards on 2 workers"

http=$((40000 + RANDOM % 20000))
serve() {  # serve DATABASE_URL [env...]: the tracker on $http, its pid in server_pid
  local url=$1; shift
  env DATABASE_URL="$url" TRACKER_LOG_LEVEL=warning "$@" "$bin" serve --port "$http" >"$out/citus-server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
}
stop_server() { kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""; }
count() { psql "$1" -qAtc "SELECT count(*) FROM events"; }

declare -A ingest project rebuild
for side in single citus; do
  url=$single; [ "$side" = citus ] && url=$citus
  key=$(DATABASE_URL=$url "$bin" keys create --name "bench-$side" --scope ingest | tail -n 1)
  # (1) Ingest alone: the projector is off, so (2) can time it on its own.
  serve "$url" TRACKER_PROJECTOR=off
  before=$(count "$url"); start=$(now)
  wrk -t2 -c16 -d"${duration}s" -s scripts/bench/events.lua "http://127.0.0.1:$http" -- "$key" 100 1 >"$out/citus-wrk-$side.txt"
  end=$(now); after=$(count "$url")
  stop_server
  ingest[$side]=$(echo "($after - $before) / ($end - $start)" | bc -l)
  say "(1) $side: batches of 100, 16 connections: $((after - before)) events in $(printf '%.1f' "$(echo "$end - $start" | bc -l)") s = $(printf '%.0f' "${ingest[$side]}") events/s"
  # (2) The projector alone over what (1) logged.
  start=$(now)
  DATABASE_URL=$url "$bin" project --once >/dev/null
  end=$(now)
  project[$side]=$(echo "($after - $before) / ($end - $start)" | bc -l)
  say "(2) $side: tracker project --once over $((after - before)) events: $(printf '%.1f' "$(echo "$end - $start" | bc -l)") s = $(printf '%.0f' "${project[$side]}") events/s"
done
say "    Citus / single node: ingest $(printf '%.2f' "$(echo "${ingest[citus]} / ${ingest[single]}" | bc -l)") x, projection $(printf '%.2f' "$(echo "${project[citus]} / ${project[single]}" | bc -l)") x"

# (2b) One projector against two at once, over windows of the same ingest, alternating; how
# busy the machine's cores were meanwhile says what they leave a second projector.
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }  # busy idle
cpu_busy() {  # cpu_busy "BUSY IDLE" "BUSY IDLE": the busy share between the two, in %
  local b0 i0 b1 i1; read -r b0 i0 <<<"$1"; read -r b1 i1 <<<"$2"
  echo $(( 100 * (b1 - b0) / (b1 - b0 + i1 - i0) ))
}
gkey=$(DATABASE_URL=$citus "$bin" keys create --name bench-groups --scope ingest | tail -n 1)
declare -a one_rates two_rates
for round in $(seq "${GROUP_ROUNDS:-2}"); do
  for projectors in 1 2; do
    serve "$citus" TRACKER_PROJECTOR=off
    before=$(count "$citus")
    wrk -t2 -c16 -d"${duration}s" -s scripts/bench/events.lua "http://127.0.0.1:$http" -- "$gkey" 100 $((round * 10 + projectors)) 1 >"$out/citus-wrk-groups.txt"
    after=$(count "$citus")
    stop_server
    start=$(now); cpu_before=$(cpu_ticks)
    if [ "$projectors" = 1 ]; then
      DATABASE_URL=$citus "$bin" project --once >/dev/null
    else
      DATABASE_URL=$citus "$bin" project --once --group 1/2 >/dev/null & g1=$!
      DATABASE_URL=$citus "$bin" project --once --group 2/2 >/dev/null & g2=$!
      wait "$g1" "$g2"
      DATABASE_URL=$citus "$bin" project --once >/dev/null
    fi
    end=$(now); busy=$(cpu_busy "$cpu_before" "$(cpu_ticks)")
    rate=$(echo "($after - $before) / ($end - $start)" | bc -l)
    if [ "$projectors" = 1 ]; then one_rates+=("$rate"); else two_rates+=("$rate"); fi
    say "(2b) round $round, $projectors projector(s): $((after - before)) events with the funnel's in $(printf '%.1f' "$(echo "$end - $start" | bc -l)") s = $(printf '%.0f' "$rate") events/s, the cores ${busy} % busy; inbox left $(psql "$citus" -qAtc "SELECT count(*) FROM projection_inbox")"
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }
say "    two projectors / one: $(printf '%.2f' "$(echo "$(median "${two_rates[@]}") / $(median "${one_rates[@]}")" | bc -l)") x (medians of ${GROUP_ROUNDS:-2} rounds; all three servers and both projectors on these $(nproc) cores)"

# (3) A large log in both: rebuild rate and report p50.
for side in single citus; do
  url=$single; [ "$side" = citus ] && url=$citus
  start=$(now)
  psql "$url" -qAtc "SELECT tracker_ensure_event_partitions((now() AT TIME ZONE 'UTC')::date - 31, (now() AT TIME ZONE 'UTC')::date + 7)" >/dev/null
  for chunk in $(seq 0 $(( (events - 1) / 1000000 ))); do
    psql "$url" -q -v n="$events" -v chunk="$chunk" -v first_ad=100000000 -f scripts/bench/load-events.sql
  done
  psql "$url" -qc "INSERT INTO event_ids SELECT id FROM events WHERE key_name = 'bench'" -c "VACUUM ANALYZE events" -c "VACUUM ANALYZE event_ids" -c "CHECKPOINT"
  say "(3) $side: loaded $events events in $(printf '%.0f' "$(echo "$(now) - $start" | bc -l)") s; log now $(count "$url") events"
  start=$(now)
  DATABASE_URL=$url "$bin" rebuild >"$out/citus-rebuild-$side.txt" 2>&1
  end=$(now)
  total=$(count "$url")
  rebuild[$side]=$(echo "$total / ($end - $start)" | bc -l)
  say "    $side: tracker rebuild of $total events: $(printf '%.1f' "$(echo "$end - $start" | bc -l)") s = $(printf '%.0f' "${rebuild[$side]}") events/s"
  rkey=$(DATABASE_URL=$url "$bin" keys create --name "bench-report-$side" --scope report | tail -n 1)
  serve "$url"
  today=$(date -u +%F); from=$(date -u -d "$today - 30 days" +%F); to=$(date -u -d "$today - 1 day" +%F)
  for r in summary assets sources adchoices; do
    ms=$(for _ in $(seq 21); do
           curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $rkey" "http://127.0.0.1:$http/v1/reports/$r?from=$from&to=$to"
         done | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)] * 1000}')
    say "    $side: $r over 30 days: p50 $ms ms"
  done
  stop_server
done
say "    Citus / single node: rebuild $(printf '%.2f' "$(echo "${rebuild[citus]} / ${rebuild[single]}" | bc -l)") x"
