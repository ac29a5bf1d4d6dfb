"""Database faults under load: PostgreSQL stopped and restarted, down when the tracker starts,
frozen, locked, out of disk, configured for asynchronous commit, and failed over to a
promoted standby; and a client's retry racing its first attempt through two trackers.

While PostgreSQL cannot take a write the tracker must answer 503 with Retry-After (never a
500, never a hang), lose nothing it acknowledged, and recover by itself, without a restart,
with the projector resuming from its checkpoint (the projections then equal a rebuild).

short: 2 stop/restart cycles (fast, immediate), the other faults once (about 2 minutes).
long: 24 stop/restart cycles (12 fast, 12 immediate). SUITE_CYCLES overrides.
"""

import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s


def first_after(load, since, predicate):
    with load.lock:
        for t, status, retry, shape, _ in load.timeline:
            if t >= since and predicate(status):
                return t - since
    return None


def answers_between(load, start, end):
    with load.lock:
        return [e for e in load.timeline if start <= e[0] <= end]


def bad_503s(entries):
    """503s without Retry-After or the JSON error shape, and every other 5xx."""
    return [e for e in entries if (e[1] == 503 and (not e[2] or not e[3])) or (isinstance(e[1], int) and e[1] >= 500 and e[1] != 503)]


def stop_restart_cycles(checks, binary, cycles):
    cluster = s.Cluster("dbfaults").start()
    tracker = None
    try:
        url = s.new_database(cluster, binary)
        key = s.create_key(binary, url, "db-app", "ingest")
        tracker = s.Tracker(binary, url, name="dbfaults").start()
        pid = tracker.pid
        load = s.RetryingLoad(lambda: tracker.port, key, workers=4, batch_sizes=(1, 50), seed=20, timeout=30).start()
        to_503, to_recovery, conn_errors, hung, bad, ready_down = [], [], 0, [], [], []
        for cycle in range(cycles):
            time.sleep(2)
            how = "fast" if cycle % 2 == 0 else "immediate"
            stop_at = time.time()
            cluster.stop(how)
            time.sleep(3)
            r = s.request(tracker.port, "GET", "/readyz", timeout=10)
            ready_down.append(r.status == 503 and r.headers.get("retry-after") is not None)
            start_at = time.time()
            cluster.restart()
            started = time.time()
            deadline = started + 30
            recovered = None
            while time.time() < deadline and recovered is None:
                recovered = first_after(load, started, lambda st: st == 200)
                time.sleep(0.05)
            down = answers_between(load, stop_at, started)
            first = first_after(load, stop_at, lambda st: st == 503)
            to_503.append(first)
            to_recovery.append(None if recovered is None else recovered + (started - start_at))
            conn_errors += sum(1 for e in answers_between(load, stop_at, time.time()) if e[1] == "conn")
            bad += bad_503s(down)
            s.log(f"cycle {cycle + 1}/{cycles} ({how}): first 503 after {first if first is None else round(first, 3)} s, "
                  f"first 200 {to_recovery[-1] if recovered is None else round(to_recovery[-1], 3)} s after the restart began; "
                  f"answers while down {sorted(set(str(e[1]) for e in down))}")
        time.sleep(2)
        load.stop()
        load.drain(lambda: tracker.port)
        known_503 = [x for x in to_503 if x is not None]
        known_rec = [x for x in to_recovery if x is not None]
        checks.figure("stop_restart_cycles", cycles)
        checks.figure("seconds_to_first_503_max", round(max(known_503), 3) if known_503 else None)
        checks.figure("seconds_to_first_503_median", round(s.percentile(known_503, 50), 3) if known_503 else None)
        checks.figure("seconds_to_recovery_max", round(max(known_rec), 3) if known_rec else None)
        checks.figure("seconds_to_recovery_median", round(s.percentile(known_rec, 50), 3) if known_rec else None)
        checks.figure("answers", load.statuses())
        checks.check("503-with-retry-after-while-the-database-is-down", len(known_503) == cycles and not bad,
                     f"{len(known_503)} of {cycles} outages answered 503; {len(bad)} bad answers {[(e[1], e[4]) for e in bad[:3]]}")
        checks.check("readyz-says-503-while-the-database-is-down", all(ready_down), f"{sum(ready_down)} of {cycles}")
        checks.check("ingestion-recovers-within-10-s-without-a-restart", len(known_rec) == cycles and max(known_rec) <= 10
                     and tracker.alive() and tracker.pid == pid,
                     f"{len(known_rec)} of {cycles} recovered, slowest {max(known_rec) if known_rec else None} s, same process {tracker.pid == pid}")
        checks.check("the-tracker-keeps-answering-while-the-database-is-down", conn_errors == 0, f"{conn_errors} requests without an answer")
        # The projector, never restarted, must catch up by itself.
        caught_up = None
        deadline = time.time() + 60
        while time.time() < deadline:
            doc = s.request(tracker.port, "GET", "/readyz").json() or {}
            if doc.get("projectionLag", {}).get("events") == 0:
                caught_up = True
                break
            time.sleep(0.5)
        checks.check("the-projector-catches-up-after-the-restarts", caught_up is True, f"/readyz: {doc}")
        tracker.kill(signal.SIGTERM)
        tracker = None
        s.verify_log(checks, cluster, "tracker", load, part="restarts")
        s.compare_with_rebuild(checks, binary, cluster, "tracker", name="restarts.projections-equal-a-rebuild")
    finally:
        if tracker:
            tracker.kill()
        cluster.remove()


