"""Overload: 10 x the sustainable rate from many connections.

First the sustainable rate R is measured on this machine, in this run: 4 connections posting
batches of 500 events back to back to a tracker without a rate limit, for 8 s (events
acknowledged per second). Then a fresh tracker with TRACKER_RATE_LIMIT = R/3 events/s per
key gets 10 x R events/s offered (open loop) over 512 connections, all opened before the offer
starts, under 6 keys, one of which
(a hot app) sends half of it. The tracker must stay up, answer every request it cannot take with 503 or 429
and Retry-After, keep admitted requests' latency bounded, keep its memory under the bound
its limits imply, and store every acknowledged event.

Memory bound (from the configuration): 64 MiB for the process without load, plus 256
batches in progress (TRACKER_MAX_CONCURRENT_BATCHES) x 2 MiB (a 512 KiB body, its decoded
events and the response), plus 100 000 queued events x 2 KiB = 768 MiB.

short: 20 s of overload; long: 120 s. SUITE_SECONDS overrides.
"""

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s

BATCH = 500
CONNECTIONS = 512
KEYS = 6
MEMORY_BOUND_MIB = 64 + 256 * 2 + 100_000 * 2 // 1024


def bodies(count, rng):
    out = []
    for _ in range(count):
        events = [s.random_event(rng, ads=5000) for _ in range(BATCH)]
        out.append(([e["id"] for e in events], s.batch_body(events)))
    return out


def calibrate(checks, binary, url, key, pool, seconds=8):
    tracker = s.Tracker(binary, url, name="overload-calibration").start()
    done = [0]
    lock = threading.Lock()
    stop = threading.Event()
    cursor = [0]

    def worker():
        conn = s.Connection(tracker.port, 30)
        while not stop.is_set():
            with lock:
                ids, body = pool[cursor[0] % len(pool)]
                cursor[0] += 1
            try:
                r = s.post_batch(tracker.port, key, body, timeout=30, connection=conn)
            except OSError:
                continue
            if r.status == 200:
                with lock:
                    done[0] += BATCH
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
    start = time.time()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    rate = done[0] / (time.time() - start)
    tracker.kill(signal.SIGTERM)
    checks.figure("sustainable_events_per_second", round(rate))
    return rate, cursor[0]


