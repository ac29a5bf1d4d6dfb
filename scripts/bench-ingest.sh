#!/usr/bin/env bash
# Usage: scripts/bench-ingest.sh [DURATION_SECONDS]
# Ingest benchmark, all in one run on this machine (figures go to docs/PERFORMANCE.md):
#  (a) psql \copy of the same mix of events into a table shaped like the log (a1) and into a
#      plain table with only a primary key (a2): the baselines;
#  (b) the tracker's accepted events/s, batches of 100 events from 16 connections;
#  (c) single-event requests/s from 32 connections, with p50/p99 latency and the group commits'
#      time, which bounds them (32 connections over the time of one commit);
#  (d) the server's peak RSS;
#  (e) nginx answering the same single-event requests with 200 and an access-log line, and
#  (f) a bare SwiftNIO HTTP/1.1 server (Sources/TrackerHTTPFloor) answering them with 200, both
#      under the same wrk command as (c), once the tracker has stopped: the HTTP floor of these
#      cores, with the ratios of (c) to each and every server's CPU time per request.
# With the projector in the server (the default), each phase also reports the projection lag a
# user would see (/readyz every 0.5 s: p50, p99, max) and how long the projector took to catch
# up after the load stopped; the next phase starts only once it has, so one phase's backlog is
# not charged to the next. BENCH_STATEMENTS=1 also prints each phase's statements
# (pg_stat_statements: time, buffers, WAL per 1 000 events).
# BENCH_ONLY=single runs (c) to (f) only, for a quick look at single events against the floor.
# BENCH_FUNNEL=on puts the ad funnel's events in every load (a bit over a third: ad_request,
# ad_failed, mediation_result, as scripts/bench/events.lua makes them); the copies of (a) keep
# the ads' events alone, so (b)'s ratios to them then compare two mixes.
# Starts its own PostgreSQL cluster and a release build of the tracker; installs wrk and nginx.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-20}
only=${BENCH_ONLY:-all}
case "$only" in all|single) ;; *) echo "BENCH_ONLY must be single (or unset for every phase), got '$only'" >&2; exit 2 ;; esac
case "${BENCH_FUNNEL:-off}" in on) funnel=1 ;; off) funnel=0 ;; *) echo "BENCH_FUNNEL must be on or off, got '$BENCH_FUNNEL'" >&2; exit 2 ;; esac
. scripts/bench/common.sh
bench_setup bench
. scripts/bench/measure.sh
. scripts/bench/floor.sh
floor_prepare
[ "${BENCH_STATEMENTS:-0}" = 1 ] && bench_enable_stat_statements
out=bench-results; mkdir -p "$out"
projector=${TRACKER_PROJECTOR:-on}
http=$(free_port)
key=$("$bin" keys create --name bench --scope ingest | tail -n 1)
count() { psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM events"; }

# (a) Baselines: \copy of the same mix of events (scripts/bench/plain-baseline.sql mirrors
# scripts/bench/events.lua) into (a1) a table shaped like the log (its defaults, the (tx, seq)
# order index, a unique id index standing in for event_ids) and (a2) a plain table of the same
# fields with only a primary key on id (no other index, no sequence, no trigger): what storing
# these events costs PostgreSQL at the least.
: >"$out/ingest.txt"
if [ "$only" = all ]; then
  rows=1000000
  psql "$DATABASE_URL" -q -v rows=$rows -f scripts/bench/plain-baseline.sql
  rows=$(psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM bench_source")
  cols="id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea, reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name, client_ip, user_agent_id"
  psql "$DATABASE_URL" -qc "\\copy (SELECT $cols FROM bench_source) TO '$dir/rows.csv' WITH (FORMAT csv)"
  psql "$DATABASE_URL" -q -c "CREATE TABLE bench_copy (LIKE events INCLUDING DEFAULTS)" -c "CREATE INDEX ON bench_copy (tx, seq)" \
    -c "CREATE UNIQUE INDEX ON bench_copy (id)" -c "CREATE TABLE bench_plain AS SELECT $cols FROM bench_source WITH NO DATA" \
    -c "ALTER TABLE bench_plain ADD PRIMARY KEY (id)"
  copy_into() {
    local start end
    start=$(date +%s.%N)
    psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -qc "\\copy $1 ($cols) FROM '$dir/rows.csv' WITH (FORMAT csv)" >&2 || return 1
    end=$(date +%s.%N)
    echo "$rows / ($end - $start)" | bc -l
  }
  copy_rate=$(copy_into bench_copy) || { echo "the \\copy into the log-shaped table failed" >&2; exit 1; }
  plain_rate=$(copy_into bench_plain) || { echo "the \\copy into the plain table failed" >&2; exit 1; }
  psql "$DATABASE_URL" -qc "DROP TABLE bench_copy; DROP TABLE bench_plain; DROP TABLE bench_source"
  printf '(a1) psql \\copy into a table shaped like the log: %d rows = %.0f rows/s\n' "$rows" "$copy_rate" | tee -a "$out/ingest.txt"
  printf '(a2) psql \\copy into a plain table (same fields, primary key on id only): %d rows = %.0f rows/s\n' "$rows" "$plain_rate" | tee -a "$out/ingest.txt"
fi

# TRACKER_PROJECTOR=off measures ingestion alone (the projector can run elsewhere: tracker project).
echo "server: TRACKER_PROJECTOR=$projector TRACKER_WRITERS=${TRACKER_WRITERS:-3} TRACKER_METRICS=${TRACKER_METRICS:-on} TRACKER_LOG_LEVEL=${TRACKER_LOG_LEVEL:-info}, BENCH_FUNNEL=${BENCH_FUNNEL:-off}, commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources tracker-client sql || echo "+changes")${BENCH_BIN:+ (binary $BENCH_BIN)}, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/ingest.txt"
# Default settings: metrics on, logs at info as JSON lines (TRACKER_METRICS=off to compare).
TRACKER_LOG_LEVEL=${TRACKER_LOG_LEVEL:-info} "$bin" serve --port "$http" >"$out/server.log" 2>&1 &
server_pid=$!
# Up to 60 s: on a busy shared machine the server took more than 10 s to listen.
for _ in $(seq 600); do curl -sf http://127.0.0.1:$http/healthz >/dev/null && break; sleep 0.1; done

# The projection lag a user would see (/readyz), sampled while a phase runs; after it, the
# seconds until the projector has caught up (at most 300 s).
lag_sampler=""
trap '{ [ -n "$lag_sampler" ] && kill "$lag_sampler" 2>/dev/null; } || true; floor_cleanup; bench_cleanup' EXIT
start_lag() {
  [ "$projector" = off ] && return 0
  : >"$out/lag-$1.txt"
  ( while true; do
      curl -s http://127.0.0.1:$http/readyz | grep -o '"projectionLag":{[^}]*}' >>"$out/lag-$1.txt" || true
      sleep 0.5
    done ) &
  lag_sampler=$!
}
finish_lag() {
  [ "$projector" = off ] && return 0
  kill "$lag_sampler"; wait "$lag_sampler" 2>/dev/null || true
  local began now behind=1
  began=$(date +%s.%N)
  for _ in $(seq 600); do
    behind=$(readyz_behind "$http")
    [ "$behind" = 0 ] && break
    sleep 0.5
  done
  now=$(date +%s.%N)
  lag_pairs "$out/lag-$1.txt" | sort -k2 -g |
    awk -v caught="$(printf '%.1f' "$(echo "$now - $began" | bc -l)")" -v behind="$behind" '
      {e[NR]=$1; s[NR]=$2; if ($1>me) me=$1}
      END {printf "    projection lag during the load: p50 %.2f s, p99 %.2f s, max %.2f s, max %d events behind (%d samples); caught up %s s after it%s\n",
                  s[int((NR+1)/2)], s[int(NR*0.99+0.5)], s[NR], me, NR, caught, (behind == "0" ? "" : " (NOT caught up: " behind " events behind)")}' |
    tee -a "$out/ingest.txt"
}
statements() {
  [ "${BENCH_STATEMENTS:-0}" = 1 ] && statement_report "$1" "$2" | tee -a "$out/ingest.txt"
  return 0
}
[ "${BENCH_STATEMENTS:-0}" = 1 ] && psql "$DATABASE_URL" -qAtc "SELECT pg_stat_statements_reset()" >/dev/null

# (b) Batches of 100 from 16 connections; accepted events counted in the database.
if [ "$only" = all ]; then
  before=$(count); start=$(date +%s.%N)
  start_lag batch
  wrk -t2 -c16 -d"${duration}s" --latency -s scripts/bench/events.lua http://127.0.0.1:$http -- "$key" 100 1 "$funnel" >"$out/wrk-batch.txt"
  end=$(date +%s.%N); after=$(count)
  batch_rate=$(echo "($after - $before) / ($end - $start)" | bc -l)
  printf '(b) batches of 100, 16 connections: %d events accepted in %.1f s = %.0f events/s (%.2f x the plain copy, %.2f x the log-shaped copy)\n' \
    "$((after - before))" "$(echo "$end - $start" | bc -l)" "$batch_rate" "$(echo "$batch_rate / $plain_rate" | bc -l)" \
    "$(echo "$batch_rate / $copy_rate" | bc -l)" | tee -a "$out/ingest.txt"
  grep -E "Requests/sec|non-2xx|50%|99%" "$out/wrk-batch.txt" | sed 's/^/    /' | tee -a "$out/ingest.txt"
  finish_lag batch
  statements "(b) and its catch-up" "$((after - before))"
fi

# (c) Single-event requests from 32 connections. (e) and (f) run the same command: single_load PORT NAME.
single_load() {
  wrk -t2 -c32 -d"${duration}s" --latency -s scripts/bench/events.lua "http://127.0.0.1:$1" -- "$key" 1 2 "$funnel" >"$out/wrk-$2.txt"
}
# The requests/s of a single_load, then its p50 and p99, and the line of its errors.
rate_of() { awk '/Requests\/sec/ {print $2}' "$out/wrk-$1.txt"; }
latency_of() { printf 'p50 %s, p99 %s' "$(awk '$1=="50%" {print $2}' "$out/wrk-$1.txt")" "$(awk '$1=="99%" {print $2}' "$out/wrk-$1.txt")"; }
errors_of() { grep -E "non-2xx" "$out/wrk-$1.txt" | sed 's/^/    /' | tee -a "$out/ingest.txt"; }
# CPU µs per request: CPU seconds before and after, and the wrk output's requests.
per_request() { echo "($2 - $1) * 1000000 / $(wrk_requests "$out/wrk-$3.txt")" | bc -l; }
before=$(count)
start_lag single
cpu0=$(proc_cpu "$server_pid"); pg0=$(pg_cpu); read -r n0 r0 t0 < <(commit_stats "http://127.0.0.1:$http")
single_load "$http" single
cpu1=$(proc_cpu "$server_pid"); pg1=$(pg_cpu); read -r n1 r1 t1 < <(commit_stats "http://127.0.0.1:$http")
rps=$(rate_of single)
printf '(c) single events, 32 connections: %s requests/s, %s; CPU per request: tracker %.0f µs, PostgreSQL %.0f µs\n' "$rps" "$(latency_of single)" \
  "$(per_request "$cpu0" "$cpu1" single)" "$(per_request "$pg0" "$pg1" single)" | tee -a "$out/ingest.txt"
# Each connection waits for its answer, which waits for a commit: 32 connections over the time
# of one commit (its write and WAL flush) bound the rate, however little CPU a request takes.
if [ "$n1" -gt "$n0" ]; then
  commit_ms=$(echo "($t1 - $t0) * 1000 / ($n1 - $n0)" | bc -l)
  printf '    %d commits, %.1f requests each, %.2f ms each: at most 32 / %.2f ms = %.0f requests/s while a commit takes that long\n' \
    "$((n1 - n0))" "$(echo "($r1 - $r0) / ($n1 - $n0)" | bc -l)" "$commit_ms" "$commit_ms" "$(echo "32000 / $commit_ms" | bc -l)" | tee -a "$out/ingest.txt"
fi
errors_of single
finish_lag single
statements "(c) and its catch-up" "$(($(count) - before))"

# (d) Peak RSS of the server over the whole run.
hwm=$(awk '/VmHWM/ {print $2}' /proc/$server_pid/status)
printf '(d) server peak RSS: %.1f MiB\n' "$(echo "$hwm / 1024" | bc -l)" | tee -a "$out/ingest.txt"
kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
echo "$(psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM events") events logged, $(psql "$DATABASE_URL" -qAtc "SELECT events_projected FROM projection_state") projected; load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/ingest.txt"

# (e) nginx and (f) the bare SwiftNIO server under (c)'s load, the tracker stopped (PostgreSQL idle).
# floor_run SERVER LABEL: starts SERVER (nginx or bare) on a free port, puts (c)'s load on it,
# prints LABEL with its rate, latency and CPU per request, and stops it; sets floor_rps.
floor_run() {
  local port pid cpu0 cpu1
  port=$(free_port)
  "start_$1" "$port"; wait_listening "$port"
  if [ "$1" = nginx ]; then pid=$nginx_pid; else pid=$bare_pid; fi
  cpu0=$(tree_cpu "$pid")
  single_load "$port" "$1"
  cpu1=$(tree_cpu "$pid")
  floor_rps=$(rate_of "$1")
  printf '%s: %s requests/s, %s; CPU per request %.0f µs\n' "$2" "$floor_rps" "$(latency_of "$1")" \
    "$(per_request "$cpu0" "$cpu1" "$1")" | tee -a "$out/ingest.txt"
  errors_of "$1"
  floor_cleanup
}
floor_run nginx '(e) nginx, the same requests answered 200 with an access-log line'
nginx_rps=$floor_rps
echo "    $(wc -l <"$dir/nginx/access.log") lines in nginx's access log" | tee -a "$out/ingest.txt"
floor_run bare '(f) bare SwiftNIO HTTP/1.1 server (NIOHTTP1, release), the same requests answered 200'
bare_rps=$floor_rps
printf 'single events / nginx: %.2f; single events / bare SwiftNIO: %.2f; load %s\n' "$(echo "$rps / $nginx_rps" | bc -l)" \
  "$(echo "$rps / $bare_rps" | bc -l)" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/ingest.txt"
