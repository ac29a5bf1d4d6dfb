#!/usr/bin/env bash
# Usage: scripts/bench-scale.sh [EVENTS=50000000]
# The tracker with a large log (issue 11, docs/PERFORMANCE.md "Scale"), all in one run:
#  (1) batched ingest on the empty log: the tracker as users run it (projector inside), batches
#      of 100 from 16 connections for INGEST_SECONDS (20): the baseline for (5);
#  (2) loads 10 M events inside PostgreSQL (scripts/bench/load-events.sql, as bench-report) and
#      rebuilds: the rebuild rate at 10 M, the baseline for (3);
#  (3) loads blocks of 10 M more events (disjoint ads of the same shape) up to EVENTS, rebuilds:
#      the rate at EVENTS, and the time and disk the load took;
#  (4) each report for a 7-day and a 30-day range, p50 of REPORT_CALLS (21) HTTP calls;
#  (5) batched ingest as in (1), now on the large log: the ratio to (1), with the event_ids
#      index size and its cache hit rate during the phase (is the id check still off disk?);
#  (6) the projector's lag while pgbench ingests 20 000 events/s for LAG_SECONDS (60);
#  (7) bytes on disk per event: log, event_ids, per-ad state, day tables.
# Needs about 430 bytes per event of disk at the peak, WAL and the rebuild's temporary copies
# included (43 GB for 100 M, measured); the cluster is removed at the end. Starts its own PostgreSQL cluster and a release build of the tracker.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-50000000}
ingest_seconds=${INGEST_SECONDS:-20}
lag_seconds=${LAG_SECONDS:-60}
calls=${REPORT_CALLS:-21}
block=10000000
[ "$events" -ge "$block" ] && [ $((events % block)) -eq 0 ] || { echo "EVENTS must be a multiple of $block" >&2; exit 2; }
. scripts/bench/common.sh
bench_setup scale
pgbin=$(pg_config --bindir 2>/dev/null || true); [ -x "$pgbin/pgbench" ] || pgbin=/usr/lib/postgresql/15/bin
out=bench-results; mkdir -p "$out"; result="$out/scale.txt"; : >"$result"
say() { echo "$*" | tee -a "$result"; }
sql() { psql "$DATABASE_URL" -qAtc "$1"; }
now() { date +%s.%N; }
since() { printf '%.0f' "$(echo "$(now) - $1" | bc -l)"; }
http=$((40000 + RANDOM % 20000))
say "scale benchmark: $events events, commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources tracker-client sql scripts || echo '+changes'), $(nproc) cores, disk free $(df -h --output=avail "$dir" | tail -1 | tr -d ' '), load $(cut -d' ' -f1-3 /proc/loadavg)"
key=$("$bin" keys create --name bench --scope ingest | tail -n 1)
report_key=$("$bin" keys create --name analyst --scope report | tail -n 1)

serve() {
  TRACKER_LOG_LEVEL=warning "$bin" serve --port "$http" >>"$out/scale-server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
}
stop_server() { kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""; }
caught_up() {  # waits (at most 300 s) until the projector has caught up; prints the seconds
  local began; began=$(now)
  for _ in $(seq 600); do
    [ "$(readyz_behind "$http")" = 0 ] && break
    sleep 0.5
  done
  since "$began"
}
ingest() {  # ingest LABEL: batches of 100 from 16 connections; sets rate
  local before after start end
  before=$(sql "SELECT count(*) FROM events"); start=$(now)
  wrk -t2 -c16 -d"${ingest_seconds}s" -s scripts/bench/events.lua "http://127.0.0.1:$http" -- "$key" 100 "$RANDOM" >"$out/scale-wrk-$1.txt"
  end=$(now); after=$(sql "SELECT count(*) FROM events")
  rate=$(echo "($after - $before) / ($end - $start)" | bc -l)
  say "    $1: $((after - before)) events accepted in $(printf '%.1f' "$(echo "$end - $start" | bc -l)") s = $(printf '%.0f' "$rate") events/s; projector caught up $(caught_up) s after; load $(cut -d' ' -f1-3 /proc/loadavg)"
}
load_block() {  # load_block N: the Nth block of 10 M events, its ids claimed in event_ids
  local b=$1 last
  last=$(sql "SELECT COALESCE(pg_sequence_last_value('event_seq'), 0)")
  for chunk in $(seq 0 $((block / 1000000 - 1))); do
    psql "$DATABASE_URL" -q -v n="$block" -v chunk="$chunk" -v first_ad=$((b * block)) -f scripts/bench/load-events.sql
  done
  sql "INSERT INTO event_ids SELECT id FROM events WHERE seq > $last" >/dev/null
}
rebuild() {  # rebuild LABEL: sets rebuild_rate
  local start n
  sql "CHECKPOINT" >/dev/null
  n=$(sql "SELECT count(*) FROM events")
  start=$(now)
  /usr/bin/time -f "%U %S %M" -o "$out/scale-rebuild-time.txt" "$bin" rebuild >"$out/scale-rebuild-$1.txt" 2>&1
  rebuild_rate=$(echo "$n / ($(now) - $start)" | bc -l)
  read -r user sys rss <"$out/scale-rebuild-time.txt"
  say "    rebuild of $n events: $(printf '%.0f' "$rebuild_rate") events/s; $(tail -n 1 "$out/scale-rebuild-$1.txt"); tracker CPU $(echo "$user + $sys" | bc) s, peak RSS $((rss / 1024)) MiB; load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# (1) Ingest on the empty log.
psql "$DATABASE_URL" -qAtc "SELECT tracker_ensure_event_partitions((now() AT TIME ZONE 'UTC')::date - 31, (now() AT TIME ZONE 'UTC')::date + 7)" >/dev/null
serve
say "(1) batched ingest on the empty log:"
ingest empty; empty_rate=$rate
stop_server

# (2) 10 M events and their rebuild.
start=$(now)
load_block 0
sql "VACUUM ANALYZE events" >/dev/null; sql "VACUUM ANALYZE event_ids" >/dev/null
say "(2) loaded 10 M events in $(since "$start") s"
rebuild 10M; rate10=$rebuild_rate

# (3) Up to EVENTS, and their rebuild.
start=$(now)
for b in $(seq 1 $((events / block - 1))); do
  load_block "$b"
  say "    block $b loaded, $(since "$start") s so far, disk free $(df -h --output=avail "$dir" | tail -1 | tr -d ' ')"
done
sql "VACUUM ANALYZE events" >/dev/null; sql "VACUUM ANALYZE event_ids" >/dev/null
say "(3) loaded $(sql "SELECT count(*) FROM events") events in all; the last $((events - block)) in $(since "$start") s; database $(sql "SELECT pg_size_pretty(pg_database_size(current_database()))"), WAL directory $(du -sh "$dir/data/pg_wal" | cut -f1)"
rebuild full
say "    rebuild rate at $events / at 10 M: $(printf '%.2f' "$(echo "$rebuild_rate / $rate10" | bc -l)") (goal: within 20 %)"

# (4) Reports.
serve
today=$(date -u +%F); to=$(date -u -d "$today - 1 day" +%F)
for r in summary assets sources adchoices; do
  for range in 7 30; do
    from=$(date -u -d "$today - $range days" +%F)
    url="http://127.0.0.1:$http/v1/reports/$r?from=$from&to=$to"
    curl -sf -H "Authorization: Bearer $report_key" "$url" >/dev/null
    ms=$(for _ in $(seq "$calls"); do curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $report_key" "$url"; done |
         sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)] * 1000}')
    say "(4) $r $range days: p50 $ms ms over $calls calls"
  done
