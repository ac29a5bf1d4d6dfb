#!/usr/bin/env bash
# Usage: scripts/bench-client.sh [EVENTS] [RUNS]
# TrackerClient benchmark, one client process against a local release `tracker serve`
# (figures go to docs/PERFORMANCE.md, section "Client"). Each of RUNS (3) rounds measures:
#  (a) enqueue: EVENTS (100000) recording calls on one thread, delivery off: events/s, the
#      p50/p99 of one call, against the same bytes appended with one write(2) each;
#  (b) deliver: the backlog (a) left, sent by the client until the queue is empty: events/s,
#      against a baseline of the same batches (500 events, gzip) posted back to back through
#      URLSession with no client library;
#  (c) live: EVENTS recorded as fast as possible while run() delivers, until the last is stored;
#  and each process's peak RSS. Medians over the rounds; the ratios compare figures of this run.
# Starts its own PostgreSQL cluster and the release tracker (projector on, as in production).
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-100000}
runs=${2:-3}
. scripts/bench/common.sh
bench_setup benchclient
swift build -c release --package-path tracker-client --product TrackerClientProbe >/dev/null
probe="$(swift build -c release --package-path tracker-client --show-bin-path)/TrackerClientProbe"
out=bench-results; mkdir -p "$out"
key=$("$bin" keys create --name bench-client --scope ingest | tail -n 1)
http_port=$((20000 + RANDOM % 20000))
TRACKER_LOG_LEVEL=warning "$bin" serve --port "$http_port" >"$out/client-server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null && break; sleep 0.1; done
endpoint="http://127.0.0.1:$http_port"

# value NAME FILE: the value of NAME=… in a probe's output.
value() { grep -o "$1=[^ ]*" "$2" | head -n 1 | cut -d= -f2; }
# median: the middle of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$out/client.txt"
echo "commit $(git rev-parse --short HEAD), $events events per measure, $runs rounds, $(nproc) cores" | tee -a "$out/client.txt"
for round in $(seq "$runs"); do
  queue="$dir/queue-$round"
  "$probe" bench-enqueue --queue "$queue" --events "$events" >"$out/client-enqueue-$round.txt"
  "$probe" bench-deliver --queue "$queue" --endpoint "$endpoint" --key "$key" >"$out/client-deliver-$round.txt"
  "$probe" bench-baseline --endpoint "$endpoint" --key "$key" --events "$events" >"$out/client-baseline-$round.txt"
  "$probe" bench-live --queue "$dir/live-$round" --endpoint "$endpoint" --key "$key" --events "$events" >"$out/client-live-$round.txt"
  printf 'round %d: enqueue %s/s (p50 %s us), deliver %s/s, baseline %s/s, live %s/s\n' "$round" \
    "$(value enqueue_events_per_second "$out/client-enqueue-$round.txt")" "$(value enqueue_p50_us "$out/client-enqueue-$round.txt")" \
    "$(value deliver_events_per_second "$out/client-deliver-$round.txt")" "$(value baseline_events_per_second "$out/client-baseline-$round.txt")" \
    "$(value live_events_per_second "$out/client-live-$round.txt")" | tee -a "$out/client.txt"
done

med() { for round in $(seq "$runs"); do value "$1" "$out/client-$2-$round.txt"; done | median; }
enqueue=$(med enqueue_events_per_second enqueue); raw=$(med baseline_write_events_per_second enqueue)
p50=$(med enqueue_p50_us enqueue); p99=$(med enqueue_p99_us enqueue)
deliver=$(med deliver_events_per_second deliver); baseline=$(med baseline_events_per_second baseline)
live=$(med live_events_per_second live)
rss_enqueue=$(med peak_rss_mib enqueue); rss_deliver=$(med peak_rss_mib deliver); rss_live=$(med peak_rss_mib live)
rss_baseline=$(med peak_rss_mib baseline)
{
  printf '(a) enqueue: %s events/s (p50 %.1f us, p99 %.1f us per call); write(2) of the same bytes: %s/s (%.2f x)\n' \
    "$enqueue" "$p50" "$p99" "$raw" "$(echo "$enqueue / $raw" | bc -l)"
  printf '(b) deliver a backlog: %s events/s; bare URLSession, same batches: %s/s (%.2f x)\n' \
    "$deliver" "$baseline" "$(echo "$deliver / $baseline" | bc -l)"
  printf '(c) record while delivering, until the last is stored: %s events/s\n' "$live"
  printf '(d) client peak RSS: enqueue %.1f MiB, deliver %.1f MiB, live %.1f MiB (bare URLSession baseline %.1f MiB)\n' \
    "$rss_enqueue" "$rss_deliver" "$rss_live" "$rss_baseline"
} | tee -a "$out/client.txt"
echo "events in the log: $(psql "$DATABASE_URL" -qAtc "SELECT count(*) FROM events")"
kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=""
