# Sourced by the benchmark scripts (not run alone): bench_setup DATABASE builds the release
# tracker and starts a private PostgreSQL cluster with one migrated database, removed again
# when the script exits (BENCH_BIN=path uses that tracker binary instead of building). It sets
# bin, dir, port and DATABASE_URL; a script that starts the
# server stores its pid in server_pid so the cleanup stops it.
bench_setup() {
  local database=$1
  scripts/setup.sh
  . scripts/lib/packages.sh
  # wrk drives HTTP load, bc does the arithmetic, time and procps measure CPU, git names
  # the commit in the results.
  need_packages wrk bc time procps git
  # BENCH_BIN runs another build (an older commit's, for a baseline in the same session).
  if [ -n "${BENCH_BIN:-}" ]; then
    bin=$BENCH_BIN
  else
    swift build -c release --product tracker >/dev/null
    bin="$(swift build -c release --show-bin-path)/tracker"
  fi
  dir=$(mktemp -d /tmp/tracker-bench-pg.XXXXXX); chmod 755 "$dir"
  port=$((20000 + RANDOM % 20000))
  server_pid=""
  trap bench_cleanup EXIT
  scripts/pg.sh start "$dir" "$port"
  psql "postgresql://postgres@127.0.0.1:$port/postgres" -qc "CREATE DATABASE $database"
  export DATABASE_URL="postgresql://postgres@127.0.0.1:$port/$database"
  "$bin" migrate >/dev/null 2>&1
  # BENCH_IVT=on: a GIVT rule set the size of a real one (2 000 patterns, 10 000 ranges) is in
  # force from the first event, to compare with the same run without it.
  if [ "${BENCH_IVT:-off}" = on ]; then
    python3 scripts/bench/ivt-rule-set.py "$dir/ivt-rules.json"
    "$bin" ivt activate "$dir/ivt-rules.json" | head -1
  fi
}

# Runs from an EXIT trap under set -e: a failing command here would end it before the
# cluster is stopped (a kill of a server that already exited fails), hence the || true.
bench_cleanup() {
  { [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null; } || true
  scripts/pg.sh stop "$dir" "$port"
  rm -rf "$dir"
}

# setup_bench_venv: the venv .local/bench-venv with scripts/bench/requirements.txt (DuckDB from
# PyPI, what bench-report compares the reports with), again when that file changes; sets
# bench_python.
setup_bench_venv() {
  ensure_venv .local/bench-venv scripts/bench/requirements.txt
  bench_python=.local/bench-venv/bin/python
}

# The projection lag of /readyz: lag_pairs FILE prints "events seconds" for each sampled
# "projectionLag":{...} line of FILE; readyz_behind PORT prints the events behind now. The
# object's keys come in any order (a JSON object has none; the server's differs by process).
lag_pairs() {
  awk 'match($0, /"events":[0-9]+/) { e = substr($0, RSTART + 9, RLENGTH - 9) }
       match($0, /"seconds":[0-9.e+-]+/) { print e, substr($0, RSTART + 10, RLENGTH - 10) }' "$1"
}
readyz_behind() {
  curl -s "http://127.0.0.1:$1/readyz" | grep -o '"projectionLag":{[^}]*}' | grep -oE '"events":[0-9]+' | cut -d: -f2
}