done

# (5) Ingest on the large log, and the event_ids index meanwhile.
sql "SELECT pg_stat_reset()" >/dev/null
say "(5) batched ingest on the log of $events events:"
ingest full
say "    ingest on $events events / on the empty log: $(printf '%.2f' "$(echo "$rate / $empty_rate" | bc -l)") (goal ≥ 0.9)"
say "    event_ids: table $(sql "SELECT pg_size_pretty(pg_relation_size('event_ids'))"), index $(sql "SELECT pg_size_pretty(pg_relation_size(indexrelid)) FROM pg_index WHERE indrelid = 'event_ids'::regclass AND indisprimary"); during (5) its index blocks: $(sql "SELECT idx_blks_hit || ' hit, ' || idx_blks_read || ' read (' || round(100.0 * idx_blks_hit / greatest(idx_blks_hit + idx_blks_read, 1), 2) || ' % from shared buffers)' FROM pg_statio_user_tables WHERE relname = 'event_ids'"); shared_buffers $(sql "SHOW shared_buffers")"

# (6) Projector lag at 20 000 events/s.
"$pgbin/pgbench" -n -c 4 -j 2 -R 200 -T "$lag_seconds" -f scripts/bench/ingest.sql "$DATABASE_URL" >"$out/scale-pgbench.txt" 2>&1 &
bench_pid=$!
: >"$out/scale-lag.txt"
while kill -0 "$bench_pid" 2>/dev/null; do
  curl -s "http://127.0.0.1:$http/readyz" | grep -o '"projectionLag":{[^}]*}' >>"$out/scale-lag.txt" || true
  sleep 0.5
done
wait "$bench_pid" || true
stats=$(lag_pairs "$out/scale-lag.txt" | sort -k2 -g |
  awk '{e[NR]=$1; s[NR]=$2; if ($1>me) me=$1} END {printf "p50 %.2f s, p99 %.2f s, max %.2f s; max %d events behind; %d samples", s[int((NR+1)/2)], s[int(NR*0.99+0.5)], s[NR], me, NR}')
say "(6) projector lag while pgbench ingests 20 000 events/s ($(awk '/^tps/ {print $3; exit}' "$out/scale-pgbench.txt") batches of 100/s achieved) for $lag_seconds s: $stats"
stop_server

# (7) Bytes per event on disk.
n=$(sql "SELECT count(*) FROM events")
per() { printf '%.1f' "$(echo "$1 / $n" | bc -l)"; }
say "(7) disk per event ($n events): log $(per "$(sql "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'events'::regclass")") B, event_ids $(per "$(sql "SELECT pg_total_relation_size('event_ids')")") B, ad_state $(per "$(sql "SELECT pg_total_relation_size('ad_state')")") B, day tables $(per "$(sql "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['format_day', 'asset_day', 'source_day']::regclass[]) c")") B; load $(cut -d' ' -f1-3 /proc/loadavg)"
