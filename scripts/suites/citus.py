"""The tracker on Citus: a coordinator and two workers on loopback (make test-citus).

    python3 scripts/suites/citus.py              the whole suite (scripts/test-citus.sh runs it);
                                                 CITUS_PARTS=part,part runs only those parts
    python3 scripts/suites/citus.py add-database NAME
                                                 a Citus database NAME on the suite's clusters
                                                 (CITUS_PORTS="coordinator worker worker"): how
                                                 the contract tests get theirs

What it checks, against the real binary and real clusters:
- `tracker migrate` distributes the log (events, event_ids, ad_state), one checkpoint per shard;
- the HTTP contract (Tests/Python/test_contract.py) against a tracker on the coordinator;
- under a retrying load through three SIGKILLs of the tracker and a restart of one worker, every
  acknowledged event is in the log exactly once and counted exactly once by the projections;
- a worker restarted four times in the middle of appends (fast and immediate shutdowns): every
  answer is 200 or 503 with Retry-After, none waits past the client's timeout, appends succeed
  again soon after the worker is back, and every acknowledged event is stored once;
- the reports equal the reference computation (scripts/bench/exact/, the report rules as SQL
  over the raw log) and a single-node tracker's reports over a copy of the same log, in UTC
  and in a time zone by hour;
- the projections equal a rebuild, with an invalid-traffic rule set that labels events too;
- a report asked right after an append counts it; its lag is 0 once every event is projected and
  never 0 while events wait (a key scoped to networks sees only theirs);
- the lag is never 0 while events wait (no projector running), and /readyz answers it with every
  waiting event when a shard moves between its listing of the shards and its read on the worker
  and Citus drops the old placement in between (a 503 is never read as a lag);
- retention drops an old day on every shard, and its ids, once projected;
- every process connects as its least-privilege role (tracker_ingest, _projector, _report).
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s

# Citus, and what moving rows between nodes needs (distributing a log that holds events, the
# rebalancer): logical decoding with Citus's own output plugin, and room for the replication's
# background workers, slots and senders (docs/OPERATIONS.md, "On Citus").
CITUS_CONF = ("shared_preload_libraries = 'citus'\nmax_prepared_transactions = 200\nwal_level = logical\n"
              "output_plugin_libraries = 'pgoutput, test_decoding, citus'\nmax_worker_processes = 32\n"
              "max_replication_slots = 16\nmax_wal_senders = 16\n")
REPORTS = ["summary", "assets", "sources", "adchoices", "ivt"]
EXACT = ["summary", "assets", "sources", "adchoices"]
# Every projection table, for the comparison with a rebuild (suitelib's list and the rest).
PROJECTIONS = dict(s.PROJECTION_TABLES, **{
    "format_quarters": "traffic_class, quarters_from, ad_unit, format_id",
    "asset_quarters": "traffic_class, quarters_from, ad_unit, format_id, asset_key",
    "source_quarters": "traffic_class, quarters_from, ad_unit, format_id, adapter",
    "ivt_day": "day, ad_unit, format_id, label",
    "ivt_quarters": "quarters_from, ad_unit, format_id, label",
})


def psql_at(port, database, sql, check=True):
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1",
                        f"postgresql://postgres@127.0.0.1:{port}/{database}", "-c", sql],
                       capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise RuntimeError(f"psql on {port} failed: {r.stderr.strip()}\n{sql}")
    return [line.split("\t") for line in r.stdout.splitlines() if line != ""]


def add_database(ports, name):
    """A database on every node with the citus extension, its coordinator and workers known."""
    coordinator, workers = ports[0], ports[1:]
    for port in ports:
        psql_at(port, "postgres", f"CREATE DATABASE {name}")
        psql_at(port, name, "CREATE EXTENSION citus")
    psql_at(coordinator, name, f"SELECT citus_set_coordinator_host('127.0.0.1', {coordinator})")
    for port in workers:
        psql_at(coordinator, name, f"SELECT citus_add_node('127.0.0.1', {port})")
    return f"postgresql://postgres@127.0.0.1:{coordinator}/{name}"


def role_url(port, database, role):
    return f"postgresql://{role}@127.0.0.1:{port}/{database}"


def snapshot(cluster, database):
    out = {}
    for table, order in PROJECTIONS.items():
        out[table] = [r[0] for r in cluster.psql(f"SELECT t::text FROM {table} t ORDER BY {order}", database)]
    return out


def compare_snapshots(a, b):
    differences = []
    for table in PROJECTIONS:
        if a[table] != b[table]:
            differences.append(f"{table}: {len(a[table])} vs {len(b[table])} rows; only first {sorted(set(a[table]) - set(b[table]))[:2]}; "
                               f"only second {sorted(set(b[table]) - set(a[table]))[:2]}")
    return differences


def reports(binary, url, first, last, extra=()):
    out = {}
    for r in REPORTS:
        out[r] = s.run_tracker_command(binary, ["report", r, "--from", first, "--to", last, "--output", "csv", *extra], url)
    return out


def copy_log(coordinator, source, reference):
    """The Citus log's rows into a single-node database (tx and seq stamped there again)."""
    columns = ("id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea, reservation, test, "
               "attributes, occurred_at, sent_at, received_at, corrected_at, key_name, client_ip, user_agent_id")
    dump = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", coordinator.url(source), "-c",
                           f"\\copy (SELECT {columns} FROM events) TO STDOUT"], capture_output=True, check=True)
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", coordinator.url(reference), "-c",
                    f"\\copy events ({columns}) FROM STDIN"], input=dump.stdout, check=True, capture_output=True)
    agents = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", coordinator.url(source), "-c",
                             "\\copy (SELECT id, user_agent FROM user_agents) TO STDOUT"], capture_output=True, check=True)
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", coordinator.url(reference), "-c",
                    "\\copy user_agents (id, user_agent) FROM STDIN"], input=agents.stdout, check=True, capture_output=True)
    coordinator.psql("INSERT INTO event_ids SELECT id FROM events", reference)


def exact_rows(cluster, database, report, first, last):
    """A report by the reference computation: the report rules as SQL over the raw log."""
    bench = os.path.join(s.ROOT, "scripts", "bench", "exact")
    with open(os.path.join(bench, "base.sql")) as f:
        sql = f.read()
    with open(os.path.join(bench, report + ".sql")) as f:
        sql += f.read()
    sql = sql.replace("@FROM@", first).replace("@TO@", last)
    prologue = ("CREATE TEMP VIEW ev AS SELECT request_id, id::text AS id, type::text AS type, corrected_at AT TIME ZONE 'UTC' AS ts, "
                "ad_unit, format_id, asset_key, source::text AS source, adapter, eea, reservation, test FROM events;\n")
    r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "--csv", cluster.url(database)],
                       input=prologue + sql, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"exact {report}: {r.stderr.strip()}")
    return r.stdout


def same_rows(tracker_csv, other_csv):
    """scripts/bench/duckdb_reports.py's comparison: None when the reference computation has
    exactly the tracker's rows, else what differs."""
    sys.path.insert(0, os.path.join(s.ROOT, "scripts", "bench"))
    import duckdb_reports
    import tempfile
    paths = []
    try:
        for text in (tracker_csv, other_csv):
            with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
                f.write(text)
            paths.append(f.name)
        return duckdb_reports.difference(*paths)
    finally:
        for p in paths:
            os.unlink(p)


def send(port, key, events, user_agent=None):
    extra = {"User-Agent": user_agent} if user_agent else None
    r = s.post_batch(port, key, s.batch_body(events), extra=extra)
    if r.status != 200:
        raise RuntimeError(f"batch refused: {r.status} {r.body[:200]!r}")
    return r.json()


def send_until_stored(port, key, events, seconds=180):
    """`send`, retried as SPEC 1 tells a client to retry a 503 (after its Retry-After): a move's
    last phase holds the writes to its shards, and the tracker answers 503 then; with the new
    worker restarted in the middle of a move, on a loaded machine, that phase can hold them
    past a minute."""
    deadline = time.time() + seconds
    while True:
        r = s.post_batch(port, key, s.batch_body(events))
        if r.status != 503 or time.time() > deadline:
            break
        time.sleep(float(r.headers.get("retry-after", "1")))
    if r.status != 200:
        raise RuntimeError(f"batch refused: {r.status} {r.body[:200]!r}")
    return r.json()


# How long after a restarted worker accepts connections again the appends must succeed: the
# client's Retry-After (2 s) and a reconnection from the coordinator, with room for a slow machine.
RECOVERY_BOUND_SECONDS = 15


