"""Crash loop: `tracker serve` killed with SIGKILL at random moments under sustained load.

A client retries every unacknowledged batch with the same ids (some batches that lost their
answer are abandoned instead, to prove a batch is stored all or nothing). Afterwards every
acknowledged event must be in the log exactly once, and the projections, caught up after
the last crash, must equal a rebuild from the log.

short: 8 cycles (about 30 s); long: 120 cycles. SUITE_CYCLES overrides.
"""

import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s


def main():
    checks = s.Checks("crash")
    binary = s.tracker_binary()
    cycles = int(os.environ.get("SUITE_CYCLES", "8" if s.mode() == "short" else "120"))
    rng = random.Random(int(os.environ.get("SUITE_SEED", "12")))
    cluster = s.Cluster("crash").start()
    tracker = None
    try:
        url = s.new_database(cluster, binary)
        key = s.create_key(binary, url, "crash-app", "ingest")
        port = s.free_port()
        load = s.RetryingLoad(lambda: port, key, workers=6, batch_sizes=(1, 100), abandon=0.3, seed=rng.random())
        started = time.time()
        load.start()
        start_failures = []
        kills_before_healthy = 0
        for cycle in range(cycles):
            tracker = s.Tracker(binary, url, port=port, name="crash")
            # One cycle in five is killed while starting (migrations check, pool, projector boot).
            early = rng.random() < 0.2
            tracker.start(wait=False)
            if early:
                time.sleep(rng.uniform(0.0, 0.6))
                kills_before_healthy += 1
            else:
                try:
                    tracker.wait_healthy(60)
                except RuntimeError as error:
                    start_failures.append(f"cycle {cycle}: {error}")
                time.sleep(rng.uniform(0.3, 2.5))
            tracker.kill(signal.SIGKILL)
            if cycle % 10 == 9 or cycle == cycles - 1:
                s.log(f"cycle {cycle + 1}/{cycles}: {len(load.acknowledged_ids())} events acknowledged, answers {load.statuses()}")
        # The last start: retry what is left, then a clean stop.
        tracker = s.Tracker(binary, url, port=port, name="crash").start()
        time.sleep(1)
        load.stop()
        elapsed = time.time() - started
        load.drain(lambda: port)
        tracker.kill(signal.SIGTERM)
        tracker = None

        checks.figure("cycles", cycles)
        checks.figure("kills_while_starting", kills_before_healthy)
        checks.figure("seconds_under_load", round(elapsed, 1))
        checks.figure("answers", load.statuses())
        checks.figure("acknowledged_events_per_second", round(len(load.acknowledged_ids()) / elapsed))
        checks.check("the-tracker-starts-after-every-sigkill", not start_failures, "; ".join(start_failures[:3]) or f"{cycles} restarts")
        statuses = load.statuses()
        checks.check("no-500-during-crashes", not any(isinstance(k, int) and k >= 500 and k != 503 for k in statuses),
                     f"answers: {statuses}")
        s.verify_log(checks, cluster, "tracker", load)
        s.compare_with_rebuild(checks, binary, cluster, "tracker")
    finally:
        if tracker:
            tracker.kill()
        cluster.remove()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
