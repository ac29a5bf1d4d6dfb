"""The tracker on Citus: a coordinator and two workers on loopback (make test-citus).

    python3 scripts/suites/citus.py              the whole suite (scripts/test-citus.sh runs it)
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
- the lag is never 0 while events wait (no projector running);
- retention drops an old day on every shard, and its ids, once projected;
- every process connects as its least-privilege role (tracker_ingest, _projector, _report).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s

CITUS_CONF = "shared_preload_libraries = 'citus'\nmax_prepared_transactions = 200\n"
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


def main():
    checks = s.Checks("citus")
    binary = s.tracker_binary()
    rng = random.Random(int(os.environ.get("SUITE_SEED", "26")))
    os.environ["PG_EXTRA_CONF"] = CITUS_CONF
    clusters = [s.Cluster(f"citus-{n}").start() for n in ("coordinator", "worker1", "worker2")]
    coordinator, worker = clusters[0], clusters[1]
    ports = [c.port for c in clusters]
    trackers = []
    try:
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
        tail = (contract.stdout + contract.stderr).strip().splitlines()[-3:]
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
            samples.append(json.loads(s.request(port, "GET", "/readyz").body).get("projectionLag", {}).get("events", 0))
            time.sleep(0.1)
        checks.check("lag-is-never-0-while-events-wait", min(samples) >= 40, f"events behind: {samples}")

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

        # 8. A worker restarted in the middle of appends: 200 or 503, never a 500.
        worker_restarts_under_appends(checks, binary, coordinator, ports, worker, rng, trackers)
    except Exception as error:  # a step that could not run is a failed check, with its reason
        checks.check("suite-ran-to-the-end", False, f"{type(error).__name__}: {error}")
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
