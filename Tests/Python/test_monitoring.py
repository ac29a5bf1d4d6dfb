"""The operator's stack in deploy/monitoring/ (docs/DEPLOY.md, "Monitoring"): the alerting rules
load in Prometheus (`promtool check rules`), each alert fires under the conditions the docs give
and not before (`promtool test rules` over made-up series), every Grafana panel query is valid
PromQL, and every series a rule or a panel reads is one that a running tracker's /metrics
exports, with the labels the rule or panel selects by. The series added for the rules move by
what the tracker did: the database's reachability, impressions by invalid-traffic label, and
reconciliation imports by tolerance.

Run by scripts/test-contract.sh (or `scripts/test-contract.sh -k monitoring`), which installs
promtool (Debian package prometheus).
"""

import datetime
import json
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPOSITORY, Database, free_port, required_env, run
from events import API, event

MONITORING = REPOSITORY / "deploy" / "monitoring"
RULES = MONITORING / "tracker-alerts.yaml"
PROMETHEUS_CONFIG = MONITORING / "prometheus.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
# Made by Prometheus for every target it scrapes, not by the tracker.
PROMETHEUS_SERIES = {"up": {"job", "instance"}}
# Labels Prometheus adds to every series it scrapes.
TARGET_LABELS = {"job", "instance"}
# The dashboard's variables, as Grafana fills them in.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$job": "tracker", "$instance": ".*"}

AD_UNIT = "/1234/monitoring/native"
BURST_UNIT = "/1234/monitoring/burst"
BOT = "MonitoringProbeBot/1.0"
BURST = {"userAgent": "BurstClient/1.0", "ip": "198.51.100.7"}
RULE_SET = {"name": "monitoring test", "userAgents": [{"pattern": "MonitoringProbeBot", "name": "probe"}],
            "maxEventsPerClientMinute": 10}


@pytest.fixture(scope="module")
def promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: install the Debian package prometheus (scripts/test-contract.sh does)", pytrace=False)
    return path


def promtool_run(promtool, *args):
    result = subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"promtool {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def rule_groups():
    return yaml.safe_load(RULES.read_text())["groups"]


def alerts():
    return {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}


def recorded():
    return {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}


def dashboard_queries():
    """(where, PromQL) of every panel target and query variable, with Grafana's variables filled in."""
    board = json.loads(DASHBOARD.read_text())
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            found.append((f"panel '{panel['title']}' {target['refId']}", target["expr"]))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            inner = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert inner, f"variable {variable['name']}: {query}"
            found.append((f"variable {variable['name']}", inner.group(1)))

    def filled(expr):
        for name, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(name, value)
        assert "$" not in expr, f"a Grafana variable this test does not know: {expr}"
        return expr
    return [(where, filled(expr)) for where, expr in found]


# PromQL words that are not series names (aggregations may put `by (…)` before their
# parenthesis); grouping clauses are followed by a label list.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "sum", "min", "max", "avg", "group", "stddev", "stdvar",
            "count", "count_values", "bottomk", "topk", "quantile"}
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}


def selectors(expr):
    """The series an expression reads: (name, label names its matchers use), for expressions
    promtool accepts. Strings, ranges, numbers and durations are skipped; an identifier followed
    by '(' is a function, one after a grouping keyword a label list."""
    found = []
    i, n = 0, len(expr)

    def skip_string(i):
        quote = expr[i]
        i += 1
        while expr[i] != quote:
            i += 2 if expr[i] == "\\" else 1
        return i + 1

    def matcher_block(i):
        start = i
        while expr[i] != "}":
            i = skip_string(i) if expr[i] in "\"'`" else i + 1
        content = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|`[^`]*`', '""', expr[start + 1:i])
        return i + 1, set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", content))

    while i < n:
        c = expr[i]
        if c in "\"'`":
            i = skip_string(i)
        elif c == "[":
            i = expr.index("]", i) + 1
        elif c == "{":
            raise AssertionError(f"a selector without a metric name: {expr}")
        elif c.isdigit() or (c == "." and i + 1 < n and expr[i + 1].isdigit()):
            while i < n and (expr[i].isalnum() or expr[i] in "._"):
                i += 1
        elif c.isalpha() or c in "_:":
            j = i
            while j < n and (expr[j].isalnum() or expr[j] in "_:"):
                j += 1
            word, k = expr[i:j], j
            while k < n and expr[k].isspace():
                k += 1
            following = expr[k] if k < n else ""
            if word.lower() in LABEL_LISTS and following == "(":
                i = expr.index(")", k) + 1
            elif following == "(" or word.lower() in KEYWORDS:
                i = j
            elif following == "{":
                i, labels = matcher_block(k)
                found.append((word, labels))
            else:
                found.append((word, set()))
                i = j
        else:
            i += 1
    return found


