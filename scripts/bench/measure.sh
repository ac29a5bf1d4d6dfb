# Sourced by the benchmark scripts after scripts/bench/common.sh's bench_setup (not run alone):
# CPU time, WAL and per-statement figures, for saying where the time goes.
#
#   bench_enable_stat_statements   restarts the private cluster with pg_stat_statements loaded
#   proc_cpu PID                   CPU seconds (user + system) of one process
#   pg_cpu                         CPU seconds of the whole cluster (postmaster, live and reaped children)
#   wal_lsn                        the current WAL position
#   commit_stats URL               the tracker at URL's group commits so far: their number, the
#                                  requests they answered and their seconds (write and WAL flush)
#   statement_report LABEL EVENTS  the statements since the last reset: calls, time, rows, buffers
#                                  and WAL, each also per 1 000 events; then resets the counters

bench_tick=$(getconf CLK_TCK)

bench_enable_stat_statements() {
  psql "$DATABASE_URL" -qc "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" -c "ALTER SYSTEM SET track_io_timing = on"
  scripts/pg.sh stop "$dir" "$port"
  scripts/pg.sh start "$dir" "$port"
  psql "$DATABASE_URL" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
}

proc_cpu() { awk -v t="$bench_tick" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }

pg_cpu() {
  local master; master=$(head -1 "$dir/data/postmaster.pid")
  { awk '{print $14 + $15 + $16 + $17}' "/proc/$master/stat"
    for c in $(pgrep -P "$master"); do awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || true; done
  } | awk -v t="$bench_tick" '{s += $1} END {printf "%.2f", s / t}'
}

wal_lsn() { psql "$DATABASE_URL" -qAtc "SELECT pg_current_wal_lsn()"; }

commit_stats() {
  curl -s "$1/metrics" | awk '
    /^tracker_commit_requests_count/ {n = $2} /^tracker_commit_requests_sum/ {r = $2}
    /^tracker_commit_duration_seconds_sum/ {t = $2} END {printf "%d %d %f\n", n, r, t}'
}

statement_report() {
  local label=$1 events=$2
  echo "statements during $label (per 1 000 events: ms of execution, shared blocks hit/read/dirtied, WAL bytes):"
  psql "$DATABASE_URL" -qAt -F $'\t' -v events="$events" <<'SQL' | awk -F'\t' '{printf "  %8s calls %9.1f ms %7.2f ms/k %8s rows %7.0f hit/k %6.0f read/k %6.0f dirtied/k %9.0f WAL B/k  %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}'
SELECT calls, total_exec_time, total_exec_time / (:events / 1000.0), rows,
       shared_blks_hit / (:events / 1000.0), shared_blks_read / (:events / 1000.0),
       shared_blks_dirtied / (:events / 1000.0), wal_bytes / (:events / 1000.0),
       left(regexp_replace(query, '\s+', ' ', 'g'), 110)
FROM pg_stat_statements
WHERE query NOT LIKE '%pg_stat_statements%'
ORDER BY total_exec_time DESC LIMIT 14
SQL
  psql "$DATABASE_URL" -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
}