def main():
    checks = s.Checks("overload")
    binary = s.tracker_binary()
    seconds = float(os.environ.get("SUITE_SECONDS", "20" if s.mode() == "short" else "120"))
    rng = s.random.Random(70)
    cluster = s.Cluster("overload").start()
    tracker = None
    try:
        url = s.new_database(cluster, binary)
        keys = [s.create_key(binary, url, f"overload-app-{i}", "ingest") for i in range(KEYS)]
        s.log("generating batches")
        pool = bodies(int(os.environ.get("SUITE_BODIES", "240")), rng)
        rate, used = calibrate(checks, binary, url, keys[0], pool)
        offered_rate = 10 * rate
        limit = max(1, int(rate / 3))
        checks.figure("rate_limit_per_key", limit)
        checks.figure("offered_events_per_second_target", round(offered_rate))
        tracker = s.Tracker(binary, url, name="overload", env={"TRACKER_RATE_LIMIT": str(limit)}).start()
        memory = s.MemorySampler(tracker, 0.05)
        memory.start()
        # Open loop: a dispatcher hands out requests at the offered rate to whichever of the
        # connections is free, so slow answers to admitted batches do not slow the offer.
        results = []  # (time, status, seconds, retry-after, shape ok, body index)
        lock = threading.Lock()
        stop = threading.Event()
        jobs = s.queue.Queue()
        cursor = [used]
        health = []
        unsent = [0]
        dispatched = [0]

        def dispatcher():
            per_second = offered_rate / BATCH
            start = time.time()
            sent = 0
            while not stop.is_set():
                due = int((time.time() - start) * per_second)
                while sent < due:
                    if jobs.qsize() > CONNECTIONS:
                        unsent[0] += 1  # every connection busy: the offer falls short (counted)
                    else:
                        jobs.put(cursor[0] % len(pool))
                        cursor[0] += 1
                        dispatched[0] += 1
                    sent += 1
                time.sleep(0.002)

        def key_of(i):
            # One hot app sends half the traffic, five share the rest. Everything the tracker
            # admits (at least the sustainable R) then carries about R/2 on the hot key, over its
            # R/3 limit, so 429 is certain; with an even spread each key saw about R/6 of what
            # got past admission, under its limit, and whether any 429 appeared was luck.
            return keys[0] if i % 2 == 0 else keys[1 + (i // 2) % (KEYS - 1)]

        # Every connection is open before the offer starts, as a client's pool of connections
        # is: a refusal's time is then the tracker's answer, not TCP's handshake and the
        # listener's accept queue behind 512 connections opened in the same moment while the
        # first 256 admitted batches are read. New connections under overload are what the
        # /healthz probe measures (one per probe). Each connection's first request is a
        # /healthz, so the tracker has accepted it before the offer starts.
        connected = threading.Barrier(CONNECTIONS + 1)

        def worker(i):
            conn = s.Connection(tracker.port, 60)
            try:
                conn.request("GET", "/healthz")
            except OSError:
                conn.close()  # it connects at its first batch instead
            try:
                connected.wait()
            except threading.BrokenBarrierError:
                return  # the main thread gave up waiting, and fails
            while not stop.is_set():
                try:
                    index = jobs.get(timeout=0.2)
                except s.queue.Empty:
                    continue
                start = time.time()
                try:
                    r = s.post_batch(tracker.port, key_of(i), pool[index][1], timeout=60, connection=conn)
                    entry = (start, r.status, time.time() - start, r.headers.get("retry-after"),
                             r.status == 200 or r.error_shape_ok(), index)
                except OSError as error:
                    entry = (start, type(error).__name__, time.time() - start, None, False, index)
                with lock:
                    results.append(entry)

        def health_probe():
            while not stop.is_set():
                start = time.time()
                try:
                    health.append((s.request(tracker.port, "GET", "/healthz", timeout=10).status, time.time() - start))
                except OSError as error:
                    health.append((type(error).__name__, time.time() - start))
                stop.wait(0.5)

        workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(CONNECTIONS)]
        for t in workers:
            t.start()
        connected.wait(timeout=120)
        threads = workers + [threading.Thread(target=health_probe, daemon=True), threading.Thread(target=dispatcher, daemon=True)]
        started = time.time()
        for t in threads[CONNECTIONS:]:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(timeout=70)
        elapsed = time.time() - started
        memory.stop()
        alive = tracker.alive()
        hwm = tracker.status_field("VmHWM")

        statuses = {}
        for e in results:
            statuses[e[1]] = statuses.get(e[1], 0) + 1
        # What the generator offered: sent, plus what it could not send because every one of
        # the 512 connections was still waiting for an answer.
        offered = (dispatched[0] + unsent[0]) * BATCH / seconds
        refusal_times = [e[2] for e in results if e[1] in (429, 503)]
        admitted = [e[2] for e in results if e[1] == 200]
        refused = [e for e in results if e[1] in (429, 503)]
        bad = [e for e in results if e[1] not in (200, 429, 503) or (e[1] in (429, 503) and (not e[3] or not e[4]))]
        p50, p99 = s.percentile(admitted, 50), s.percentile(admitted, 99)
        # Everything the tracker admits at once (256 batches, 100 000 queued events) at the
        # sustainable rate, plus 2 s: what a batch waits when the tracker keeps its pace.
        acked_rate = len(admitted) * BATCH / elapsed
        latency_bound = (256 * BATCH + 100_000) / rate + 2
        checks.figure("overload_seconds", round(elapsed, 1))
        checks.figure("offered_events_per_second", round(offered))
        checks.figure("sent_events_per_second", round(len(results) * BATCH / elapsed))
        checks.figure("offers_not_sent_all_connections_busy", unsent[0])
        checks.figure("refusal_latency_p50_seconds", round(s.percentile(refusal_times, 50) or 0, 3))
        checks.figure("refusal_latency_p99_seconds", round(s.percentile(refusal_times, 99) or 0, 3))
        for code in (429, 503):
            times = [e[2] for e in results if e[1] == code]
            checks.figure(f"refusal_latency_{code}_p50_p99_seconds",
                          [round(s.percentile(times, 50) or 0, 3), round(s.percentile(times, 99) or 0, 3)])
        checks.figure("offered_times_sustainable", round(offered / rate, 1))
        checks.figure("acknowledged_events_per_second", round(len(admitted) * BATCH / elapsed))
        checks.figure("answers", statuses)
        checks.figure("admitted_latency_p50_seconds", None if p50 is None else round(p50, 3))
        checks.figure("admitted_latency_p99_seconds", None if p99 is None else round(p99, 3))
        checks.figure("admitted_latency_bound_seconds", round(latency_bound, 1))
        checks.figure("healthz_p99_seconds", round(s.percentile([h[1] for h in health], 99) or 0, 3))
        checks.figure("requests_resent_after_the_keepalive_race", s.Connection.stale_retries)
        checks.figure("peak_rss_mib_sampled", round(memory.peak_kib / 1024, 1))
        checks.figure("peak_rss_mib_vmhwm", None if hwm is None else round(hwm / 1024, 1))
        checks.figure("memory_bound_mib", MEMORY_BOUND_MIB)

        checks.check("ten-times-the-sustainable-rate-was-offered", offered >= 9.5 * rate,
                     f"{offered:.0f} events/s offered, {offered / rate:.1f} x the sustainable {rate:.0f}")
        checks.check("the-tracker-survives", alive, "" if alive else tracker.log_tail(8))
        checks.check("refusals-are-503-or-429-with-retry-after", not bad and refused,
                     f"{len(refused)} refusals; {len(bad)} other or malformed answers, e.g. {[(e[1], round(e[2], 2)) for e in bad[:4]]}")
        r99 = s.percentile(refusal_times, 99)
        checks.check("refusals-are-prompt", r99 is not None and r99 <= 1 and unsent[0] == 0,
                     f"503/429 p99 {r99 and round(r99, 2)} s; {unsent[0]} offers found all 512 connections waiting for an answer")
        # Which limit refuses (429 for the hot key, 503 when the 256 batch slots or the queue are
        # full) depends on how fast this machine drains the queue: on an idle machine no 503 may
        # come, on a loaded one the 503s can crowd out the 429s. The split is a figure
        # ("answers"); that every refusal is one of the two, with Retry-After, is the check above.
        checks.check("admitted-latency-is-bounded", p99 is not None and p99 <= latency_bound,
                     f"p99 {p99} s for {len(admitted)} admitted batches (bound {latency_bound:.1f} s: 256 admitted batches of 500 and 100 000 queued events at the sustainable {rate:.0f} events/s, plus 2 s)")
        checks.check("goodput-holds-under-overload", acked_rate >= 0.5 * rate,
                     f"{acked_rate:.0f} events/s acknowledged under overload, {acked_rate / rate:.0%} of the sustainable {rate:.0f}")
        checks.check("memory-stays-under-the-bound", hwm is not None and hwm / 1024 <= MEMORY_BOUND_MIB,
                     f"peak RSS {hwm and round(hwm / 1024)} MiB, bound {MEMORY_BOUND_MIB} MiB")
        quick = sum(1 for h in health if h[0] == 200 and h[1] < 2)
        checks.check("healthz-answers-within-the-liveness-timeout-during-overload", health and quick == len(health),
                     f"{quick} of {len(health)} /healthz answered 200 within 2 s (deploy/kubernetes: liveness timeoutSeconds 2, "
                     f"failureThreshold 3); slowest {max((h[1] for h in health), default=0):.2f} s")
        tracker.kill(signal.SIGTERM)
        tracker = None

        # Every batch acknowledged at least once (calibration included) is in the log, once.
        acked = {i for e in results if e[1] == 200 for i in [e[5]]}
        counts, id_rows = s.log_id_counts(cluster, "tracker")
        missing = sum(1 for i in acked for event_id in pool[i][0] if counts.get(event_id, 0) != 1)
        checks.check("every-acknowledged-event-is-in-the-log-once", missing == 0 and id_rows == len(counts),
                     f"{len(acked)} distinct batches acknowledged, {missing} of their events missing or doubled")
    finally:
        if tracker:
            tracker.kill()
        cluster.remove()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