def worker_restarts_under_appends(checks, binary, coordinator, ports, worker, rng, trackers):
    """A worker restarted four times while a retrying load appends (its own database, so the log
    holds only this load's events). A worker that is gone is the database unavailable for the
    appends that need it: 503 with Retry-After, whatever form Citus gives the failure (a broken
    COPY to a shard, a failed essential connection, a connection closed while a command ran)."""
    part, database = "worker-restart", "restarts"
    url = add_database(ports, database)
    s.run_tracker_command(binary, ["migrate"], url)
    key = s.create_key(binary, url, "citus-restarts", "ingest")
    port = s.free_port()
    tracker = s.Tracker(binary, url, port=port, name="citus-restarts").start()
    trackers.append(tracker)
    # Two clients with large batches: most groups hold one submission and a COPY to the worker
    # is often under way when it goes (a failed group of several is written again one
    # submission at a time, which can hide the failure's answer).
    load = s.RetryingLoad(lambda: port, key, workers=2, batch_sizes=(200, 500), seed=rng.random())
    load.start()
    restarts = []
    try:
        time.sleep(2)
        for how in ("fast", "immediate") * 2:
            s.log(f"stopping worker 1 ({how}) in the middle of appends")
            down = time.time()
            worker.stop(how)
            time.sleep(2)
            worker.start()
            up = time.time()
            restarts.append((how, down, up))
            while time.time() < up + RECOVERY_BOUND_SECONDS and not any(e[1] == 200 and e[0] >= up for e in list(load.timeline)):
                time.sleep(0.2)
            time.sleep(1)
    finally:
        load.stop()
    # A worker stopped at once can leave two-phase commits in doubt: acknowledged (the
    # coordinator committed), their rows on it invisible, and their ids holding back retries,
    # until Citus commits them (its maintenance daemon does every citus.recover_2pc_interval).
    recovered, in_doubt = 0, None
    for _ in range(30):
        recovered += int(coordinator.psql("SELECT recover_prepared_transactions()", database)[0][0])
        in_doubt = sum(int(psql_at(p, database, "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()")[0][0])
                       for p in ports[1:])
        if in_doubt == 0:
            break
        time.sleep(1)
    checks.figure("worker_restart_commits_recovered", recovered)
    checks.figure("worker_restart_commits_still_in_doubt", in_doubt)
    load.drain(lambda: port)
    timeline = list(load.timeline)
    checks.figure("worker_restart_answers", load.statuses())
    unexpected = [e for e in timeline if e[1] not in (200, 503)]
    # An answer slower than the client's timeout shows as 'conn'.
    checks.check(f"{part}.only-200-or-503-while-a-worker-restarts", not unexpected and timeline,
                 f"{len(timeline)} answers within {load.timeout} s {load.statuses()}"
                 + "".join(f"; {e[1]} {e[4]!r}" for e in unexpected[:3]))
    silent = [e for e in timeline if e[1] == 503 and not (e[2] or "").isdigit()]
    checks.check(f"{part}.every-503-says-when-to-retry", not silent,
                 f"{sum(1 for e in timeline if e[1] == 503)} answers 503, {len(silent)} without Retry-After")
    while_down = [sum(1 for e in timeline if down <= e[0] <= up) for _, down, up in restarts]
    checks.check(f"{part}.appends-are-answered-while-the-worker-is-down", all(n > 0 for n in while_down),
                 "answers while down: " + ", ".join(f"{how} {n}" for (how, _, _), n in zip(restarts, while_down)))
    back = []
    for how, _, up in restarts:
        first = min((e[0] for e in timeline if e[1] == 200 and e[0] >= up), default=None)
        back.append((how, None if first is None else round(first - up, 1)))
    checks.check(f"{part}.appends-succeed-again-within-{RECOVERY_BOUND_SECONDS}-s-of-the-workers-return",
                 all(b is not None and b <= RECOVERY_BOUND_SECONDS for _, b in back),
                 "; ".join(f"{how}: first 200 after {b} s" for how, b in back))
    s.verify_log(checks, coordinator, database, load, part=part)


def readyz_lag(port):
    """The events /readyz says the projections trail the log, or what it answered instead (its
    status, time and body) when that is not a 200 with the lag."""
    started = time.time()
    r = s.request(port, "GET", "/readyz")
    lag = json.loads(r.body).get("projectionLag", {}).get("events") if r.status == 200 else None
    if isinstance(lag, int):
        return lag
    return f"{r.status} after {time.time() - started:.2f} s: {r.body[:300].decode(errors='replace')}"


def readyz_lag_when_ready(port, refusals, seconds=30):
    """`readyz_lag`, asked again a second later as a readiness probe does: while a worker
    restarts or a move ends, the lag cannot be read and /readyz says so (never a lag of 0).
    Each such answer goes to `refusals`; what is returned is the first lag read, or the last
    answer when none came within `seconds`."""
    deadline = time.time() + seconds
    while True:
        answer = readyz_lag(port)
        if isinstance(answer, int) or time.time() > deadline:
            return answer
        refusals.append(answer)
        time.sleep(1)