def frozen_and_locked(checks, binary):
    """SIGSTOP on PostgreSQL, and event_ids locked by another session: 503 within 10 s, not a hang."""
    cluster = s.Cluster("dbfrozen").start()
    tracker = None
    pids = []
    try:
        url = s.new_database(cluster, binary)
        key = s.create_key(binary, url, "frozen-app", "ingest")
        tracker = s.Tracker(binary, url, name="dbfrozen").start()
        assert s.post_batch(tracker.port, key, s.batch_body([s.event()])).status == 200

        def timed(method, path, body=None, headers=None):
            start = time.time()
            try:
                r = s.request(tracker.port, method, path, headers, body, timeout=12)
                return r.status, r.headers.get("retry-after"), time.time() - start
            except OSError as error:
                return type(error).__name__, None, time.time() - start

        pids = cluster.server_pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        ingest = timed("POST", "/v1/events", s.batch_body([s.event()]), s.ingest_headers(key))
        ready = timed("GET", "/readyz")
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        pids = []
        checks.figure("frozen_database_ingest_answer", f"{ingest[0]} after {ingest[2]:.1f} s")
        checks.figure("frozen_database_readyz_answer", f"{ready[0]} after {ready[2]:.1f} s")
        checks.check("a-frozen-database-gets-503-within-10-s", ingest[0] == 503 and ingest[1] and ingest[2] <= 10,
                     f"PostgreSQL under SIGSTOP: POST /v1/events answered {ingest[0]} after {ingest[2]:.1f} s (client gave up at 12 s)")
        checks.check("readyz-answers-within-10-s-when-the-database-is-frozen", ready[0] == 503 and ready[2] <= 10,
                     f"/readyz answered {ready[0]} after {ready[2]:.1f} s")
        time.sleep(2)

        locker = subprocess.Popen(["psql", "-X", "-q", cluster.url("tracker"), "-c",
                                   "BEGIN; LOCK TABLE event_ids IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(20); COMMIT;"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        ingest = timed("POST", "/v1/events", s.batch_body([s.event()]), s.ingest_headers(key))
        locker.terminate()
        locker.wait()
        checks.figure("locked_event_ids_ingest_answer", f"{ingest[0]} after {ingest[2]:.1f} s")
        checks.check("a-locked-log-gets-503-within-10-s", ingest[0] == 503 and ingest[1] and ingest[2] <= 10,
                     f"event_ids locked ACCESS EXCLUSIVE by another session: POST /v1/events answered {ingest[0]} after {ingest[2]:.1f} s")
        checks.check("the-tracker-survives-a-frozen-and-a-locked-database", tracker.alive(), tracker.log_tail(5))
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        if tracker:
            tracker.kill()
        cluster.remove()


def asynchronous_commit_default(checks, binary, tries=5):
    """A database whose default is synchronous_commit=off: a 200, and a projector step a report
    has shown, must still survive a crash."""
    cluster = s.Cluster("dbasync").start()
    tracker = None
    try:
        url = s.new_database(cluster, binary)
        key = s.create_key(binary, url, "async-app", "ingest")
        # The WAL writer flushes asynchronous commits only every 10 s.
        cluster.psql("ALTER SYSTEM SET wal_writer_delay = '10s'")
        cluster.psql("SELECT pg_reload_conf()")
        # The control: with the database's default (on) nothing acknowledged is lost.
        lost = crashes_after_200(cluster, binary, url, key, tries)
        checks.check("a-200-survives-a-crash-of-postgresql", lost == 0,
                     f"{lost} of {tries} acknowledged single-event batches were gone after PostgreSQL was killed (SIGQUIT) right after the 200")
        cluster.psql("ALTER DATABASE tracker SET synchronous_commit = off")
        lost = crashes_after_200(cluster, binary, url, key, tries)
        checks.figure("async_default_acknowledged_batches_lost", f"{lost} of {tries}")
        checks.check("a-200-survives-a-crash-when-the-database-defaults-to-asynchronous-commit", lost == 0,
                     f"ALTER DATABASE ... SET synchronous_commit = off, wal_writer_delay = 10s: {lost} of {tries} acknowledged "
                     f"single-event batches were gone after PostgreSQL was killed (SIGQUIT) right after the 200")
        # The projections a report reads: a projector step the report has shown must survive too.
        lost = projections_lost_in_crashes(cluster, binary, url, key, tries)
        checks.figure("async_default_projector_steps_lost", f"{lost} of {tries}")
        checks.check("projected-numbers-survive-a-crash-when-the-database-defaults-to-asynchronous-commit", lost == 0,
                     f"ALTER DATABASE ... SET synchronous_commit = off, wal_writer_delay = 10s: {lost} of {tries} projector "
                     f"steps that were visible (projection_state.events_projected) were gone after PostgreSQL was killed (SIGQUIT)")
    finally:
        cluster.remove()


def projections_lost_in_crashes(cluster, binary, url, key, tries):
    """Posts one event, waits until the projector's step that counts it is visible (what a report
    reads), kills PostgreSQL (SIGQUIT); returns how many such steps were gone after the restart."""
    lost = 0
    tracker = None
    projected = lambda: int(cluster.psql("SELECT events_projected FROM projection_state", "tracker")[0][0])
    try:
        for attempt in range(tries):
            tracker = s.Tracker(binary, url, name="dbasync-projector").start()
            before = projected()
            r = s.post_batch(tracker.port, key, s.batch_body([s.event()]))
            if r.status != 200:
                raise RuntimeError(f"the event before the crash was not acknowledged: {r}")
            deadline = time.time() + 30
            while projected() <= before:
                if time.time() > deadline:
                    raise RuntimeError("the projector did not count the event within 30 s")
                time.sleep(0.01)
            os.kill(cluster.postmaster_pid(), signal.SIGQUIT)
            tracker.kill()
            tracker = None
            deadline = time.time() + 30
            while cluster.running() and time.time() < deadline:
                time.sleep(0.05)
            cluster.restart()
            if projected() <= before:
                lost += 1
    finally:
        if tracker:
            tracker.kill()
    return lost


def crashes_after_200(cluster, binary, url, key, tries):
    """Posts one event, kills PostgreSQL (SIGQUIT) as soon as the 200 arrives; returns how many were lost."""
    lost = 0
    tracker = None
    try:
        for attempt in range(tries):
            tracker = s.Tracker(binary, url, name="dbasync", env={"TRACKER_PROJECTOR": "off"}).start()
            e = s.event()
            r = s.post_batch(tracker.port, key, s.batch_body([e]))
            if r.status != 200:
                raise RuntimeError(f"the event before the crash was not acknowledged: {r}")
            # A crash of PostgreSQL right after the 200 (SIGQUIT: immediate shutdown, no flush).
            os.kill(cluster.postmaster_pid(), signal.SIGQUIT)
            tracker.kill()
            deadline = time.time() + 30
            while cluster.running() and time.time() < deadline:
                time.sleep(0.05)
            cluster.restart()
            found = cluster.psql(f"SELECT count(*) FROM events WHERE id = '{e['id']}'", "tracker")[0][0]
            if r.status == 200 and found != "1":
                lost += 1
            tracker = None
    finally:
        if tracker:
            tracker.kill()
    return lost


def disk_full(checks, binary, size_mib=40):
    """The database's tablespace on a small tmpfs fills up; then the tmpfs grows again."""
    mount = s.tempfile.mkdtemp(prefix="tracker-suite-tmpfs-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", mount], check=True)
    subprocess.run(["chown", "postgres:postgres", mount], check=True)
    cluster = s.Cluster("dbfull").start()
    tracker = None
    try:
        cluster.psql(f"CREATE TABLESPACE small LOCATION '{mount}'")
        cluster.psql("CREATE DATABASE tracker TABLESPACE small")
        url = cluster.url("tracker")
        s.run_tracker_command(binary, ["migrate"], url)
        key = s.create_key(binary, url, "full-app", "ingest")
        tracker = s.Tracker(binary, url, name="dbfull").start()
        pid = tracker.pid
        load = s.RetryingLoad(lambda: tracker.port, key, workers=4, batch_sizes=(200, 400), seed=30, timeout=30).start()
        started = time.time()
        full_at = None
        while time.time() - started < 120:
            full_at = first_after(load, started, lambda st: st != 200)
            if full_at is not None:
                break
            time.sleep(0.2)
        time.sleep(3)
        grown = time.time()
        subprocess.run(["mount", "-o", f"remount,size={size_mib * 16}m", mount], check=True)
        recovered = None
        while time.time() - grown < 60 and recovered is None:
            recovered = first_after(load, grown, lambda st: st == 200)
            time.sleep(0.1)
        time.sleep(2)
        load.stop()
        load.drain(lambda: tracker.port)
        full = answers_between(load, started + (full_at or 0), grown)
        statuses = sorted(set(str(e[1]) for e in full))
        checks.figure("disk_full_tmpfs_mib", size_mib)
        checks.figure("disk_full_after_seconds", None if full_at is None else round(full_at, 1))
        checks.figure("disk_full_answers", statuses)
        checks.figure("disk_full_seconds_to_recovery", None if recovered is None else round(recovered, 2))
        bad = bad_503s(full)
        checks.check("a-full-disk-gets-503-with-retry-after", full_at is not None and not bad and "503" in statuses,
                     f"answers while full: {statuses}; bad: {[(e[1], e[4][:120]) for e in bad[:2]]}")
        checks.check("ingestion-resumes-when-space-returns", recovered is not None and tracker.alive() and tracker.pid == pid,
                     f"first 200 {recovered} s after the tmpfs grew; same process: {tracker.alive() and tracker.pid == pid}")
        tracker.kill(signal.SIGTERM)
        tracker = None
        s.verify_log(checks, cluster, "tracker", load, part="disk-full")
        s.compare_with_rebuild(checks, binary, cluster, "tracker", name="disk-full.projections-equal-a-rebuild")
    finally:
        if tracker:
            tracker.kill()
        cluster.remove()
        subprocess.run(["umount", mount])
        os.rmdir(mount)


def failover(checks, binary):
    """A hot standby (pg_basebackup -R) promoted after the primary dies; multi-host conninfo."""
    primary = s.Cluster("dbprimary").start()
    standby = s.Cluster("dbstandby")
    tracker = None
    try:
        s.new_database(primary, binary)
        key = s.create_key(binary, primary.url("tracker"), "failover-app", "ingest")
        subprocess.run(["chown", "postgres:postgres", standby.dir], check=True)
        s.as_postgres([f"{s.PG_BIN}/pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                       "-D", standby.data, "-R", "-X", "stream", "-c", "fast"], check=True, capture_output=True)
        standby.append_conf(f"port = {standby.port}\nunix_socket_directories = '{standby.dir}'\nhot_standby = on")
        standby.start()
        # Synchronous replication: a commit is acknowledged once the standby has it, so a
        # failover loses nothing that got a 200.
        primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.psql("SELECT pg_reload_conf()")
        deadline = time.time() + 30
        while time.time() < deadline and primary.psql("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")[0][0] != "1":
            time.sleep(0.2)
        conninfo = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} dbname=tracker user=postgres "
                    f"target_session_attrs=read-write connect_timeout=2")
        tracker = s.Tracker(binary, conninfo, name="failover").start()
        pid = tracker.pid
        load = s.RetryingLoad(lambda: tracker.port, key, workers=4, batch_sizes=(1, 50), seed=40, timeout=30).start()
        time.sleep(3)
        killed = time.time()
        os.kill(primary.postmaster_pid(), signal.SIGQUIT)  # the primary's machine dies
        time.sleep(2)
        promoted = time.time()
        s.as_postgres([f"{s.PG_BIN}/pg_ctl", "-D", standby.data, "-w", "promote"], check=True, capture_output=True)
        recovered = None
        while time.time() - promoted < 60 and recovered is None:
            recovered = first_after(load, promoted, lambda st: st == 200)
            time.sleep(0.1)
        time.sleep(2)
        load.stop()
        load.drain(lambda: tracker.port)
        first = first_after(load, killed, lambda st: st == 503)
        down = answers_between(load, killed, promoted)
        bad = bad_503s(down)
        checks.figure("failover_seconds_to_first_503", None if first is None else round(first, 3))
        checks.figure("failover_seconds_from_promote_to_first_200", None if recovered is None else round(recovered, 3))
        checks.check("503-with-retry-after-while-no-primary-takes-writes", first is not None and not bad,
                     f"first 503 after {first} s; bad answers {[(e[1], e[4][:120]) for e in bad[:3]]}")
        checks.check("ingestion-moves-to-the-promoted-standby-without-a-restart", recovered is not None and tracker.alive() and tracker.pid == pid,
                     f"first 200 {recovered} s after pg_ctl promote; same process {tracker.alive() and tracker.pid == pid}")
        tracker.kill(signal.SIGTERM)
        tracker = None
        s.verify_log(checks, standby, "tracker", load, part="failover")
        s.compare_with_rebuild(checks, binary, standby, "tracker", name="failover.projections-equal-a-rebuild")
    finally:
        if tracker:
            tracker.kill()
        standby.remove()
        primary.remove()


def boot_without_database(checks, binary):
    """`tracker serve` started while PostgreSQL is down: it must serve /healthz, answer 503,
    and take writes once the database is up, without a restart."""
    cluster = s.Cluster("dbboot").start()
    tracker = None
    try:
        url = s.new_database(cluster, binary)
        key = s.create_key(binary, url, "boot-app", "ingest")
        cluster.stop("fast")
        tracker = s.Tracker(binary, url, name="dbboot")
        tracker.start(wait=False)
        healthy = None
        deadline = time.time() + 10
        while time.time() < deadline and tracker.alive():
            try:
                if s.request(tracker.port, "GET", "/healthz", timeout=2).status == 200:
                    healthy = True
                    break
            except OSError:
                pass
            time.sleep(0.2)
        time.sleep(3)
        alive_while_down = tracker.alive()
        answer = None
        if alive_while_down and healthy:
            try:
                answer = s.post_batch(tracker.port, key, s.batch_body([s.event()]), timeout=12).status
            except OSError as error:
                answer = type(error).__name__
        cluster.restart()
        recovered = None
        start = time.time()
        while alive_while_down and tracker.alive() and time.time() - start < 15:
            try:
                if s.post_batch(tracker.port, key, s.batch_body([s.event()]), timeout=5).status == 200:
                    recovered = time.time() - start
                    break
            except OSError:
                pass
            time.sleep(0.2)
        checks.figure("boot_without_database_answer", answer)
        checks.figure("boot_without_database_seconds_to_first_200", None if recovered is None else round(recovered, 2))
        checks.check("boot-without-database.the-tracker-starts-and-answers-503", alive_while_down and healthy and answer == 503,
                     f"started with PostgreSQL down: /healthz {'200' if healthy else 'never 200'}, alive after 3 s: {alive_while_down}, "
                     f"ingest answered {answer}" + ("" if alive_while_down else f"; exit {tracker.process.returncode}: {tracker.log_tail(3).strip()}"))
        checks.check("boot-without-database.ingestion-starts-when-the-database-comes-up", recovered is not None,
                     f"first 200 {recovered} s after PostgreSQL started")
    finally:
        if tracker:
            tracker.kill()
        cluster.remove()


def concurrent_retries(checks, binary, pairs):
    """A client's retry racing its first attempt through two nodes: the same ids in opposite
    orders, written at once. Each id stored once, and no deadlock (each costs a 1 s stall and a 503)."""
    cluster = s.Cluster("dbdeadlock").start()
    trackers = []
    try:
        url = s.new_database(cluster, binary)
        key = s.create_key(binary, url, "retry-app", "ingest")
        trackers = [s.Tracker(binary, url, name=f"dbdeadlock{i}").start() for i in range(2)]
        statuses = {}
        lock = threading.Lock()
        ids = []

        def send(port, body):
            try:
                st = s.post_batch(port, key, body, timeout=30).status
            except OSError as error:
                st = type(error).__name__
            with lock:
                statuses[st] = statuses.get(st, 0) + 1

        for _ in range(pairs):
            events = [s.event(requestId=f"retry-{s.uuid7()}") for _ in range(50)]
            ids += [e["id"] for e in events]
            forward, backward = s.batch_body(events), s.batch_body(list(reversed(events)))
            threads = [threading.Thread(target=send, args=(trackers[0].port, forward)),
                       threading.Thread(target=send, args=(trackers[1].port, backward))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        counts, id_rows = s.log_id_counts(cluster, "tracker")
        with open(os.path.join(cluster.dir, "server.log"), errors="replace") as f:
            deadlocks = f.read().count("deadlock detected")
        doubled = sum(1 for i in ids if counts.get(i, 0) != 1)
        checks.figure("concurrent_retry_pairs", pairs)
        checks.figure("concurrent_retry_answers", {str(k): v for k, v in statuses.items()})
        checks.figure("concurrent_retry_deadlocks", deadlocks)
        checks.check("concurrent-retries.each-id-stored-once", doubled == 0, f"{doubled} of {len(ids)} ids missing or doubled")
        checks.check("concurrent-retries.no-deadlock-and-no-503", deadlocks == 0 and set(statuses) == {200},
                     f"{pairs} pairs of 50-event batches with the same ids in opposite orders through two trackers: "
                     f"answers {statuses}, {deadlocks} deadlocks in PostgreSQL's log")
    finally:
        for t in trackers:
            t.kill()
        cluster.remove()


def main():
    checks = s.Checks("db")
    binary = s.tracker_binary()
    cycles = int(os.environ.get("SUITE_CYCLES", "2" if s.mode() == "short" else "24"))
    parts = os.environ.get("SUITE_PARTS", "cycles,boot,frozen,async,retries,full,failover").split(",")
    if "cycles" in parts:
        stop_restart_cycles(checks, binary, cycles)
    if "boot" in parts:
        boot_without_database(checks, binary)
    if "frozen" in parts:
        frozen_and_locked(checks, binary)
    if "async" in parts:
        asynchronous_commit_default(checks, binary, tries=2 if s.mode() == "short" else 10)
    if "retries" in parts:
        concurrent_retries(checks, binary, pairs=100 if s.mode() == "short" else 300)
    if "full" in parts:
        disk_full(checks, binary, size_mib=24 if s.mode() == "short" else 64)
    if "failover" in parts:
        failover(checks, binary)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
