"""Cardinality: what distinct ad units and asset keys cost in disk and memory, and the budget
that bounds them (docs/SCALING.md, "Cardinality").

The same number of clicks, in batches of 500, each run on a fresh database and a fresh
`tracker serve`:

- `one`: every click on one ad unit and one asset key;
- `many`: 0.4 x N ad units and N asset keys (every click its own key), with the dimension
  budget off, so that every click is stored and projected: what the projections and the
  projector cost per distinct key;
- `budget` (when CARDINALITY_BUDGET_RUN is not off): the same clicks as `many` against the
  default `tracker serve`: the budget refuses each click past a limit in `rejected`, naming the
  field and the limit, stores the rest, and counts the refusals in /metrics.

Checks: every answer 200; every accepted click in the summary report; the database's growth
and the tracker's peak RSS (VmHWM, read once every click is projected, before the summary
report, whose answer takes memory in proportion to its rows) of `many` within their bounds of
`one`'s; the projections
equal a rebuild, whose peak RSS is a figure.

short (make test): N = 10 000; long: N = 100 000, the comparison scripts/bench-cardinality.sh
runs with the release build. CARDINALITY_EVENTS overrides N. Standard library only.
"""

import datetime
import json
import os
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s

BATCH = 500
SENDERS = 4
# The bounds of `many` against `one`. The database: the log costs the same per click (some
# 430 bytes with its ids and ad states); the projections keep one row per key and day and one
# per key and half day, each as large as the quarter hours it had events in, some 600 bytes a
# key for both. `many` brings 1.4 keys a click (0.4 ad units, 1 asset key), so it grows about
# 3 x as much as `one`: in proportion to what happened. A layout that paid for every quarter
# hour of a half day would be over 20 x. Memory: the projector writes the rows of a step in
# parts of a bounded size, so distinct keys do not add to its peak.
GROWTH_RATIO_BOUND = 4.0
# The long form's 100 000 clicks measured 1.11 x; the short form's 10 000 measure 1.2 x or so,
# the same few MiB of a step's bounded rows over a smaller process, hence its wider bound.
RSS_RATIO_BOUND = {"long": 1.3, "short": 1.5}
# The bound docs/SCALING.md gives for `tracker serve` in this run, for the release build in the long run.
RSS_BOUND_MIB = 150
# Every limit of the dimension budget, off.
BUDGET_OFF = {name: "off" for name in ("TRACKER_MAX_AD_UNITS_PER_DAY", "TRACKER_MAX_FORMATS_PER_DAY",
                                       "TRACKER_MAX_ASSET_KEYS_PER_DAY", "TRACKER_MAX_ADAPTERS_PER_DAY")}


def clicks(n, ad_units, asset_keys):
    """N clicks, each of its own ad, click i on ad unit i mod ad_units and asset key i mod asset_keys."""
    now = time.time()
    out = []
    for i in range(n):
        out.append({"id": str(uuid.uuid4()), "type": "click", "requestId": f"card-{i}",
                    "adUnit": f"/123/u{i % ad_units}", "formatId": "10063170", "assetKey": f"k{i % asset_keys}",
                    "occurredAt": s.iso(now - 2)})
    return out


