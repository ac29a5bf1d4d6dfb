#!/usr/bin/env bash
# Usage: scripts/bench-profile.sh [SECONDS]
# Where a request's CPU time goes in `tracker serve`, against the bare SwiftNIO server
# (docs/PERFORMANCE.md, "Single events against the HTTP floor"). The tracker runs as users run
# it (release build, metrics on, logs at info, the projector inside); every load is `make bench-ingest`'s
# single-event wrk command (-t2 -c32) for SECONDS (10 by default), each on one path:
#   bare      the bare SwiftNIO server (Sources/TrackerHTTPFloor), the single-event POST
#   healthz   GET /healthz, answered on the event loop by QuickAnswers: no task, no route
#   routed    GET /healthz/ (QuickAnswers leaves it to the router): Hummingbird's connection
#             task, the router, the middleware and a route that only answers
#   rejected  POST /v1/events of one invalid event: the key, the body, decoding, validation
#             and the receipt, nothing appended
#   single    POST /v1/events of one valid event (scripts/bench/events.lua): the append and
#             its commit too
#   single-c128  the same with 128 connections: whether 32 connections leave the cores idle
#             while requests wait for their commit
#   batch     POST /v1/events of 100 events from 16 connections, bench-ingest's (b), not run
#             unless named in PROFILE_LOADS: its figures are per request, so per 100 events
# Pass 1 runs each load alone: requests/s; CPU µs per request of the server by thread (event
# loops, Swift's concurrency pool, the database threads) and of PostgreSQL; context switches
# and syscalls per request (perf stat, /proc). Pass 2 runs each load under `perf record -g`
# (scripts/bench/perf-parts.py: CPU by part and by piece of the request path, in µs per
# request) and pass 3 under `perf trace -s` (syscalls per request by name). Everything goes
# to bench-results/profile/; the summary also to bench-results/profile/summary.txt.
# PROFILE_LOADS="healthz single" runs only those loads. Installs linux-perf, python3, nginx and wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10}
loads=${PROFILE_LOADS:-bare healthz routed rejected single single-c128}
. scripts/bench/common.sh
bench_setup profile
. scripts/bench/measure.sh
. scripts/bench/floor.sh
floor_prepare
# perf reads other processes' counters and traces their syscalls (as root).
need_packages linux-perf python3
require_commands perf=linux-perf python3=python3
out=bench-results/profile; mkdir -p "$out"
summary="$out/summary.txt"
perf_pid=""
trap '{ [ -n "$perf_pid" ] && kill -INT "$perf_pid" 2>/dev/null; } || true; floor_cleanup; bench_cleanup' EXIT

key=$("$bin" keys create --name bench --scope ingest | tail -n 1)
http=$(free_port)
TRACKER_LOG_LEVEL=info "$bin" serve --port "$http" >"$out/server.log" 2>&1 &
server_pid=$!
wait_listening "$http"
bare_port=$(free_port)
start_bare "$bare_port"; wait_listening "$bare_port"
echo "profile: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources || echo "+changes")${BENCH_BIN:+ (binary $BENCH_BIN)}, ${duration} s a load, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$summary"

# The server and the wrk command of a load (its output goes to $out/wrk-LOAD-PASS.txt).
invalid='{"events":[{"id":"0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11","type":"not_a_type","requestId":"r1","adUnit":"/1234/home/native","formatId":"10063170","occurredAt":"2025-01-01T00:00:00.000Z"}]}'
pid_of() { if [ "$1" = bare ]; then echo "$bare_pid"; else echo "$server_pid"; fi; }
run_load() {
  local load=$1 pass=$2 url="http://127.0.0.1:$http" connections=32
  case "$load" in
    bare) url="http://127.0.0.1:$bare_port"; set -- -s scripts/bench/events.lua "$url" -- "$key" 1 2 ;;
    healthz) set -- -s scripts/bench/fixed.lua "$url" -- GET /healthz ;;
    routed) set -- -s scripts/bench/fixed.lua "$url" -- GET /healthz/ ;;
    rejected) set -- -s scripts/bench/fixed.lua "$url" -- POST /v1/events "$key" "$invalid" ;;
    single) set -- -s scripts/bench/events.lua "$url" -- "$key" 1 2 ;;
    single-c128) connections=128; set -- -s scripts/bench/events.lua "$url" -- "$key" 1 2 ;;
    batch) connections=16; set -- -s scripts/bench/events.lua "$url" -- "$key" 100 2 ;;
    *) echo "unknown load '$load' (PROFILE_LOADS)" >&2; exit 2 ;;
  esac
  wrk -t2 -c"$connections" -d"${duration}s" --latency "$@" >"$out/wrk-$load-$pass.txt"
  if ! grep -q "non-2xx responses: 0," "$out/wrk-$load-$pass.txt"; then
    echo "$load: some answers were not 2xx:" >&2; tail -1 "$out/wrk-$load-$pass.txt" >&2; exit 1
  fi
}

