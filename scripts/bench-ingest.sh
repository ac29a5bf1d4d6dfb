#!/usr/bin/env bash
# Usage: scripts/bench-ingest.sh [DURATION_SECONDS]
# Ingest benchmark, all in one run on this machine (figures go to docs/PERFORMANCE.md):
#  (a) psql \copy of N comparable rows into a table with the same indexes (the baseline);
#  (b) the tracker's accepted events/s, batches of 100 events from 16 connections;
#  (c) single-event requests/s from 32 connections, with p50/p99 latency;
#  (d) the server's peak RSS.
# Starts its own PostgreSQL cluster and a release build of the tracker; needs wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-20}
. scripts/bench/common.sh
bench_setup bench
out=bench-results; mkdir -p "$out"
key=$("$bin" keys create --name bench --scope ingest | tail -n 1)
count() { psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM events"; }

# (a) Baseline: \copy of rows shaped like the log's into a table with the log's indexes
# (the (tx, seq) order index, and a unique uuid index standing in for event_ids).
rows=1000000
psql "$DATABASE_URL" -q <<SQL
CREATE UNLOGGED TABLE IF NOT EXISTS bench_source AS
SELECT gen_random_uuid() AS id, 'impression'::event_type AS type, 'b-' || g AS request_id,
       '/1234/home/native'::text AS ad_unit, '10063170'::text AS format_id, NULL::text AS asset_key,
       NULL::click_action AS click_action, 'app'::event_source AS source, NULL::text AS adapter,
       false AS eea, false AS reservation, false AS test, NULL::jsonb AS attributes,
       now() AS occurred_at, now() AS sent_at, now() AS received_at, now() AS corrected_at, 'bench'::text AS key_name
FROM generate_series(1, $rows) g;
CREATE TABLE bench_copy (LIKE events INCLUDING DEFAULTS);
CREATE INDEX ON bench_copy (tx, seq);
CREATE UNIQUE INDEX ON bench_copy (id);
SQL
psql "$DATABASE_URL" -qc "\\copy (SELECT * FROM bench_source) TO '$dir/rows.csv' WITH (FORMAT csv)"
cols="id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea, reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name"
start=$(date +%s.%N)
psql "$DATABASE_URL" -qc "\\copy bench_copy ($cols) FROM '$dir/rows.csv' WITH (FORMAT csv)"
end=$(date +%s.%N)
copy_rate=$(echo "$rows / ($end - $start)" | bc -l)
psql "$DATABASE_URL" -qc "DROP TABLE bench_copy; DROP TABLE bench_source"
printf '(a) psql \\copy baseline: %d rows in %.2f s = %.0f rows/s\n' "$rows" "$(echo "$end - $start" | bc -l)" "$copy_rate" | tee "$out/ingest.txt"

# TRACKER_PROJECTOR=off measures ingestion alone (the projector can run elsewhere: tracker project).
echo "server: TRACKER_PROJECTOR=${TRACKER_PROJECTOR:-on} TRACKER_WRITERS=${TRACKER_WRITERS:-3}" | tee -a "$out/ingest.txt"
TRACKER_LOG_LEVEL=warning "$bin" serve --port 18080 >"$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18080/healthz >/dev/null && break; sleep 0.1; done

# (b) Batches of 100 from 16 connections; accepted events counted in the database.
before=$(count); start=$(date +%s.%N)
wrk -t2 -c16 -d"${duration}s" --latency -s scripts/bench/events.lua http://127.0.0.1:18080 -- "$key" 100 1 >"$out/wrk-batch.txt"
end=$(date +%s.%N); after=$(count)
batch_rate=$(echo "($after - $before) / ($end - $start)" | bc -l)
printf '(b) batches of 100, 16 connections: %d events accepted in %.1f s = %.0f events/s (%.2f x baseline)\n' \
  "$((after - before))" "$(echo "$end - $start" | bc -l)" "$batch_rate" "$(echo "$batch_rate / $copy_rate" | bc -l)" | tee -a "$out/ingest.txt"
grep -E "Requests/sec|non-2xx|50%|99%" "$out/wrk-batch.txt" | sed 's/^/    /' | tee -a "$out/ingest.txt"

# (c) Single-event requests from 32 connections.
wrk -t2 -c32 -d"${duration}s" --latency -s scripts/bench/events.lua http://127.0.0.1:18080 -- "$key" 1 2 >"$out/wrk-single.txt"
rps=$(awk '/Requests\/sec/ {print $2}' "$out/wrk-single.txt")
p50=$(awk '$1=="50%" {print $2}' "$out/wrk-single.txt"); p99=$(awk '$1=="99%" {print $2}' "$out/wrk-single.txt")
printf '(c) single events, 32 connections: %s requests/s, p50 %s, p99 %s\n' "$rps" "$p50" "$p99" | tee -a "$out/ingest.txt"
grep -E "non-2xx" "$out/wrk-single.txt" | sed 's/^/    /' | tee -a "$out/ingest.txt"

# (d) Peak RSS of the server over the whole run.
hwm=$(awk '/VmHWM/ {print $2}' /proc/$server_pid/status)
printf '(d) server peak RSS: %.1f MiB\n' "$(echo "$hwm / 1024" | bc -l)" | tee -a "$out/ingest.txt"
kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
echo "lag after run: $(psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM events") events logged"