def test_the_selector_reader_finds_names_and_matchers():
    expr = ('sum by (job, le) (rate(a_total{x="1", y=~"a,b}"}[5m] offset 1h)) / on (job) group_left (pool) '
            'b:c:rate5m > bool 2 * histogram_quantile(0.99, rate(d_bucket[1m])) and up == 1e3 unless e')
    assert selectors(expr) == [("a_total", {"x", "y"}), ("b:c:rate5m", set()), ("d_bucket", set()), ("up", set()), ("e", set())]


def test_the_rules_pass_promtool_check(promtool):
    out = promtool_run(promtool, "check", "rules", RULES)
    assert "SUCCESS" in out, out
    assert alerts(), "no alert in the rules file"
    for name, rule in alerts().items():
        annotations = rule.get("annotations", {})
        assert annotations.get("summary") and len(annotations.get("description", "")) > 80, f"{name}: summary and an actionable description"
        assert rule.get("labels", {}).get("severity") in ("critical", "warning"), f"{name}: severity"
    funnel = [g for g in rule_groups() if g["name"] == "tracker-funnel"]
    assert funnel, "the group the fill-rate alert goes in"
    # Compose's Prometheus: its configuration loads the rules, and its job is the one TrackerDown selects.
    out = promtool_run(promtool, "check", "config", PROMETHEUS_CONFIG)
    assert "1 rule files found" in out, out
    jobs = [job["job_name"] for job in yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]]
    assert jobs == ["tracker"] and 'up{job="tracker"}' in alerts()["TrackerDown"]["expr"]


def test_every_dashboard_query_is_valid_promql(promtool, tmp_path):
    # promtool parses a rule's expression as Prometheus would: each query becomes a recording rule.
    queries = dashboard_queries()
    assert len(queries) >= 20
    check = tmp_path / "dashboard-queries.yaml"
    check.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]}]}))
    promtool_run(promtool, "check", "rules", check)
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