# Per thread class: CPU ticks and context switches (voluntary and not) of every thread of PID.
threads() {
  local task
  for task in /proc/"$1"/task/*; do
    printf '%s\t%s\t%s\n' "$(cat "$task/comm" 2>/dev/null)" "$(awk '{print $14 + $15}' "$task/stat" 2>/dev/null)" \
      "$(awk '/ctxt_switches/ {s += $2} END {print s + 0}' "$task/status" 2>/dev/null)"
  done | awk -F'\t' '$2 != "" {
      c = $1 ~ /^NIO-/ ? "loops" : $1 ~ /qos/ ? "pool" : $1 ~ /^TP-/ ? "db" : "other"
      t[c] += $2; s[c] += $3 }
    END { printf "%d %d %d %d %d\n", t["loops"], t["pool"], t["db"], t["other"], s["loops"] + s["pool"] + s["db"] + s["other"] }'
}


echo "pass 1: requests/s; CPU µs per request (server: event loops + Swift pool + database threads + other; PostgreSQL); context switches and syscalls per request" | tee -a "$summary"
declare -A us_per_request
tick=$(getconf CLK_TCK)
# µs per request of the ticks from $1 to $2.
us() { echo "($2 - $1) * 1000000 / $tick / $requests" | bc -l; }
for load in $loads; do
  pid=$(pid_of "$load")
  # A short warm-up: the pools' threads exist and the key table is loaded before counting.
  duration=2 run_load "$load" warmup
  read -r l0 p0 d0 o0 s0 < <(threads "$pid"); cpu0=$(proc_cpu "$pid"); pg0=$(pg_cpu); read -r n0 r0 t0 < <(commit_stats "http://127.0.0.1:$http")
  perf stat -e raw_syscalls:sys_enter,context-switches -x, -p "$pid" -o "$out/stat-$load.txt" &
  perf_pid=$!
  run_load "$load" measure
  kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; perf_pid=""
  read -r l1 p1 d1 o1 s1 < <(threads "$pid"); cpu1=$(proc_cpu "$pid"); pg1=$(pg_cpu); read -r n1 r1 t1 < <(commit_stats "http://127.0.0.1:$http")
  requests=$(wrk_requests "$out/wrk-$load-measure.txt")
  [ "$requests" -gt 0 ] || { echo "$load: no request was answered in ${duration} s" >&2; exit 1; }
  syscalls=$(awk -F, '/raw_syscalls:sys_enter/ {print $1}' "$out/stat-$load.txt")
  us_per_request[$load]=$(echo "($cpu1 - $cpu0) * 1000000 / $requests" | bc -l)
  printf '%-12s %8.0f requests/s  server %5.1f µs (%.1f + %.1f + %.1f + %.1f)  PostgreSQL %5.1f µs  %.2f context switches  %.1f syscalls  (%s)\n' \
    "$load" "$(awk '/Requests\/sec/ {print $2}' "$out/wrk-$load-measure.txt")" "${us_per_request[$load]}" \
    "$(us "$l0" "$l1")" "$(us "$p0" "$p1")" "$(us "$d0" "$d1")" "$(us "$o0" "$o1")" \
    "$(echo "($pg1 - $pg0) * 1000000 / $requests" | bc -l)" "$(echo "($s1 - $s0) / $requests" | bc -l)" \
    "$(echo "$syscalls / $requests" | bc -l)" "$(awk '$1=="50%" {print "p50 " $2}' "$out/wrk-$load-measure.txt")" | tee -a "$summary"
  if [ "$n1" -gt "$n0" ]; then
    printf '%-12s %d commits, %.1f requests each, %.2f ms each (the write and its WAL flush)\n' "" "$((n1 - n0))" \
      "$(echo "($r1 - $r0) / ($n1 - $n0)" | bc -l)" "$(echo "($t1 - $t0) * 1000 / ($n1 - $n0)" | bc -l)" | tee -a "$summary"
  fi
done

for load in $loads; do
  pid=$(pid_of "$load")
  perf record -F 999 -g -p "$pid" -o "$out/perf-$load.data" 2>/dev/null &
  perf_pid=$!
  run_load "$load" perf
  kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; perf_pid=""
  perf script -i "$out/perf-$load.data" 2>/dev/null >"$out/perf-$load.script"
  { echo; echo "pass 2, $load under perf record -g:"
    python3 scripts/bench/perf-parts.py samples "$out/perf-$load.script" "${us_per_request[$load]}"
  } | tee -a "$summary"
  rm -f "$out/perf-$load.script"

  perf trace -s -p "$pid" -o "$out/trace-$load.txt" 2>/dev/null &
  perf_pid=$!
  run_load "$load" trace
  kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; perf_pid=""
  { echo; echo "pass 3, $load under perf trace -s:"
    python3 scripts/bench/perf-parts.py syscalls "$out/trace-$load.txt" "$(wrk_requests "$out/wrk-$load-trace.txt")"
  } | tee -a "$summary"
done
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$summary"
