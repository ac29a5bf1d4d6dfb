"""GET /metrics: Prometheus's own parser reads the scrape, and the counters move by exactly
what a known sequence of requests did (a tracker of its own, so no other test's traffic counts).

Run by scripts/test-contract.sh (or `scripts/test-contract.sh -k metrics`).
"""

import uuid

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from events import API, click, event

AD_UNIT = "/1234/metrics/native"


def scrape(base):
    answer = requests.get(base + "/metrics", timeout=30)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.headers["Content-Type"].startswith("text/plain"), answer.headers["Content-Type"]
    samples = {}
    families = {}
    for family in text_string_to_metric_families(answer.text):
        families[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def metered(database, start_tracker):
    return start_tracker(database.url, "metrics", {"TRACKER_MAX_CONCURRENT_BATCHES": "64"})


def test_the_counters_move_by_what_the_requests_did(database, metered):
    api = API(metered.base, database.ingest_key)
    families, before = scrape(metered.base)
    for name, kind in [("tracker_http_requests", "counter"), ("tracker_queue_events", "gauge"),
                       ("tracker_db_connections_in_use", "gauge"), ("tracker_projector_lag_events", "gauge")]:
        assert families.get(name) == kind, f"{name}: {families.get(name)}"

    ad = f"m-{uuid.uuid4()}"
    first = [event("impression", ad, AD_UNIT), click(ad, AD_UNIT), event("ad_loaded", ad, AD_UNIT)]
    bad = [event("impression", ad, "no-slash"), click(ad, AD_UNIT, asset_key=None)]
    answer = api.post_events(first + bad)
    assert answer.status_code == 200 and answer.json()["accepted"] == 3 and len(answer.json()["rejected"]) == 2
    assert api.post_events(first).json()["duplicates"] == 3          # a retry
    assert api.post_events([event("impression", ad, AD_UNIT)] * 2).json() == {"accepted": 1, "duplicates": 1, "rejected": []}
    assert api.post_events(body=b"not json").status_code == 400
    assert api.report("summary", key=database.report_key, **{"from": "2026-01-01", "to": "2026-01-02"}).status_code == 200
    assert api.report("assets", key=database.report_key, **{"from": "2026-01-01", "to": "2026-01-02"}).status_code == 200
    assert api.get("/no-such-path").status_code == 404

    families, after = scrape(metered.base)
    moved = lambda name, **labels: value(after, name, **labels) - value(before, name, **labels)
    assert moved("tracker_events_accepted_total") == 4
    assert moved("tracker_events_duplicate_total") == 4
    assert moved("tracker_events_rejected_total", reason="adUnit") == 1
    assert moved("tracker_events_rejected_total", reason="assetKey") == 1
    # Batches that were parsed (the one that was not JSON is only an HTTP 400): 3 of 5 events, 3, 2.
    assert moved("tracker_batch_events_count") == 3
    assert moved("tracker_batch_events_sum") == 5 + 3 + 2
    assert moved("tracker_batch_events_bucket", le="2.0") == 1 and moved("tracker_batch_events_bucket", le="5.0") == 3
    assert moved("tracker_http_requests_total", route="/v1/events", status="200") == 3
    assert moved("tracker_http_requests_total", route="/v1/events", status="400") == 1
    assert moved("tracker_http_requests_total", route="NotFound", status="404") == 1
    assert moved("tracker_http_requests_total", route="/metrics", status="200") == 1   # the first scrape
    report_routes = [labels for (name, labels) in after if name == "tracker_http_requests_total" and ("status", "200") in labels
                     and any(k == "route" and "reports" in v for k, v in labels)]
    assert len(report_routes) == 1 and moved("tracker_http_requests_total", **dict(report_routes[0])) == 2
    assert moved("tracker_report_duration_seconds_count", report="summary") == 1
    assert moved("tracker_report_duration_seconds_count", report="assets") == 1
    # Three batches stored something or found duplicates: each was one commit of its own or shared one.
    commits = moved("tracker_commit_duration_seconds_count")
    assert 1 <= commits <= 3 and moved("tracker_commit_events_sum") == 3 + 3 + 2
    assert moved("tracker_commit_requests_sum") == 3
    # The retry's plain append met its stored ids and was written again (the strategy of the log).
    assert moved("tracker_commit_conflicts_total") == 1
    assert value(after, "tracker_queue_events") == 0
    assert value(after, "tracker_queue_capacity_events") == 100000
    assert value(after, "tracker_db_connections_max", pool="primary") == 8
    assert value(after, "tracker_db_connections_in_use", pool="primary") >= 0
    # Another tracker's projector on the same database may have projected these events: only the kind is fixed.
    assert families.get("tracker_projector_events") == "counter"
    assert families.get("tracker_projector_step_duration_seconds") == "histogram"
    assert families.get("tracker_projector_read_ahead") == "counter"
    assert moved("tracker_admission_rejections_total", limit="concurrent_batches") == 0


def test_metrics_off_serves_no_metrics(database, start_tracker):
    quiet = start_tracker(database.url, "metrics-off", {"TRACKER_METRICS": "off", "TRACKER_PROJECTOR": "off"})
    assert requests.get(quiet.base + "/metrics", timeout=30).status_code == 404