# What each alert is for, as made-up series: (series, values every minute), and when each alert
# must fire or stay silent. Values use promtool's expanding notation ('0+10x5' is 0 10 20 … 50).
def scenarios():
    api = 'tracker_http_requests_total{job="tracker", instance="a:8080", route="%s", status="%s"}'
    return [
        ("a replica stops answering scrapes",
         [('up{job="tracker", instance="a:8080"}', "1 1 0 0 0 0 0")],
         [(2, "TrackerDown", []), (5, "TrackerDown", [{"instance": "a:8080"}])]),
        ("the database stops answering",
         [('tracker_database_up{job="tracker", instance="a:8080"}', "1 1 1 0 0 0 0 0"),
          (api % ("/v1/events", "200"), "0+600x3 1800x20"),
          (api % ("/v1/events", "503"), "0x3 0+300x20"),
          (api % ("/readyz", "503"), "0x3 0+12x20")],
         [(3, "TrackerDatabaseUnavailable", []), (5, "TrackerDatabaseUnavailable", [{"instance": "a:8080"}]),
          (20, "TrackerServerErrors", []), (20, "TrackerRefusingRequests", [{"value": "100%"}])]),
        ("a steady 2 % of API requests end in a 500, probes aside",
         [(api % ("/v1/events", "200"), "0+980x20"), (api % ("/v1/events", "500"), "0+20x20"),
          (api % ("/healthz", "200"), "0+12000x20")],
         [(4, "TrackerServerErrors", []), (12, "TrackerServerErrors", [{"value": "2%"}])]),
        ("0.5 % of API requests end in a 500: under the threshold",
         [(api % ("/v1/events", "200"), "0+995x20"), (api % ("/v1/events", "500"), "0+5x20")],
         [(15, "TrackerServerErrors", [])]),
        ("3 % of requests refused with 503 is within what retries absorb",
         [(api % ("/v1/events", "200"), "0+970x30"), (api % ("/v1/events", "503"), "0+30x30")],
         [(25, "TrackerRefusingRequests", [])]),
        ("the queue stays over half full",
         [('tracker_queue_events{job="tracker", instance="a:8080"}', "0 0 60000x10"),
          ('tracker_queue_capacity_events{job="tracker", instance="a:8080"}', "100000x12")],
         [(5, "TrackerIngestQueueFilling", []), (8, "TrackerIngestQueueFilling", [{"instance": "a:8080", "value": "60%"}])]),
        ("the projector stops while events keep arriving",
         [('tracker_projector_lag_seconds{job="tracker", instance="%s"}' % i, "0 0+60x40") for i in ("a:8080", "b:8080")]
         + [('tracker_projector_lag_events{job="tracker", instance="a:8080"}', "0 0+20000x40")],
         [(6, "TrackerProjectionLagging", []), (8, "TrackerProjectionLagging", [{"value": "7m 0s"}]),
          (15, "TrackerProjectionBacklog", []), (18, "TrackerProjectionBacklog", [{"value": "340k"}]),
          (19, "TrackerProjectionLagCritical", []), (22, "TrackerProjectionLagCritical", [{"value": "21m 0s"}])]),
        ("invalid traffic jumps from 2 % to about 23 % of impressions",
         [('tracker_projector_impressions_total{job="tracker", instance="a:8080", ivt="none"}', "0+980x420"),
          ('tracker_projector_impressions_total{job="tracker", instance="a:8080", ivt="declared_bot"}', "0+20x300 6000+300x120"),
          ('tracker_projector_impressions_total{job="tracker", instance="a:8080", ivt="datacenter"}', "0x420")],
         [(300, "TrackerGIVTShareJump", []), (320, "TrackerGIVTShareJump", []), (380, "TrackerGIVTShareJump", [{"value": "23.44%"}])]),
        ("a steady 20 % of invalid traffic is no jump",
         [('tracker_projector_impressions_total{job="tracker", instance="a:8080", ivt="none"}', "0+800x300"),
          ('tracker_projector_impressions_total{job="tracker", instance="a:8080", ivt="high_rate"}', "0+200x300")],
         [(290, "TrackerGIVTShareJump", [])]),
        ("a jump on too few impressions to mean anything",
         [('tracker_projector_impressions_total{job="tracker", instance="a:8080", ivt="none"}', "0+10x300"),
          ('tracker_projector_impressions_total{job="tracker", instance="a:8080", ivt="declared_bot"}', "0x200 0+5x100")],
         [(290, "TrackerGIVTShareJump", [])]),
        ("a key brings new asset keys past its limit of the day",
         [('tracker_dimension_budget_refused_events_total{job="tracker", instance="a:8080", dimension="assetKey"}', "0x10 0+50x20"),
          ('tracker_dimension_budget_refused_events_total{job="tracker", instance="a:8080", dimension="adUnit"}', "0x30")],
         [(10, "TrackerDimensionBudgetRefusing", []), (14, "TrackerDimensionBudgetRefusing", [{"dimension": "assetKey"}])]),
        ("the fill rate falls from 80 % to 30 % of loads",
         [('tracker_projector_load_events_total{job="tracker", instance="a:8080", type="ad_request"}', "0+1000x420"),
          ('tracker_projector_load_events_total{job="tracker", instance="a:8080", type="ad_loaded"}', "0+800x300 240000+300x120")],
         [(300, "TrackerFillRateDropping", []), (340, "TrackerFillRateDropping", []),
          (380, "TrackerFillRateDropping", [{"value": "30%"}])]),
        ("a steady 30 % fill rate is no drop",
         [('tracker_projector_load_events_total{job="tracker", instance="a:8080", type="ad_request"}', "0+1000x300"),
          ('tracker_projector_load_events_total{job="tracker", instance="a:8080", type="ad_loaded"}', "0+300x300")],
         [(290, "TrackerFillRateDropping", [])]),
        ("a drop on too few loads to mean anything",
         [('tracker_projector_load_events_total{job="tracker", instance="a:8080", type="ad_request"}', "0+10x420"),
          ('tracker_projector_load_events_total{job="tracker", instance="a:8080", type="ad_loaded"}', "0+8x300 2400+1x120")],
         [(400, "TrackerFillRateDropping", [])]),
        ("an import outside tolerance, then a day without one",
         [('tracker_reconciliation_imports_total{job="tracker", instance="a:8080", tolerance="outside"}', "0x60 1x1500"),
          ('tracker_reconciliation_imports_total{job="tracker", instance="a:8080", tolerance="within"}', "0x30 1x1530")],
         [(50, "TrackerReconciliationOutsideTolerance", []), (70, "TrackerReconciliationOutsideTolerance", [{}]),
          (1520, "TrackerReconciliationOutsideTolerance", [])]),
    ]