def in_doubt_commit(checks, binary, coordinator, ports, rng, trackers):
    """A two-phase commit left in doubt: the coordinator committed (the client had its 200) but
    the row's part on a worker is still prepared, as when a worker fails at COMMIT PREPARED. The
    row is stamped below the coordinator's horizon, so a reader that trusted that horizon alone
    would move past it and never count it. Made by hand here: the row is prepared on the
    worker before the transaction whose id it carries commits on the coordinator, Citus's order."""
    part, database = "in-doubt-commit", "indoubt"
    url = add_database(ports, database)
    s.run_tracker_command(binary, ["migrate"], url)
    key = s.create_key(binary, url, "citus-indoubt", "ingest")
    port = s.free_port()
    tracker = s.Tracker(binary, url, env={"TRACKER_PROJECTOR": "off"}, port=port, name="citus-indoubt").start()
    trackers.append(tracker)
    send(port, key, [s.random_event(rng) for _ in range(30)])
    s.run_tracker_command(binary, ["project", "--once"], url, timeout=300)
    ad = "held-ad"
    shard, node = coordinator.psql(f"""
        SELECT s.shardid, n.nodeport FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
        JOIN pg_dist_node n USING (groupid)
        WHERE s.shardid = get_shard_id_for_distribution_column('events', '{ad}')""", database)[0]
    held = s.uuid7()
    script = f"""
        BEGIN;
        SELECT pg_current_xact_id() AS x \\gset
        \\setenv HELD_TX :x
        \\! psql -X -q -v ON_ERROR_STOP=1 postgresql://postgres@127.0.0.1:{node}/{database} -c "BEGIN; INSERT INTO events_{shard} (tx, seq, id, type, request_id, ad_unit, format_id, source, eea, reservation, test, occurred_at, received_at, corrected_at, key_name) VALUES ('$HELD_TX', 1, '{held}', 'impression', '{ad}', '/1234/home/native', 'native', 'app', false, false, false, now(), now(), now(), 'citus-indoubt'); PREPARE TRANSACTION 'citus_suite_in_doubt'"
        INSERT INTO event_ids VALUES ('{held}');
        COMMIT;
        """
    r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", coordinator.url(database)], input=script,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"in-doubt setup: {r.stderr.strip()}")
    projector = subprocess.Popen([binary, "project"], env=dict(os.environ, DATABASE_URL=url, TRACKER_LOG_LEVEL="warning"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        later = [s.random_event(rng) for _ in range(20)]
        send(port, key, later)
        time.sleep(3)
        samples = [readyz_lag(port) for _ in range(5)]
        checkpoint = coordinator.psql(f"SELECT checkpoint_tx::text FROM log_shards WHERE shard_id = {shard}", database)[0][0]
        held_projected = coordinator.psql(f"SELECT count(*) FROM ad_events WHERE id = '{held}'", database)[0][0]
        checks.check(f"{part}.nothing-is-read-past-a-prepared-transaction-stamped-below-the-horizon",
                     held_projected == "0" and all(isinstance(n, int) and n >= len(later) for n in samples),
                     f"held event projected {held_projected} times while prepared; lag {samples}; its shard's checkpoint {checkpoint}")
        psql_at(int(node), database, "COMMIT PREPARED 'citus_suite_in_doubt'")
        deadline = time.time() + 60
        while time.time() < deadline and readyz_lag(port) != 0:
            time.sleep(0.2)
        logged = int(coordinator.psql("SELECT count(*) FROM events", database)[0][0])
        projected = coordinator.psql(f"SELECT (SELECT events_projected FROM projection_state), (SELECT count(*) FROM ad_events), "
                                     f"(SELECT count(*) FROM ad_events WHERE id = '{held}')", database)[0]
        checks.check(f"{part}.once-committed-it-is-projected-once",
                     projected[2] == "1" and int(projected[0]) == logged and int(projected[1]) == logged,
                     f"{logged} logged; projected {projected[0]}, in ad_state {projected[1]}, the held event {projected[2]} times")
    finally:
        projector.kill()
        projector.wait()
        psql_at(int(node), database, "ROLLBACK PREPARED 'citus_suite_in_doubt'", check=False)


class Session:
    """A psql session kept open, one statement at a time: a transaction held across the steps
    of a scenario."""

    def __init__(self, port, database):
        self.process = subprocess.Popen(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                                         f"postgresql://postgres@127.0.0.1:{port}/{database}"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)

    def run(self, sql):
        """Runs `sql` and waits until it ended (psql answers a marker after it)."""
        self.process.stdin.write(f"{sql};\nSELECT 'session-step-done';\n")
        self.process.stdin.flush()
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"psql session ended: {self.process.stderr.read().strip()}\n{sql}")
            if line.strip() == "session-step-done":
                return

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def lag_across_a_move(checks, binary, coordinator, ports, rng, trackers):
    """A lag read that lists a shard on the worker it is leaving and reaches that worker only after
    the move committed and Citus dropped the old placement, as the rebalancer's next move does at
    its start: /readyz still answers with every waiting event. The read is held at the worker by
    a lock on the worker's first shard (which stays), so the order of events is certain."""
    part, database = "lag-across-a-move", "moving"
    url = add_database(ports, database)
    s.run_tracker_command(binary, ["migrate"], url)
    key = s.create_key(binary, url, "citus-moving", "ingest")
    port = s.free_port()
    trackers.append(s.Tracker(binary, url, env={"TRACKER_PROJECTOR": "off"}, port=port, name="citus-moving").start())
    send(port, key, [s.random_event(rng) for _ in range(300)])
    logged = int(coordinator.psql("SELECT count(*) FROM events", database)[0][0])
    source, target = ports[1], ports[2]
    on_source = [(int(r[0]), r[1]) for r in coordinator.psql(
        f"SELECT s.shardid, shard_name('events'::regclass, s.shardid) FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid) "
        f"JOIN pg_dist_node n USING (groupid) WHERE s.logicalrelid = 'events'::regclass AND n.nodeport = {source} ORDER BY 1", database)]
    (_, first), (moving, moving_table) = on_source[0], max(
        on_source[1:], key=lambda shard: int(psql_at(source, database, f"SELECT count(*) FROM {shard[1]}")[0][0]))
    before = readyz_lag(port)
    mover, holder = Session(ports[0], database), Session(source, database)
    reader = {}
    try:
        # The move, made but not committed: the read's listing still names the source.
        mover.run("BEGIN")
        mover.run(f"SELECT citus_move_shard_placement({moving}, '127.0.0.1', {source}, '127.0.0.1', {target}, "
                  "shard_transfer_mode => 'block_writes')")
        holder.run("BEGIN")
        holder.run("SET LOCAL citus.enable_manual_changes_to_shards = on")
        holder.run(f"LOCK TABLE {first} IN ACCESS EXCLUSIVE MODE")
        asking = threading.Thread(target=lambda: reader.update(lag=readyz_lag(port)))
        asking.start()
        deadline, waiting = time.time() + 10, False
        while time.time() < deadline and not waiting:
            time.sleep(0.02)
            waiting = psql_at(source, database, f"SELECT count(*) FROM pg_locks WHERE relation = '{first}'::regclass AND NOT granted")[0][0] != "0"
        mover.run("COMMIT")
        coordinator.psql("CALL citus_cleanup_orphaned_resources()", database)
        dropped = psql_at(source, database, f"SELECT to_regclass('{moving_table}') IS NULL")[0][0] == "t"
        holder.run("COMMIT")
        asking.join(timeout=30)
    finally:
        mover.close()
        holder.close()
    checks.check(f"{part}.the-read-reaches-the-source-after-the-old-placement-is-dropped", waiting and dropped,
                 f"the read waited at {first}: {waiting}; {moving_table} on {source} dropped before it went on: {dropped}")
    checks.check(f"{part}.readyz-counts-every-waiting-event", before == logged and reader.get("lag") == logged,
                 f"{logged} events waiting; /readyz said {before} before the move and {reader.get('lag')} across it")
    after = readyz_lag(port)
    checks.check(f"{part}.the-moved-shard-is-counted-on-its-new-worker", after == logged,
                 f"{logged} events waiting; /readyz says {after} once shard {moving} is on {target}")


def read_your_writes(checks, binary, coordinator, worker, ports, rng, trackers):
    """Append, then ask a report at once, 50 times: each report counts the batch just
    acknowledged (SPEC's read-your-writes). The p50 of those reports is a figure. Caught up, a
    report is answered from the coordinator alone (the appends' marks): it answers while a
    worker is frozen."""
    part, database = "read-your-writes", "ryw"
    url = add_database(ports, database)
    s.run_tracker_command(binary, ["migrate"], url)
    key = s.create_key(binary, url, "citus-ryw", "ingest")
    report_key = s.create_key(binary, url, "citus-ryw-report", "report")
    port = s.free_port()
    trackers.append(s.Tracker(binary, url, port=port, name="citus-ryw").start())
    today = time.strftime("%Y-%m-%d", time.gmtime())
    missed, seconds = [], []
    for i in range(50):
        unit = f"/1234/ryw{i}/native"
        send(port, key, [s.event(requestId=f"ryw-{i}-{n}", adUnit=unit) for n in range(5)])
        started = time.time()
        r = s.request(port, "GET", f"/v1/reports/summary?from={today}&to={today}&adUnit=%2F1234%2Fryw{i}%2Fnative",
                      {"Authorization": f"Bearer {report_key}"})
        seconds.append(time.time() - started)
        shown = sum(row.get("impressions", 0) for row in (r.json() or {}).get("rows", [])) if r.status == 200 else None
        if shown != 5:
            missed.append((i, r.status, shown))
    seconds.sort()
    checks.figure("read_your_writes_report_p50_ms", round(seconds[len(seconds) // 2] * 1000, 1))
    checks.check(f"{part}.a-report-right-after-an-append-counts-it", not missed,
                 f"50 appends each followed by a report; {len(missed)} did not count their batch {missed[:3]}")

    # The lag a report answers with: 0 once every event is projected (the wait's one pass over
    # the workers found none waiting), never 0 while events wait on a shard, and for a key
    # scoped to networks only theirs.
    def report_lag(bearer):
        r = s.request(port, "GET", f"/v1/reports/summary?from={today}&to={today}", {"Authorization": f"Bearer {bearer}"})
        return int(r.headers["x-projection-lag-events"]) if r.status == 200 else (r.status, r.body[:200])
    ours = s.run_tracker_command(binary, ["keys", "create", "--name", "citus-ryw-1234", "--scope", "report",
                                          "--networks", "1234"], url).strip().splitlines()[-1]
    others = s.run_tracker_command(binary, ["keys", "create", "--name", "citus-ryw-5678", "--scope", "report",
                                            "--networks", "5678"], url).strip().splitlines()[-1]
    caught_up = report_lag(report_key) if wait_caught_up(port) else "did not catch up"
    frozen = worker.server_pids()
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.time()
        r = s.request(port, "GET", f"/v1/reports/summary?from={today}&to={today}", {"Authorization": f"Bearer {report_key}"},
                      timeout=20)
        answer = (r.status, r.headers.get("x-projection-lag-events"),
                  sum(row.get("impressions", 0) for row in (r.json() or {}).get("rows", [])) if r.status == 200 else r.body[:200],
                  round(time.time() - started, 1))
    except OSError as error:
        answer = (type(error).__name__, None, None, round(time.time() - started, 1))
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    checks.check(f"{part}.a-caught-up-report-asks-no-worker", answer[:3] == (200, "0", 250) and answer[3] < 5,
                 f"a report with every event projected and one worker frozen: status, lag, impressions, seconds = {answer} "
                 "(expected 200, 0, 250 in under 5 s)")

    # A rebuild swaps in checkpoints with no drained horizons yet: a report right after an
    # append still counts it (it asks the workers until the projector has read past them).
    s.run_tracker_command(binary, ["rebuild"], url, timeout=900)
    missed_after_rebuild = batches_a_report_missed(port, key, report_key, "ryw-rebuilt", 5)
    checks.check(f"{part}.right-after-a-rebuild-a-report-counts-the-batch-just-acknowledged", not missed_after_rebuild,
                 f"5 appends each followed by a report after tracker rebuild; {len(missed_after_rebuild)} did not count "
                 f"their batch {missed_after_rebuild[:3]}")
    trackers[-1].kill(signal.SIGTERM)
    trackers.append(s.Tracker(binary, url, env={"TRACKER_PROJECTOR": "off"}, port=port, name="citus-ryw-held").start())
    send(port, key, [s.event(requestId=f"ryw-held-{n}", adUnit="/1234/ryw-held/native") for n in range(7)])
    waiting = {"unscoped": report_lag(report_key), "1234": report_lag(ours), "5678": report_lag(others)}
    checks.check(f"{part}.a-report-gives-lag-0-when-caught-up-and-never-while-events-wait",
                 caught_up == 0 and waiting["unscoped"] == 7 and waiting["1234"] == 7 and waiting["5678"] == 0,
                 f"caught up: {caught_up}; with 7 events of network 1234 waiting: {waiting}")


def batches_a_report_missed(port, key, report_key, name, rounds):
    """Appends `rounds` batches of 3 impressions, each of an ad unit of its own and each followed
    at once by a report of that ad unit: the batches a report did not count, as (round, status,
    impressions shown)."""
    today = time.strftime("%Y-%m-%d", time.gmtime())
    missed = []
    for i in range(rounds):
        unit = f"/1234/{name}{i}/native"
        send(port, key, [s.event(requestId=f"{name}-{i}-{n}", adUnit=unit) for n in range(3)])
        r = s.request(port, "GET", f"/v1/reports/summary?from={today}&to={today}&adUnit={unit.replace('/', '%2F')}",
                      {"Authorization": f"Bearer {report_key}"})
        shown = sum(row.get("impressions", 0) for row in (r.json() or {}).get("rows", [])) if r.status == 200 else None
        if shown != 3:
            missed.append((i, r.status, shown))
    return missed


def marks_on_a_log_distributed_before_them(checks, binary, coordinator, ports, trackers):
    """A log distributed by a version without the appends' marks gets them from `tracker
    migrate` (migration 19's block for a log already distributed): its appends mark, and a
    report right after an append counts it. The older version's state is made by taking away
    what migration 19 adds, as it was before it ran; a log whose rows still carry their
    workers' order (distributed before the coordinator stamped them) is not made here."""
    part, database = "read-your-writes", "premarks"
    url = add_database(ports, database)
    s.run_tracker_command(binary, ["migrate"], url)
    coordinator.psql("DROP FUNCTION tracker_mark_append(); DROP TABLE log_marks; "
                     "ALTER TABLE log_shards DROP COLUMN drained_below; DELETE FROM schema_migrations WHERE version = 19", database)
    s.run_tracker_command(binary, ["migrate"], url)
    function = coordinator.psql("SELECT l.lanname, p.prosecdef FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
                                "WHERE p.proname = 'tracker_mark_append'", database)
    key = s.create_key(binary, url, "citus-premarks", "ingest")
    report_key = s.create_key(binary, url, "citus-premarks-report", "report")
    port = s.free_port()
    trackers.append(s.Tracker(binary, url, port=port, name="citus-premarks").start())
    missed = batches_a_report_missed(port, key, report_key, "premarks", 20)
    marks = coordinator.psql("SELECT count(*) FROM log_marks WHERE backend <> 0", database)[0][0]
    horizons = coordinator.psql("SELECT count(*) FILTER (WHERE drained_below IS NOT NULL), count(*) FROM log_shards", database)[0]
    checks.check(f"{part}.a-log-distributed-before-the-marks-gets-them-from-migrate",
                 function == [["plpgsql", "t"]] and int(marks) >= 1 and not missed and horizons[0] == horizons[1],
                 f"tracker_mark_append after migrate: {function} (expected plpgsql, security definer); connections with a mark "
                 f"{marks}; shards with a horizon {horizons[0]} of {horizons[1]}; 20 appends each followed by a report, "
                 f"{len(missed)} did not count their batch {missed[:3]}")
    trackers[-1].kill(signal.SIGTERM)
    # Nothing of it stays: each database's Citus maintenance daemon keeps connections to the
    # workers, and a later part restarts a worker with few connections to spare.
    for node in ports:
        psql_at(node, "postgres", f"DROP DATABASE {database} WITH (FORCE)")


def stage_single_node(binary, clusters, database):
    """A tracker database on the coordinator with the citus extension on every node but no worker
    yet: the log in one table, as a single node holds it."""
    coordinator = clusters[0]
    for c in clusters:
        c.psql(f"CREATE DATABASE {database}")
        c.psql("CREATE EXTENSION citus", database)
    coordinator.psql(f"SELECT citus_set_coordinator_host('127.0.0.1', {coordinator.port})", database)
    url = coordinator.url(database)
    s.run_tracker_command(binary, ["migrate"], url)
    return url


def old_day_events(coordinator, database, days_ago, n):
    """`n` events received `days_ago` days back (their own partition), written as a reconciliation
    of an older day would be: through the coordinator, stamped by it. Returns their ids."""
    coordinator.psql(f"SELECT tracker_ensure_event_partitions(current_date - {days_ago}, current_date - {days_ago})", database)
    return {row[0] for row in coordinator.psql(f"""
        WITH ids AS (INSERT INTO event_ids SELECT gen_random_uuid() FROM generate_series(1, {n}) RETURNING id)
        INSERT INTO events (id, type, request_id, ad_unit, format_id, source, eea, reservation, test,
                            occurred_at, received_at, corrected_at, key_name)
        SELECT id, CASE WHEN row_number() OVER () % 4 = 0 THEN 'click' ELSE 'impression' END::event_type,
               'old-' || (row_number() OVER () % 97), '/1234/home/native', 'native', 'app', false, false, false,
               now() - interval '{days_ago} days', now() - interval '{days_ago} days', now() - interval '{days_ago} days', 'citus-suite'
        FROM ids
        RETURNING id::text""", database)}


def wait_caught_up(port, seconds=300):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if readyz_lag(port) == 0:
            return True
        time.sleep(0.3)
    return False


def migrate_killed_after_each_step(binary, url):
    """`tracker migrate`, killed (SIGKILL) as soon as it reports a finished step, then run again
    until a run finishes; once also in the middle of the log's own step. Returns each run's output."""
    outputs, killed_mid_step = [], False
    for _ in range(12):
        process = subprocess.Popen([binary, "migrate"], env=dict(os.environ, DATABASE_URL=url, TRACKER_LOG_LEVEL="warning"),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in process.stdout:
            lines.append(line.rstrip())
            if "step user-agents done" in line and not killed_mid_step:
                killed_mid_step = True
                time.sleep(1.5)  # into the concurrent copy of the log
                process.kill()
                break
            if "done (" in line:
                process.kill()
                break
        process.wait()
        outputs.append(lines)
        if process.returncode == 0:
            return outputs
    raise RuntimeError(f"tracker migrate did not finish after {len(outputs)} runs: {outputs[-1]}")


def set_workers_max_connections(workers, value):
    """Restarts the workers with max_connections at value (None: the suite's own again)."""
    for w in workers:
        w.psql("ALTER SYSTEM RESET max_connections" if value is None else f"ALTER SYSTEM SET max_connections = {int(value)}")
        w.stop("fast")
        w.start()


def a_node_without_shards_is_only_asked_to_answer(checks, binary, clusters):
    """The copy of a log that holds events opens no connection on a node that takes no shards
    (shouldhaveshards false): the preflight asks it only to answer, however few connections it
    has free. A database of its own, distributed onto the other worker."""
    part, database = "distribute-in-place", "noshards"
    coordinator, workers = clusters[0], clusters[1:]
    url = stage_single_node(binary, clusters, database)
    old_day_events(coordinator, database, 2, 200)
    for w in workers:
        coordinator.psql(f"SELECT citus_add_node('127.0.0.1', {w.port})", database)
    coordinator.psql(f"SELECT citus_set_node_property('127.0.0.1', {workers[1].port}, 'shouldhaveshards', false)", database)
    set_workers_max_connections(workers[1:], 28)
    try:
        run = subprocess.run([binary, "migrate"], env=dict(os.environ, DATABASE_URL=url, TRACKER_LOG_LEVEL="warning"),
                             capture_output=True, text=True, timeout=600)
    finally:
        set_workers_max_connections(workers[1:], None)
    placed = coordinator.psql("SELECT n.nodeport, count(*) FROM pg_dist_shard d JOIN pg_dist_placement p ON p.shardid = d.shardid "
                              "JOIN pg_dist_node n ON n.groupid = p.groupid WHERE d.logicalrelid = 'events'::regclass "
                              "GROUP BY 1", database)
    checks.check(f"{part}.a-node-that-takes-no-shards-is-only-asked-to-answer",
                 run.returncode == 0 and {int(port) for port, _ in placed} == {workers[0].port},
                 f"worker {workers[1].port} with shouldhaveshards false and max_connections 28: exit {run.returncode} "
                 f"{run.stderr.strip()[-300:]}; the log's shards by port {placed}")


def distribute_in_place(checks, binary, clusters, rng, trackers):
    """A single-node tracker database with events, projections, keys and a rule set becomes a
    Citus coordinator with workers while a retrying load goes on and the projector runs:
    tracker migrate distributes the log in steps, killed after each one and rerun."""
    part, database = "distribute-in-place", "inplace"
    coordinator, workers = clusters[0], clusters[1:]
    url = stage_single_node(binary, clusters, database)
    key = s.create_key(binary, url, "citus-inplace", "ingest")
    rules = os.path.join(coordinator.dir, "ivt-inplace.json")
    with open(rules, "w") as f:
        json.dump({"name": "citus-inplace", "userAgents": [{"pattern": "ExampleBot"}], "maxEventsPerClientMinute": 30}, f)
    s.run_tracker_command(binary, ["ivt", "activate", rules], url)
    written_beside = old_day_events(coordinator, database, 3, 4000)
    port = s.free_port()
    tracker = s.Tracker(binary, url, port=port, name="citus-inplace").start()
    trackers.append(tracker)
    # The older day's reports once the projector has read it, before the load (its events are
    # of today): a report asked while the projector still reads may answer early, with its lag.
    old = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 3 * 86400))
    if not wait_caught_up(port):
        raise RuntimeError("the single node's projector did not catch up with the older day")
    before = reports(binary, url, old, old)
    load = s.RetryingLoad(lambda: port, key, workers=3, batch_sizes=(1, 60), seed=rng.random())
    load.start()
    try:
        time.sleep(4)

        # A worker that does not answer: a clear error naming it, nothing changed.
        for w in workers:
            coordinator.psql(f"SELECT citus_add_node('127.0.0.1', {w.port})", database)
        workers[1].stop("fast")
        try:
            refused = subprocess.run([binary, "migrate"], env=dict(os.environ, DATABASE_URL=url, TRACKER_LOG_LEVEL="warning"),
                                     capture_output=True, text=True, timeout=300)
        finally:
            workers[1].start()
        distributed = coordinator.psql("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text IN "
                                       "('events', 'event_ids', 'ad_state', 'user_agents')", database)[0][0]
        checks.check(f"{part}.an-unreachable-worker-is-named-and-nothing-changes",
                     refused.returncode != 0 and f":{workers[1].port}" in refused.stderr and distributed == "0",
                     f"exit {refused.returncode}: {refused.stderr.strip()[-300:]}; {distributed} tables distributed")

        # The copy holds a connection per shard on every worker for each partition it copies
        # at once: a worker without room for one copy is named before anything changes, and
        # PostgreSQL's default of 100 connections is room enough.
        set_workers_max_connections(workers, 28)
        try:
            crowded = subprocess.run([binary, "migrate"], env=dict(os.environ, DATABASE_URL=url, TRACKER_LOG_LEVEL="warning"),
                                     capture_output=True, text=True, timeout=300)
            distributed = coordinator.psql("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text IN "
                                           "('events', 'event_ids', 'ad_state', 'user_agents')", database)[0][0]
            checks.check(f"{part}.a-worker-without-connections-for-the-copy-is-named-and-nothing-changes",
                         crowded.returncode != 0 and "max_connections" in crowded.stderr and distributed == "0",
                         f"exit {crowded.returncode}: {crowded.stderr.strip()[-300:]}; {distributed} tables distributed")
        finally:
            set_workers_max_connections(workers, 100)
        started = time.time()
        outputs = migrate_killed_after_each_step(binary, url)
        checks.figure("distribute_in_place_seconds", round(time.time() - started, 1))
        checks.figure("distribute_in_place_runs", len(outputs))
        said = "\n".join(line for o in outputs for line in o)
        # No step done twice. A run killed in the middle of a step can leave its statement to
        # finish on the server (the next run waits for it and finds the step done), and a run
        # killed right after the last step leaves the next nothing to do.
        steps = ["request-id-collation", "user-agents", "events", "event-ids", "layout"]
        once = all(said.count(f"distribution step {step} done") <= 1 for step in steps)
        shards = int(coordinator.psql("SELECT count(*) FROM log_shards", database)[0][0])
        checks.check(f"{part}.migrate-finishes-when-rerun-and-says-what-it-did",
                     len(outputs) >= 4 and "resuming the distribution: already done" in said and once and shards > 0,
                     " | ".join(" / ".join(o[-2:]) for o in outputs))
        time.sleep(3)
    finally:
        load.stop()
    load.drain(lambda: port)
    checks.figure("distribute_in_place_answers", load.statuses())
    unexpected = [e for e in load.timeline if e[1] not in (200, 503)]
    checks.check(f"{part}.appends-answer-200-or-503-throughout", not unexpected,
                 f"{load.statuses()}" + "".join(f"; {e[1]} {e[4]!r}" for e in unexpected[:3]))
    s.verify_log(checks, coordinator, database, load, part=part, also_sent=written_beside)
    caught_up = wait_caught_up(port)
    logged = int(coordinator.psql("SELECT count(*) FROM events", database)[0][0])
    projected = coordinator.psql("SELECT (SELECT count(*) FROM ad_events), (SELECT count(DISTINCT id) FROM ad_events)", database)[0]
    checks.check(f"{part}.every-logged-event-is-projected-once", caught_up and [int(x) for x in projected] == [logged] * 2,
                 f"{logged} logged; in ad_state {projected[0]} ({projected[1]} distinct); caught up: {caught_up}")
    after = reports(binary, url, old, old)
    differing = [r for r in REPORTS if before[r] != after[r]]
    checks.check(f"{part}.reports-of-earlier-days-are-unchanged", not differing and len(before["summary"].splitlines()) > 1,
                 f"{', '.join(REPORTS)} over {old}; differing: {differing}")
    mine = snapshot(coordinator, database)
    s.run_tracker_command(binary, ["rebuild"], url, timeout=900)
    rebuilt = snapshot(coordinator, database)
    differences = compare_snapshots(mine, rebuilt)
    checks.check(f"{part}.projections-equal-a-rebuild", not differences,
                 "; ".join(differences) or f"{sum(len(v) for v in mine.values())} rows equal")
    dropped = s.run_tracker_command(binary, ["retention", "--keep-days", "2"], url)
    gone = coordinator.psql(f"SELECT to_regclass('events_{old.replace('-', '')}') IS NULL", database)[0][0] == "t"
    s.run_tracker_command(binary, ["rebuild", "--discard-dropped-days"], url, timeout=900)
    checks.check(f"{part}.retention-and-rebuild-work-on-the-result", gone,
                 f"retention: {dropped.strip().splitlines()[-1:]}; the day's partition gone: {gone}")


def log_blocked_sessions(clusters, database):
    """What holds the writes when appends are refused for minutes: each node's sessions of
    `database` that are not idle, the locks they wait for, and the rebalancer's tasks."""
    for cluster in clusters:
        for sql in ("SELECT pid, state, wait_event_type || ':' || wait_event, round(extract(epoch FROM now() - xact_start)), "
                    "application_name, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) FROM pg_stat_activity "
                    f"WHERE datname = '{database}' AND state <> 'idle' ORDER BY xact_start",
                    "SELECT l.pid, l.locktype, l.relation::regclass, l.mode, array_to_string(pg_blocking_pids(l.pid), ',') "
                    "FROM pg_locks l WHERE NOT l.granted "
                    "AND (l.database IS NULL OR l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))"):
            try:
                for row in cluster.psql(sql, database, timeout=20):
                    s.log(f"  {cluster.port}: " + " | ".join(row))
            except Exception as error:  # a node that does not answer is itself the finding
                s.log(f"  {cluster.port}: {error}")
    try:
        for row in clusters[0].psql("SELECT task_id, status, left(command, 120), message FROM pg_dist_background_task "
                                    "WHERE status NOT IN ('done', 'cancelled') ORDER BY task_id", database, timeout=20):
            s.log("  task: " + " | ".join(row))
    except Exception as error:
        s.log(f"  tasks: {error}")


def rebalance_under_load(checks, binary, clusters, rng, trackers):
    """A worker added under a retrying load and Citus's rebalancer moving shards onto it
    (force_logical: the log has no replica identity) while the projector runs; the new worker is
    restarted in the middle of the moves and the rebalance started again."""
    part, database = "rebalance-under-load", "rebalance"
    coordinator = clusters[0]
    url = add_database([c.port for c in clusters], database)
    s.run_tracker_command(binary, ["migrate"], url)
    key = s.create_key(binary, url, "citus-rebalance", "ingest")
    port = s.free_port()
    trackers.append(s.Tracker(binary, url, env={"TRACKER_PROJECTOR": "off"}, port=port, name="citus-rebalance").start())
    projector = subprocess.Popen([binary, "project"], env=dict(os.environ, DATABASE_URL=url, TRACKER_LOG_LEVEL="warning"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    added = s.Cluster("citus-worker3").start()
    clusters.append(added)
    load = s.RetryingLoad(lambda: port, key, workers=3, batch_sizes=(1, 60), seed=rng.random())
    load.start()
    samples, unready, restarted, probes = [], [], False, set()
    try:
        time.sleep(3)
        added.psql(f"CREATE DATABASE {database}")
        added.psql("CREATE EXTENSION citus", database)
        coordinator.psql(f"SELECT citus_add_node('127.0.0.1', {added.port})", database)
        started = time.time()
        starts = 0
        state = None
        while time.time() < started + 900:
            if state in (None, "failed", "cancelled"):
                coordinator.psql("CALL citus_cleanup_orphaned_resources()", database)
                if starts >= 4:
                    break
                coordinator.psql("SELECT citus_rebalance_start(shard_transfer_mode => 'force_logical')", database, check=False)
                starts += 1
            status = coordinator.psql("SELECT state FROM citus_rebalance_status()", database, check=False)
            state = status[0][0] if status else None
            if state == "finished":
                break
            moved = int(coordinator.psql(f"SELECT count(*) FROM citus_shards WHERE nodeport = {added.port}", database)[0][0])
            if moved > 0 and not restarted:
                s.log("restarting the new worker in the middle of the moves")
                added.stop("fast")
                time.sleep(1)
                added.start()
                restarted = True
            # The lag while the projector is held: a batch just acknowledged waits, so it is not 0.
            os.kill(projector.pid, signal.SIGSTOP)
            try:
                probe = [s.random_event(rng) for _ in range(3)]
                probes.update(e["id"] for e in probe)
                try:
                    send_until_stored(port, key, probe)
                except RuntimeError:
                    log_blocked_sessions(clusters, database)
                    raise
                samples.append(readyz_lag_when_ready(port, unready))
            finally:
                os.kill(projector.pid, signal.SIGCONT)
            time.sleep(1)
        checks.figure("rebalance_seconds", round(time.time() - started, 1))
        checks.figure("rebalance_starts", starts)
        checks.figure("rebalance_readyz_not_ready", len(unready))
        time.sleep(2)
    finally:
        load.stop()
    load.drain(lambda: port)
    on_new = int(coordinator.psql(f"SELECT count(*) FROM citus_shards WHERE nodeport = {added.port} AND table_name::text = 'events'",
                                  database)[0][0])
    checks.check(f"{part}.the-rebalancer-moves-shards-of-the-log-onto-the-new-worker", state == "finished" and on_new > 0 and restarted,
                 f"state {state} after {starts} start(s); {on_new} shards of the log on the new worker; restarted mid-move: {restarted}")
    checks.check(f"{part}.lag-is-never-0-while-events-wait", samples and all(isinstance(n, int) and n >= 3 for n in samples),
                 f"events behind: {samples}")
    s.verify_log(checks, coordinator, database, load, part=part, also_sent=probes)
    deadline = time.time() + 300
    while time.time() < deadline and readyz_lag(port) != 0:
        time.sleep(0.3)
    projector.kill()
    projector.wait()
    logged = int(coordinator.psql("SELECT count(*) FROM events", database)[0][0])
    projected = coordinator.psql("SELECT (SELECT events_projected FROM projection_state), (SELECT count(*) FROM ad_events), "
                                 "(SELECT count(DISTINCT id) FROM ad_events)", database)[0]
    checks.check(f"{part}.every-logged-event-is-projected-once", [int(x) for x in projected] == [logged] * 3,
                 f"{logged} logged; projected {projected[0]}, in ad_state {projected[1]} ({projected[2]} distinct)")
    mine = snapshot(coordinator, database)
    s.run_tracker_command(binary, ["rebuild"], url, timeout=900)
    differences = compare_snapshots(mine, snapshot(coordinator, database))
    checks.check(f"{part}.projections-equal-a-rebuild", not differences,
                 "; ".join(differences) or f"{sum(len(v) for v in mine.values())} rows equal")
    # Nothing of it stays for a part run after it (CITUS_PARTS names them in any order): its
    # tracker's connections and its database's maintenance daemons hold the workers'
    # connections, and the other parts distribute onto the suite's two workers only.
    trackers[-1].kill(signal.SIGTERM)
    for node in (c.port for c in clusters):
        psql_at(node, "postgres", f"DROP DATABASE {database} WITH (FORCE)")
    clusters.remove(added)
    added.remove()


def base(checks, binary, coordinator, worker, ports, rng, trackers):
    """The guarantees of a deployment that starts on Citus (sections 1-7 of the module's list)."""
    url = add_database(ports, "tracker")
    migrated = s.run_tracker_command(binary, ["migrate"], url)
    distributed = coordinator.psql("SELECT logicalrelid::text FROM pg_dist_partition WHERE logicalrelid::text IN "
                                   "('events', 'event_ids', 'ad_state') ORDER BY 1", "tracker")
    shards = int(coordinator.psql("SELECT count(*) FROM log_shards", "tracker")[0][0])
    checks.check("migrate-distributes-the-log", "distributed the log" in migrated
                 and [r[0] for r in distributed] == ["ad_state", "event_ids", "events"] and shards > 0,
                 f"{[r[0] for r in distributed]} distributed, {shards} shard checkpoints")
    again = s.run_tracker_command(binary, ["migrate"], url)
    checks.check("migrate-twice-changes-nothing", "schema is current" in again, again.strip())
    roles = psql_at(ports[1], "tracker", "SELECT count(*) FROM pg_roles WHERE rolname IN ('tracker_ingest', 'tracker_projector', 'tracker_report')")
    checks.check("roles-exist-on-the-workers", roles[0][0] == "3", f"{roles[0][0]} of 3 roles on a worker")
    ingest_url, projector_url, report_url = (role_url(ports[0], "tracker", r) for r in
                                             ("tracker_ingest", "tracker_projector", "tracker_report"))
    roles_env = {"PROJECTOR_DATABASE_URL": projector_url, "REPORT_DATABASE_URL": report_url}
    ingest_key = s.create_key(binary, url, "citus-app", "ingest")
    server_key = s.run_tracker_command(binary, ["keys", "create", "--name", "citus-server", "--scope", "ingest", "--server"],
                                       url).strip().splitlines()[-1]

    # 1. The HTTP contract against a tracker on the coordinator (its own database);
    #    CITUS_CONTRACT=off skips it (a quicker rerun of the rest).
    contract = subprocess.CompletedProcess([], 0, "skipped (CITUS_CONTRACT=off)", "") if os.environ.get("CITUS_CONTRACT") == "off" else subprocess.run(["scripts/test-contract.sh", "-x", "-q"], cwd=s.ROOT, env=dict(
        os.environ, TRACKER_TEST_DATABASE_URL=coordinator.url("postgres"), TRACKER_BINARY=binary,
        TRACKER_TEST_DATABASE_SETUP=f"{sys.executable} {os.path.abspath(__file__)} add-database",
        CITUS_PORTS=" ".join(map(str, ports)), TRACKER_SCHEMATHESIS_EXAMPLES=os.environ.get("TRACKER_SCHEMATHESIS_EXAMPLES", "10")),
        capture_output=True, text=True, timeout=1800)
    output = (contract.stdout + contract.stderr).strip().splitlines()
    # The assertion that failed (pytest's "E " lines), then the summary.
    tail = [line for line in output if line.startswith("E ")][:3] + output[-3:]
    checks.check("http-contract-holds", contract.returncode == 0, " / ".join(tail))

    # 2. A retrying load through SIGKILLs of the tracker and a restart of a worker.
    port = s.free_port()
    load = s.RetryingLoad(lambda: port, ingest_key, workers=6, batch_sizes=(1, 100), abandon=0.3, seed=rng.random())
    load.start()
    for cycle in range(3):
        tracker = s.Tracker(binary, ingest_url, env=roles_env, port=port, name="citus").start()
        trackers.append(tracker)
        time.sleep(rng.uniform(2.0, 4.0))
        if cycle == 1:
            s.log("restarting worker 1 under load")
            worker.stop("fast")
            time.sleep(2)
            worker.start()
            time.sleep(2)
        tracker.kill(signal.SIGKILL)
    tracker = s.Tracker(binary, ingest_url, env=roles_env, port=port, name="citus").start()
    trackers.append(tracker)
    time.sleep(3)
    load.stop()
    load.drain(lambda: port)
    checks.figure("answers", load.statuses())
    s.verify_log(checks, coordinator, "tracker", load)

    # 3. Counted exactly once: the projections hold each logged event once.
    s.run_tracker_command(binary, ["project", "--once"], projector_url, timeout=900)
    logged = int(coordinator.psql("SELECT count(*) FROM events", "tracker")[0][0])
    projected = coordinator.psql("SELECT (SELECT events_projected FROM projection_state), (SELECT count(*) FROM ad_events), "
                                 "(SELECT count(DISTINCT id) FROM ad_events)", "tracker")[0]
    checks.check("every-logged-event-is-projected-once", [int(x) for x in projected] == [logged] * 3,
                 f"{logged} logged; projected {projected[0]}, in ad_state {projected[1]} ({projected[2]} distinct)")
    lag = json.loads(s.request(port, "GET", "/readyz").body).get("projectionLag", {})
    checks.check("readyz-lag-is-0-when-caught-up", lag.get("events") == 0, json.dumps(lag))

    # 4. The reports: the reference computation, and a single-node tracker over the same log.
    today = time.strftime("%Y-%m-%d", time.gmtime())
    first = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))
    coordinator.psql("CREATE DATABASE reference")
    s.run_tracker_command(binary, ["migrate"], coordinator.url("reference"))
    copy_log(coordinator, "tracker", "reference")
    s.run_tracker_command(binary, ["rebuild"], coordinator.url("reference"), timeout=900)
    mine = reports(binary, report_url, first, today)
    theirs = reports(binary, coordinator.url("reference"), first, today)
    differing = [r for r in REPORTS if mine[r] != theirs[r]]
    rows = sum(len(v.splitlines()) - 1 for v in mine.values())
    checks.check("reports-equal-a-single-node-tracker", not differing and rows > 0,
                 f"{rows} rows of {', '.join(REPORTS)}; differing: {differing}")
    mine_tz = reports(binary, report_url, first, today, ["--tz", "America/New_York", "--granularity", "hour"])
    theirs_tz = reports(binary, coordinator.url("reference"), first, today, ["--tz", "America/New_York", "--granularity", "hour"])
    checks.check("hourly-reports-in-a-time-zone-equal-a-single-node-tracker",
                 all(mine_tz[r] == theirs_tz[r] for r in REPORTS), f"{sum(len(v.splitlines()) - 1 for v in mine_tz.values())} rows")
    exact = []
    for r in EXACT:
        problem = same_rows(mine[r], exact_rows(coordinator, "reference", r, first, today))
        if problem:
            exact.append(f"{r}: {problem}")
    checks.check("reports-equal-the-reference-computation", not exact, "; ".join(exact) or f"{', '.join(EXACT)} row for row")

    # 5. The lag is never 0 while events wait: no projector runs for a while.
    tracker.kill(signal.SIGTERM)
    tracker = s.Tracker(binary, ingest_url, env=dict(roles_env, TRACKER_PROJECTOR="off"), port=port, name="citus").start()
    trackers.append(tracker)
    waiting = [s.random_event(rng) for _ in range(40)]
    send(port, ingest_key, waiting)
    samples = []
    for _ in range(10):
        samples.append(readyz_lag(port))
        time.sleep(0.1)
    checks.check("lag-is-never-0-while-events-wait", all(isinstance(n, int) and n >= 40 for n in samples), f"events behind: {samples}")

    # 6. Invalid traffic: a rule set that labels a declared bot and a busy client, then
    #    events of both; the projections must equal a rebuild.
    rules = os.path.join(coordinator.dir, "ivt.json")
    with open(rules, "w") as f:
        json.dump({"name": "citus-suite", "userAgents": [{"pattern": "ExampleBot"}], "ipRanges": ["198.51.100.0/24"],
                   "maxEventsPerClientMinute": 30}, f)
    s.run_tracker_command(binary, ["ivt", "activate", rules], url)
    s.run_tracker_command(binary, ["rebuild"], url, timeout=900)
    for i in range(12):
        batch = [s.random_event(rng) for _ in range(20)]
        if i % 3 == 0:
            send(port, ingest_key, batch, user_agent="Mozilla/5.0 (compatible; ExampleBot/2.1)")
        elif i % 3 == 1:
            for e in batch:
                e["ip"] = f"198.51.100.{rng.randrange(250)}"
                e["userAgent"] = "ExampleApp/1.0"
            send(port, server_key, batch)
        else:
            send(port, ingest_key, batch, user_agent="ExampleApp/1.0 (busy client)")
    s.run_tracker_command(binary, ["project", "--once"], projector_url, timeout=900)
    labelled = coordinator.psql("SELECT label, count(*) FROM ad_events WHERE label IS NOT NULL GROUP BY 1 ORDER BY 1", "tracker")
    before = snapshot(coordinator, "tracker")
    s.run_tracker_command(binary, ["rebuild"], url, timeout=900)
    after = snapshot(coordinator, "tracker")
    differences = compare_snapshots(before, after)
    checks.check("projections-equal-a-rebuild", not differences and len({r[0] for r in labelled}) == 3,
                 "; ".join(differences) or f"{sum(len(v) for v in before.values())} rows equal; labels {labelled}")

    # 7. Retention on the shards: an old day, projected, is dropped with its ids.
    old = time.strftime("%Y%m%d", time.gmtime(time.time() - 5 * 86400))
    coordinator.psql("SELECT tracker_ensure_event_partitions(current_date - 5, current_date - 5)", "tracker")
    coordinator.psql("""
        WITH ids AS (INSERT INTO event_ids SELECT gen_random_uuid() FROM generate_series(1, 50) RETURNING id)
        INSERT INTO events (id, type, request_id, ad_unit, format_id, source, eea, reservation, test,
                            occurred_at, received_at, corrected_at, key_name)
        SELECT id, 'impression', 'old-' || row_number() OVER (), '/1234/home/native', 'native', 'app', false, false, false,
               now() - interval '5 days', now() - interval '5 days', now() - interval '5 days', 'citus-suite'
        FROM ids""", "tracker")
    ids_before = int(coordinator.psql("SELECT count(*) FROM event_ids", "tracker")[0][0])
    kept = s.run_tracker_command(binary, ["retention", "--keep-days", "2", "--dry-run"], projector_url)
    s.run_tracker_command(binary, ["project", "--once"], projector_url, timeout=900)
    dropped = s.run_tracker_command(binary, ["retention", "--keep-days", "2"], projector_url)
    ids_after = int(coordinator.psql("SELECT count(*) FROM event_ids", "tracker")[0][0])
    gone = coordinator.psql(f"SELECT to_regclass('events_{old}') IS NULL", "tracker")[0][0] == "t"
    old_impressions = coordinator.psql(f"SELECT coalesce(sum(impressions), 0) FROM format_day WHERE day = current_date - 5", "tracker")[0][0]
    checks.check("retention-drops-a-projected-day-on-every-shard", gone and ids_before - ids_after == 50 and old_impressions == "50",
                 f"dry run: {kept.strip().splitlines()[-1:]}; run: {dropped.strip().splitlines()[-1:]}; "
                 f"{ids_before - ids_after} ids forgotten; the day's impressions still {old_impressions}")


def projector_groups(checks, binary, clusters, rng, trackers):
    """Two projectors of groups of shards (`tracker project --group K/2`) at once under a retrying
    load, with loads whose `ad_loaded` is on another group's shard than the load (the inbox's
    references) and clients over the `high_rate` limit across both groups (the inbox's relabels),
    one of them killed (-9) and started again, and a rebuild while both run: every acknowledged
    event projected once, a report right after an append counts it, and the projections equal
    a rebuild."""
    part, database = "projector-groups", "groups"
    coordinator = clusters[0]
    url = add_database([c.port for c in clusters], database)
    s.run_tracker_command(binary, ["migrate"], url)
    rules = os.path.join(coordinator.dir, "groups-ivt.json")
    with open(rules, "w") as f:
        json.dump({"name": "groups-suite", "maxEventsPerClientMinute": 25}, f)
    s.run_tracker_command(binary, ["ivt", "activate", rules], url)
    key = s.create_key(binary, url, "citus-groups", "ingest")
    report_key = s.create_key(binary, url, "citus-groups-report", "report")
    port = s.free_port()
    trackers.append(s.Tracker(binary, url, env={"TRACKER_PROJECTOR": "off"}, port=port, name="citus-groups").start())
    def projector(k):
        return subprocess.Popen([binary, "project", "--group", f"{k}/2"], env=dict(os.environ, DATABASE_URL=url, TRACKER_LOG_LEVEL="warning"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    projectors = [projector(k) for k in (1, 2)]
    load = s.RetryingLoad(lambda: port, key, workers=3, batch_sizes=(1, 60), seed=rng.random())
    load.start()
    today = time.strftime("%Y-%m-%d", time.gmtime())
    missed, sent = [], set()
    try:
        for i in range(40):
            unit = f"/1234/groups{i}/native"
            batch = [e for j in range(4) for e in filled_load(f"g-load-{i}-{j}", f"g-ad-{i}-{j}", unit)]
            sent.update(e["id"] for e in batch)
            # Every third batch from one busy client: its minute goes over the limit on both groups.
            send(port, key, batch, user_agent="ExampleApp/1.0 (busy client)" if i % 3 == 0 else f"ExampleApp/1.0 (client {i})")
            r = s.request(port, "GET", f"/v1/reports/funnel?from={today}&to={today}&adUnit={unit.replace('/', '%2F')}",
                          {"Authorization": f"Bearer {report_key}"})
            rows = (r.json() or {}).get("rows", []) if r.status == 200 else []
            filled = sum(row.get("filledRequests", 0) for row in rows)
            if i % 3 != 0 and filled != 4:
                missed.append((i, r.status, filled))
            if i == 20:
                # kill -9 of one group's projector in the middle of its steps, and a new one.
                projectors[0].kill()
                projectors[0].wait()
                projectors[0] = projector(1)
            time.sleep(0.1)
    finally:
        load.stop()
    load.drain(lambda: port)
    s.verify_log(checks, coordinator, database, load, part=part, also_sent=sent)
    inbox_wait = inbox_alone_holds_a_fill(coordinator, database, port, key, report_key, projectors, today)
    checks.check(f"{part}.a-report-waits-for-the-inbox-and-never-shows-lag-0-without-the-fill",
                 inbox_wait[0][0] == 0 and inbox_wait[0][1] > 0 and inbox_wait[1] == (1, 0),
                 f"(filled, lag events) with the load's group stopped, then running: {inbox_wait}")
    checks.check(f"{part}.a-report-right-after-an-append-counts-its-fills", not missed,
                 f"40 batches of 4 filled loads, each followed by a funnel report of its ad unit; missed (round, status, filled): {missed[:5]}")
    crossing = coordinator.psql("""
        WITH s AS (SELECT shardid, row_number() OVER (ORDER BY shardid) - 1 AS n FROM pg_dist_shard WHERE logicalrelid = 'events'::regclass)
        SELECT count(*) FROM (SELECT request_id, load_id FROM events WHERE type = 'ad_loaded' AND load_id IS NOT NULL OFFSET 0) e
        JOIN s a ON a.shardid = get_shard_id_for_distribution_column('events', e.request_id)
        JOIN s b ON b.shardid = get_shard_id_for_distribution_column('events', e.load_id)
        WHERE a.n % 2 <> b.n % 2""", database)[0][0]
    tables = [r[0] for r in coordinator.psql("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                             "AND (tablename LIKE '%\\_day' OR tablename LIKE '%\\_quarters' OR tablename = 'ad_state') "
                                             "ORDER BY 1", database)]

    def caught_up_and_projected_once(name):
        deadline = time.time() + 300
        while time.time() < deadline and readyz_lag(port) != 0:
            time.sleep(0.3)
        labelled = coordinator.psql("SELECT count(*) FROM ad_events WHERE label = 'high_rate'", database)[0][0]
        inbox = coordinator.psql("SELECT count(*) FROM projection_inbox", database)[0][0]
        logged, references = (int(x) for x in coordinator.psql(
            "SELECT count(*), count(*) FILTER (WHERE type = 'ad_loaded' AND load_id IS NOT NULL) FROM events", database)[0])
        projected = coordinator.psql("SELECT (SELECT events_projected FROM projection_state), (SELECT count(*) FROM ad_events), "
                                     "(SELECT count(DISTINCT id) FROM ad_events)", database)[0]
        # An ad_loaded that names its load is in two states: its ad's, and its load's.
        checks.check(f"{part}.{name}", [int(x) for x in projected] == [logged, logged + references, logged] and inbox == "0"
                     and int(labelled) > 0 and int(crossing) > 0 and all(p.poll() is None for p in projectors),
                     f"{logged} logged ({references} naming their load); projected {projected[0]}, in ad_state {projected[1]} "
                     f"({projected[2]} distinct); {labelled} high_rate; inbox {inbox}; {crossing} ad_loaded on the other group's "
                     f"shard than their load; projectors running: {[p.poll() is None for p in projectors]}")

    def every_row():
        return {t: [r[0] for r in coordinator.psql(f"SELECT t::text FROM {t} t ORDER BY 1", database)] for t in tables}

    def equal_to_a_rebuild(name):
        mine = every_row()
        # The rebuild swaps in while both groups' projectors run (and with it, an empty inbox).
        s.run_tracker_command(binary, ["rebuild"], url, timeout=900)
        theirs = every_row()
        differences = [f"{t}: {len(mine[t])} rows, rebuilt {len(theirs[t])}" for t in tables if mine[t] != theirs[t]]
        checks.check(f"{part}.{name}", not differences and "funnel_day" in tables,
                     "; ".join(differences) or f"{sum(len(v) for v in mine.values())} rows of {len(tables)} tables equal")

    caught_up_and_projected_once("every-logged-event-is-projected-once-by-two-projectors")
    equal_to_a_rebuild("projections-equal-a-rebuild")
    # The groups go on over what the rebuild swapped in under them.
    for i in range(12):
        unit = f"/1234/groupsafter{i}/native"
        batch = [e for j in range(4) for e in filled_load(f"g-after-load-{i}-{j}", f"g-after-ad-{i}-{j}", unit)]
        send(port, key, batch, user_agent="ExampleApp/1.0 (busy client)" if i % 3 == 0 else f"ExampleApp/1.0 (client after {i})")
    caught_up_and_projected_once("every-event-after-a-rebuild-under-them-is-projected-once")
    for p in projectors:
        p.send_signal(signal.SIGTERM)
    errors = [p.communicate(timeout=60)[1] for p in projectors]
    checks.check(f"{part}.projectors-of-groups-stop-cleanly-on-sigterm", all(p.returncode == 0 for p in projectors),
                 f"exits {[p.returncode for p in projectors]} {[e.strip().splitlines()[-1:] for e in errors]}")
    equal_to_a_rebuild("projections-equal-a-rebuild-after-one-swapped-in-under-them")
    trackers[-1].kill(signal.SIGTERM)
    for node in (c.port for c in clusters):
        psql_at(node, "postgres", f"DROP DATABASE {database} WITH (FORCE)")


def filled_load(load_id, ad, unit):
    """A load's ad_request, the ad_loaded of the ad that filled it, and the ad's impression."""
    at = s.iso(time.time() - 5)
    return [{"id": s.uuid7(), "type": "ad_request", "loadId": load_id, "adUnit": unit, "formatId": "10063170", "occurredAt": at,
             "adsRequested": 1},
            s.event(type="ad_loaded", requestId=ad, loadId=load_id, adUnit=unit, occurredAt=at),
            s.event(requestId=ad, adUnit=unit, occurredAt=at)]


def inbox_alone_holds_a_fill(coordinator, database, port, key, report_key, projectors, today):
    """A load on a shard of group 2/2 is projected; group 2's projector is stopped (SIGSTOP) and
    an ad_loaded naming the load, on a shard of group 1/2, is sent: group 1 projects it and every
    cursor reaches the head, while the fill waits in group 2's inbox. Returns the funnel report's
    (filled loads, lag events) then, and again once group 2 runs: the first must show the lag,
    not a lag of 0 that misses the fill. (With the default report wait, it waits 5 s first.)"""
    dealt = dict(coordinator.psql("SELECT shardid, (row_number() OVER (ORDER BY shardid) - 1) % 2 FROM pg_dist_shard "
                                  "WHERE logicalrelid = 'events'::regclass", database))

    def key_in(group, prefix):
        for n in range(1000):
            name = f"{prefix}-{n}"
            if dealt[coordinator.psql(f"SELECT get_shard_id_for_distribution_column('events', '{name}')", database)[0][0]] == str(group):
                return name
        raise RuntimeError(f"no key of group {group}")
    load_id, ad = key_in(1, "inbox-load"), key_in(0, "inbox-ad")
    unit = "/1234/groupsinbox/native"
    agent = "ExampleApp/1.0 (inbox client)"
    request, loaded, _ = filled_load(load_id, ad, unit)
    send(port, key, [request], user_agent=agent)

    def funnel():
        r = s.request(port, "GET", f"/v1/reports/funnel?from={today}&to={today}&adUnit={unit.replace('/', '%2F')}",
                      {"Authorization": f"Bearer {report_key}"})
        if r.status != 200:
            return (r.status, r.body[:200])
        return (sum(row.get("filledRequests", 0) for row in (r.json() or {}).get("rows", [])), int(r.headers["x-projection-lag-events"]))
    funnel()
    os.kill(projectors[1].pid, signal.SIGSTOP)
    try:
        send(port, key, [loaded], user_agent=agent)
        held = funnel()
    finally:
        os.kill(projectors[1].pid, signal.SIGCONT)
    return held, funnel()


PARTS = ["base", "worker-restart", "in-doubt-commit", "read-your-writes", "lag-across-a-move", "distribute-in-place",
         "rebalance-under-load", "projector-groups"]


def main():
    checks = s.Checks("citus")
    binary = s.tracker_binary()
    rng = random.Random(int(os.environ.get("SUITE_SEED", "26")))
    # CITUS_PARTS=part,part runs only those (a quicker rerun of one part).
    parts = [p for p in os.environ.get("CITUS_PARTS", ",".join(PARTS)).split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise SystemExit(f"unknown CITUS_PARTS {unknown}; parts: {', '.join(PARTS)}")
    os.environ["PG_EXTRA_CONF"] = CITUS_CONF
    clusters = [s.Cluster(f"citus-{n}").start() for n in ("coordinator", "worker1", "worker2")]
    coordinator, worker = clusters[0], clusters[1]
    ports = [c.port for c in clusters]
    trackers = []
    try:
        for part in parts:
            s.log(f"part {part}")
            try:
                if part == "base":
                    base(checks, binary, coordinator, worker, ports, rng, trackers)
                elif part == "worker-restart":
                    worker_restarts_under_appends(checks, binary, coordinator, ports, worker, rng, trackers)
                elif part == "in-doubt-commit":
                    in_doubt_commit(checks, binary, coordinator, ports, rng, trackers)
                elif part == "read-your-writes":
                    read_your_writes(checks, binary, coordinator, worker, ports, rng, trackers)
                    marks_on_a_log_distributed_before_them(checks, binary, coordinator, ports, trackers)
                elif part == "lag-across-a-move":
                    lag_across_a_move(checks, binary, coordinator, ports, rng, trackers)
                elif part == "distribute-in-place":
                    try:
                        a_node_without_shards_is_only_asked_to_answer(checks, binary, clusters)
                        distribute_in_place(checks, binary, clusters, rng, trackers)
                    finally:
                        # Back to the suite's own max_connections once nothing writes: a
                        # worker restarted under appends leaves commits in doubt for a while.
                        for t in trackers:
                            t.kill(signal.SIGTERM)
                        set_workers_max_connections(clusters[1:3], None)
                elif part == "rebalance-under-load":
                    rebalance_under_load(checks, binary, clusters, rng, trackers)
                elif part == "projector-groups":
                    projector_groups(checks, binary, clusters, rng, trackers)
            except Exception as error:  # a part that could not run is a failed check, with its reason
                checks.check(f"{part}.ran-to-the-end", False, f"{type(error).__name__}: {error}")
                for t in trackers[-1:]:
                    s.log(t.log_tail(20))
    finally:
        for t in trackers:
            t.kill(signal.SIGKILL)
        for c in clusters:
            c.remove()
    return checks.finish()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "add-database":
        add_database([int(p) for p in os.environ["CITUS_PORTS"].split()], sys.argv[2])
        sys.exit(0)
    sys.exit(main())