def send(port, key, events):
    """Posts the events in batches of BATCH from SENDERS connections; returns the statuses, the
    accepted count and every rejection."""
    batches = [s.batch_body(events[i:i + BATCH]) for i in range(0, len(events), BATCH)]
    statuses, rejected, accepted = [], [], [0]
    lock = threading.Lock()
    position = [0]

    def sender():
        connection = s.Connection(port, timeout=60)
        try:
            while True:
                with lock:
                    if position[0] >= len(batches):
                        return
                    body = batches[position[0]]
                    position[0] += 1
                answer = s.post_batch(port, key, body, timeout=60, connection=connection)
                with lock:
                    statuses.append(answer.status)
                    if answer.status == 200:
                        receipt = json.loads(answer.body)
                        accepted[0] += receipt["accepted"]
                        rejected.extend(receipt["rejected"])
        finally:
            connection.close()

    threads = [threading.Thread(target=sender) for _ in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses, accepted[0], rejected


def reported_clicks(port, key):
    """Clicks of the summary report over yesterday and today (UTC)."""
    today = datetime.datetime.now(datetime.timezone.utc).date()
    query = f"/v1/reports/summary?from={today - datetime.timedelta(days=1)}&to={today}"
    answer = s.request(port, "GET", query, {"Authorization": f"Bearer {key}"}, timeout=60)
    if answer.status != 200:
        raise RuntimeError(f"summary report: {answer.status} {answer.body[:300]!r}")
    return sum(row["clicks"] + row["duplicateClicks"] for row in json.loads(answer.body)["rows"])


def database_size(cluster, database):
    return int(cluster.psql("SELECT pg_database_size(current_database())", database)[0][0])


def biggest_relations(cluster, database, n=4):
    rows = cluster.psql("""
        SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
        WHERE ns.nspname = 'public' AND c.relkind IN ('r', 'p')
        ORDER BY 2 DESC LIMIT %d""" % n, database)
    return {name: round(int(size) / 2**20, 2) for name, size in rows}


def metric(text, name, **labels):
    """The value of one sample of /metrics' text, 0 when absent."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        if series == name and not wanted or series.startswith(name + "{") and all(
                f'{k}="{v}"' in series for k, v in labels.items()):
            return float(value)
    return 0.0


def projection_rows(cluster, database):
    """Every row of every projection table (by day and by half day), as sorted text."""
    tables = [r[0] for r in cluster.psql("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                         "AND (tablename LIKE '%\\_day' OR tablename LIKE '%\\_quarters') ORDER BY 1", database)]
    return {t: [r[0] for r in cluster.psql(f"SELECT t::text FROM {t} t ORDER BY 1", database)] for t in tables}


def rebuild(binary, url):
    """`tracker rebuild`: its peak RSS in KiB, the last VmHWM read before it exited (read every
    20 ms: a fork's maxrss would count this script's own memory, which exec does not reset)."""
    env = dict(os.environ, DATABASE_URL=url, TRACKER_LOG_LEVEL="warning")
    process = subprocess.Popen([binary, "rebuild"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 600
    peak = 0
    while process.poll() is None:
        if time.time() > deadline:
            process.kill()
            raise RuntimeError("tracker rebuild did not finish within 600 s")
        try:
            with open(f"/proc/{process.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.02)
    errors = process.stderr.read().decode(errors="replace")
    if process.returncode != 0:
        raise RuntimeError(f"tracker rebuild failed ({process.returncode}): {errors.strip()}")
    return peak


class Run:
    """One run: a fresh database and tracker, the clicks sent, and what they cost."""

    def __init__(self, checks, binary, cluster, name, events, env, deadline):
        self.name = name
        database = f"card_{name}"
        url = s.new_database(cluster, binary, database)
        self.empty_bytes = database_size(cluster, database)
        ingest = s.create_key(binary, url, f"{name}-app", "ingest")
        report = s.create_key(binary, url, f"{name}-reports", "report")
        tracker = s.Tracker(binary, url, env=env, name=f"cardinality-{name}").start()
        try:
            started = time.time()
            self.statuses, self.accepted, self.rejected = send(tracker.port, ingest, events)
            self.ingest_seconds = time.time() - started
            # Waits on the projector's count of events rather than on a report: a summary of
            # 40 000 ad units is 40 000 rows built in memory, a cost of the answer's size
            # (docs/SCALING.md), which would hide what the projector and ingest hold.
            projected = 0
            while time.time() < deadline:
                metrics = s.request(tracker.port, "GET", "/metrics", timeout=30).body.decode()
                projected = metric(metrics, "tracker_projector_events_total")
                if projected >= self.accepted:
                    break
                time.sleep(0.2)
            self.seconds = time.time() - started
            self.peak_kib = tracker.status_field("VmHWM")
            self.reported = reported_clicks(tracker.port, report)
            self.peak_with_report_kib = tracker.status_field("VmHWM")
            self.metrics = s.request(tracker.port, "GET", "/metrics", timeout=30).body.decode()
        finally:
            tracker.kill(s.signal.SIGTERM)
        self.bytes = database_size(cluster, database)
        self.relations = biggest_relations(cluster, database)
        self.url, self.database = url, database
        prefix = name + "_"
        checks.figure(prefix + "accepted", self.accepted)
        checks.figure(prefix + "rejected", len(self.rejected))
        checks.figure(prefix + "seconds_until_projected", round(self.seconds, 2))
        checks.figure(prefix + "ingest_seconds", round(self.ingest_seconds, 2))
        checks.figure(prefix + "database_mib", round(self.bytes / 2**20, 2))
        checks.figure(prefix + "database_growth_mib", round(self.growth / 2**20, 2))
        checks.figure(prefix + "biggest_relations_mib", self.relations)
        checks.figure(prefix + "peak_rss_mib", round(self.peak_kib / 1024, 1))
        checks.figure(prefix + "peak_rss_after_a_summary_report_mib", round(self.peak_with_report_kib / 1024, 1))
        checks.check(f"{name}.every-batch-is-answered-200", self.statuses == [200] * len(self.statuses) and self.statuses,
                     f"{len(self.statuses)} answers: " + ", ".join(f"{c} x {self.statuses.count(c)}" for c in sorted(set(self.statuses))))
        checks.check(f"{name}.every-accepted-click-is-in-the-reports", self.reported == self.accepted,
                     f"{self.accepted} accepted, all projected after {self.seconds:.1f} s, {self.reported} in the summary report")

    @property
    def growth(self):
        return self.bytes - self.empty_bytes


def main():
    checks = s.Checks("cardinality")
    binary = s.tracker_binary()
    n = int(os.environ.get("CARDINALITY_EVENTS") or (10_000 if s.mode() == "short" else 100_000))
    ad_units, asset_keys = max(1, n * 2 // 5), n
    checks.figure("clicks", n)
    checks.figure("many_ad_units", ad_units)
    checks.figure("many_asset_keys", asset_keys)
    cluster = s.Cluster("cardinality").start()
    deadline = time.time() + (240 if s.mode() == "short" else 900)
    try:
        one = Run(checks, binary, cluster, "one", clicks(n, 1, 1), BUDGET_OFF, deadline)
        many = Run(checks, binary, cluster, "many", clicks(n, ad_units, asset_keys), BUDGET_OFF, deadline)
        growth_ratio = many.growth / max(one.growth, 1)
        rss_ratio = many.peak_kib / max(one.peak_kib, 1)
        checks.figure("growth_ratio", round(growth_ratio, 2))
        checks.figure("peak_rss_ratio", round(rss_ratio, 2))
        keys = ad_units + asset_keys
        checks.figure("many_bytes_per_click", round(many.growth / n))
        checks.figure("one_bytes_per_click", round(one.growth / n))
        checks.figure("bytes_per_distinct_key", round((many.growth - one.growth) / keys))
        checks.check("database-growth-within-its-bound", growth_ratio <= GROWTH_RATIO_BOUND,
                     f"{n} clicks on {ad_units} ad units and {asset_keys} asset keys grew the database by "
                     f"{many.growth / 2**20:.1f} MiB, {growth_ratio:.2f} x the {one.growth / 2**20:.1f} MiB of one ad unit "
                     f"and one asset key (bound {GROWTH_RATIO_BOUND} x)")
        rss_bound = RSS_RATIO_BOUND[s.mode()]
        checks.check("peak-memory-within-its-bound", rss_ratio <= rss_bound,
                     f"peak RSS {many.peak_kib / 1024:.0f} MiB against {one.peak_kib / 1024:.0f} MiB: "
                     f"{rss_ratio:.2f} x (bound {rss_bound} x)")
        if s.mode() == "long":
            checks.check("peak-memory-under-150-mib", many.peak_kib <= RSS_BOUND_MIB * 1024,
                         f"peak RSS of tracker serve {many.peak_kib / 1024:.0f} MiB (bound {RSS_BOUND_MIB} MiB)")

        before = projection_rows(cluster, many.database)
        checks.figure("many_rebuild_peak_rss_mib", round(rebuild(binary, many.url) / 1024, 1))
        after = projection_rows(cluster, many.database)
        differing = [t for t in before if before[t] != after.get(t)]
        rows = sum(len(v) for v in before.values())
        checks.figure("many_projection_rows", rows)
        checks.check("many.projections-equal-a-rebuild", not differing and rows > 0,
                     f"tables that differ: {differing}" if differing else f"{rows} rows of {len(before)} tables equal")

        if os.environ.get("CARDINALITY_BUDGET_RUN", "on") != "off":
            budget = Run(checks, binary, cluster, "budget", clicks(n, ad_units, asset_keys), {}, deadline)
            fields = {}
            for r in budget.rejected:
                field = r["error"].split(":", 1)[0]
                fields[field] = fields.get(field, 0) + 1
            checks.figure("budget_rejected_by_field", fields)
            refused = {d: metric(budget.metrics, "tracker_dimension_budget_refused_events_total", dimension=d)
                       for d in ("adUnit", "formatId", "assetKey", "adapter")}
            checks.figure("budget_refused_metric", refused)
            messages_name_the_limit = all("TRACKER_MAX_" in r["error"] and "per day" in r["error"] for r in budget.rejected)
            checks.check("budget.past-a-limit-clicks-are-rejected-naming-the-field-and-limit",
                         budget.rejected and messages_name_the_limit and budget.accepted + len(budget.rejected) == n,
                         f"{budget.accepted} accepted, {len(budget.rejected)} rejected by field {fields}; "
                         f"e.g. {budget.rejected[0]['error'] if budget.rejected else None!r}")
            checks.check("budget.refusals-are-counted-in-metrics", sum(refused.values()) == len(budget.rejected),
                         f"tracker_dimension_budget_refused_events_total {refused} for {len(budget.rejected)} rejected")
    finally:
        cluster.remove()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