def test_each_alert_fires_as_documented_and_not_before(promtool, tmp_path):
    rules = alerts()
    fired = set()
    tests = []
    for name, series, checks in scenarios():
        cases = []
        for minute, alert, expected in checks:
            assert alert in rules, f"{name}: no alert {alert}"
            exp = []
            for e in expected:
                labels = {k: v for k, v in e.items() if k != "value"}
                labels = {"job": "tracker", **labels, "severity": rules[alert]["labels"]["severity"]}
                exp.append({"exp_labels": labels, "exp_annotations": expected_annotations(rules[alert], labels, e.get("value"))})
                fired.add(alert)
            cases.append({"eval_time": f"{minute}m", "alertname": alert, "exp_alerts": exp})
        tests.append({"name": name, "interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
                      "alert_rule_test": cases})
    shutil.copy(RULES, tmp_path / RULES.name)
    unit = tmp_path / "tracker-alerts.test.yaml"
    unit.write_text(yaml.safe_dump({"rule_files": [RULES.name], "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    promtool_run(promtool, "test", "rules", unit)
    assert fired == set(rules), f"alerts no scenario makes fire: {sorted(set(rules) - fired)}"


def expected_annotations(rule, labels, value):
    """The rule's annotations as Prometheus renders them for `labels`; a summary that prints the
    value is expected only when the scenario gives it (promtool compares annotations whole)."""
    out = {}
    for key, template in rule["annotations"].items():
        text = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)
        if "$value" in text:
            assert value is not None, f"{rule['alert']}: give the value its {key} prints"
            text = re.sub(r"\{\{\s*\$value[^}]*\}\}", value, text)
        out[key] = text
    return out


# The tracker: traffic enough for every series, and the behaviour of the series the rules need.

def scrape(base):
    answer = requests.get(base + "/metrics", timeout=30)
    assert answer.status_code == 200, answer.text[:300]
    samples, labels = {}, {}
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
            labels.setdefault(s.name, set()).update(s.labels)
    return samples, labels


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture(scope="module")
def monitored(binary, start_tracker, tmp_path_factory):
    """A tracker on a database of its own (no other test's projector counts its impressions),
    with a rule set that labels BOT and a client's 11th event of a minute, activated before any
    event so no rebuild is needed."""
    db = Database(required_env("TRACKER_TEST_DATABASE_URL"), binary)
    rule_set = tmp_path_factory.mktemp("ivt") / "rules.json"
    rule_set.write_text(json.dumps(RULE_SET))
    assert "activated rule set 1" in run([binary, "ivt", "activate", str(rule_set), "--database-url", db.url])
    tracker = start_tracker(db.url, "monitoring")
    db.server_key = run([binary, "keys", "create", "--database-url", db.url, "--name", "py-server", "--scope", "ingest",
                         "--server"]).strip().splitlines()[-1]
    yield tracker, db
    tracker.stop()
    db.drop()


def wait_for(condition, what, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds} s: {what}")


class Traffic:
    """What the monitored tracker was sent, with a scrape before, one once the projector counted
    the impressions, and one at the end."""

    def __init__(self, tracker, db):
        api = API(tracker.base, db.ingest_key)
        reporter = API(tracker.base, db.report_key)
        self.before, _ = scrape(tracker.base)
        day = datetime.datetime.now(datetime.timezone.utc).replace(hour=12, minute=0, second=0, microsecond=0) - datetime.timedelta(days=1)
        people = [event("impression", f"mon-{uuid.uuid4()}", AD_UNIT, at=day) for _ in range(4)]
        test_ad = event("impression", f"mon-{uuid.uuid4()}", AD_UNIT, at=day, test=True)
        assert api.post_events(people + [test_ad]).json()["accepted"] == 5
        bot = [event("impression", f"mon-{uuid.uuid4()}", AD_UNIT, at=day) for _ in range(2)]
        assert api.post_events(bot, extra_headers={"User-Agent": BOT}).json()["accepted"] == 2
        # A batch with an invalid event, so that the rejection counter exists too.
        assert len(api.post_events([event("impression", "x", "no-slash")]).json()["rejected"]) == 1
        # One client's 6 impressions, projected, then 5 more in the same UTC minute of receipt:
        # the 11th labels the group high_rate, the 6 of the earlier step too.
        while datetime.datetime.now(datetime.timezone.utc).second > 30:
            time.sleep(1)
        server = API(tracker.base, db.server_key)
        burst = lambda n: [dict(event("impression", f"mon-{uuid.uuid4()}", BURST_UNIT, at=day), **BURST) for _ in range(n)]
        assert server.post_events(burst(6)).json()["accepted"] == 6
        self.projected = self.wait(tracker, none=4 + 6, declared_bot=2)
        assert server.post_events(burst(5)).json()["accepted"] == 5
        self.relabelled = self.wait(tracker, high_rate=11)

        # Ad Manager counted the tracker's 4 impressions (within tolerance), then 8 (outside);
        # the first file again is the existing import.
        def post_import(impressions):
            body = f"Date,Ad unit,Ad server impressions,Ad server clicks\r\n{day.date()},{AD_UNIT},{impressions},0\r\n".encode()
            answer = requests.post(tracker.base + "/v1/reconciliations", params={"tz": "UTC"}, data=body,
                                   headers=reporter.headers({"Content-Type": "text/csv"}), timeout=60)
            assert answer.status_code == 200, answer.text
            return answer.json()["existing"]
        assert [post_import(4), post_import(8), post_import(4)] == [False, False, True]
        for name in ("summary", "assets", "sources", "adchoices", "ivt"):
            assert reporter.report(name, **{"from": str(day.date()), "to": str(day.date())}).status_code == 200
        self.final, self.labels = scrape(tracker.base)

    def wait(self, tracker, **counts):
        def counted():
            samples, _ = scrape(tracker.base)
            return samples if all(self.moved(samples, ivt) >= n for ivt, n in counts.items()) else None
        return wait_for(counted, f"the projector counted the impressions {counts}")

    def moved(self, samples, ivt):
        count = lambda s: value(s, "tracker_projector_impressions_total", ivt=ivt) or 0
        return count(samples) - count(self.before)

    def imports(self, tolerance):
        count = lambda s: value(s, "tracker_reconciliation_imports_total", tolerance=tolerance) or 0
        return count(self.final) - count(self.before)


@pytest.fixture(scope="module")
def traffic(monitored):
    return Traffic(*monitored)


def test_the_series_the_rules_need_move_by_what_the_tracker_did(traffic):
    assert value(traffic.before, "tracker_database_up") == 1 and value(traffic.final, "tracker_database_up") == 1
    moved = lambda ivt: traffic.moved(traffic.projected, ivt)
    assert moved("none") == 4 + 6, "the test ad's impression is left out, as reports leave it out"
    assert moved("declared_bot") == 2
    assert moved("datacenter") == moved("high_rate") == 0
    # The burst: the 5 labelled when first projected and the 6 relabelled after them; the 6
    # stay counted under none too (docs/DEPLOY.md says so).
    moved = lambda ivt: traffic.moved(traffic.relabelled, ivt)
    assert (moved("none"), moved("high_rate"), moved("declared_bot")) == (4 + 6, 11, 2)
    assert traffic.imports("within") == 1 and traffic.imports("outside") == 1


def test_a_tracker_without_its_database_says_so(binary, start_tracker):
    # A port nothing listens on: every connection is refused at once.
    unreachable = f"postgresql://tracker@127.0.0.1:{free_port()}/tracker?connect_timeout=2"
    lost = start_tracker(unreachable, "monitoring-no-database", {"TRACKER_PROJECTOR": "off"})
    samples, _ = scrape(lost.base)
    assert value(samples, "tracker_database_up") == 0
    assert (value(samples, "tracker_projector_lag_errors_total") or 0) >= 1


def test_a_database_that_never_answers_does_not_hold_the_scrape(binary, start_tracker):
    # Accepts connections and says nothing, as a frozen PostgreSQL does; the connection's own
    # timeout is longer than a scrape's, so only /metrics' deadline (3 s) ends the wait.
    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(64)
    held = []

    def hold():
        while True:
            held.append(frozen.accept())
    threading.Thread(target=hold, daemon=True).start()
    url = f"postgresql://tracker@127.0.0.1:{frozen.getsockname()[1]}/tracker?connect_timeout=60"
    lost = start_tracker(url, "monitoring-frozen-database", {"TRACKER_PROJECTOR": "off"})
    started = time.monotonic()
    samples, _ = scrape(lost.base)
    assert time.monotonic() - started < 8, "the scrape waited for the database"
    assert value(samples, "tracker_database_up") == 0


def test_every_series_a_rule_or_panel_reads_is_exported(traffic):
    # After the traffic, so that counters made at their first use exist too.
    exported = {name: labels | TARGET_LABELS for name, labels in traffic.labels.items()}
    exported.update(PROMETHEUS_SERIES)
    records = recorded()
    uses = [(f"rule {r.get('alert') or r.get('record')}", r["expr"]) for g in rule_groups() for r in g["rules"]]
    uses += dashboard_queries()
    missing = []
    read = set()
    for where, expr in uses:
        for name, labels in selectors(expr):
            read.add(name)
            if name in records:
                continue
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in exported:
                missing.append(f"{where}: {name} (histogram {base}?)" if base != name else f"{where}: {name}")
            elif labels - exported[name]:
                missing.append(f"{where}: {name} has no label {sorted(labels - exported[name])}")
    assert not missing, "series or labels /metrics does not export:\n" + "\n".join(missing)
    # The dashboard shows the series the issue names.
    for name in ("tracker_events_accepted_total", "tracker_events_duplicate_total", "tracker_events_rejected_total",
                 "tracker_http_requests_total", "tracker_projector_lag_seconds", "tracker_projector_lag_events",
                 "tracker_report_duration_seconds_bucket", "tracker_db_connections_in_use", "tracker_projector_impressions_total",
                 "tracker_commit_duration_seconds_bucket", "tracker_reconciliation_imports_total", "tracker_database_up"):
        assert name in {n for _, e in dashboard_queries() for n, _ in selectors(e)}, f"the dashboard shows no {name}"
    assert read, "no series found in the rules and the dashboard"
