"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright):
known events go in through the API, the page is loaded and given the key, and every number
it shows must equal what the JSON reports API answers for the same filters.
"""

import datetime
import os
import re
import shutil

import pytest
import requests

from conftest import RESULTS, Database, required_env
from events import API, click, event

HOME = "/5555/home/native"
NEWS = "/5555/news/native"
STORAGE_KEY = "tracker.reportKey"


def chromium_path():
    path = os.environ.get("TRACKER_CHROMIUM") or shutil.which("chromium")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("Chromium is not installed: scripts/test-dashboard.sh installs Debian's 'chromium' package "
                    "(apt-get install chromium), or set TRACKER_CHROMIUM to a Chromium binary", pytrace=False)
    return path


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        except Exception as error:  # the browser is there but cannot start: say why, never skip
            pytest.fail(f"Chromium at {executable} did not start: {error}", pytrace=False)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def dashboard_database(binary):
    db = Database(required_env("TRACKER_TEST_DATABASE_URL"), binary)
    yield db
    db.drop()


def at(day, hour, minute=0, second=0.0):
    return datetime.datetime.combine(day, datetime.time(hour, minute), tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=second)


def known_events(d1, d2, d3):
    """Three days of two ad units: attributed, duplicate, unattributed and stale clicks and
    impressions, double tracking, AdChoices on half the EEA reservation ads, and test traffic."""
    eea = {"eea": True, "reservation": True}
    return [
        # HOME, day 1: h1 is shown with AdChoices and clicked twice on MainImage within 1 s (one duplicate) and on Headline.
        event("ad_loaded", "h1", HOME, at=at(d1, 10)),
        event("impression", "h1", HOME, at=at(d1, 10, 0, 1), **eea),
        event("adchoices_impression", "h1", HOME, at=at(d1, 10, 0, 1)),
        click("h1", HOME, "MainImage", at=at(d1, 10, 0, 10)),
        click("h1", HOME, "MainImage", at=at(d1, 10, 0, 10.5)),
        click("h1", HOME, "Headline", at=at(d1, 10, 0, 20)),
        # h2: EEA reservation without the AdChoices icon, impression tracked by the app and the SDK.
        event("impression", "h2", HOME, at=at(d1, 11), **eea),
        event("impression", "h2", HOME, at=at(d1, 11, 0, 2), source="sdk", **eea),
        # h3: a click whose ad never had an impression.
        click("h3", HOME, "MainImage", at=at(d1, 12)),
        # HOME, day 2: h4 shown 90 minutes after it loaded (stale), clicked 2 h after the impression.
        event("ad_loaded", "h4", HOME, at=at(d2, 8)),
        event("impression", "h4", HOME, at=at(d2, 9, 30)),
        click("h4", HOME, "MainImage", at=at(d2, 11, 31)),
        event("impression", "h5", HOME, at=at(d2, 12), **eea),
        event("adchoices_impression", "h5", HOME, at=at(d2, 12)),
        # NEWS, day 2: a mediated ad tracked by the adapter and by the app.
        event("impression", "n1", NEWS, "native", at=at(d2, 13), source="mediation", adapter="AcmeAdapter"),
        event("impression", "n1", NEWS, "native", at=at(d2, 13, 0, 1), adapter="AcmeAdapter"),
        click("n1", NEWS, "Headline", format_id="native", at=at(d2, 13, 0, 30), source="mediation", adapter="AcmeAdapter"),
        # NEWS, day 3: a click 2 s before its impression.
        click("n2", NEWS, "CallToAction", format_id="native", at=at(d3, 9)),
        event("impression", "n2", NEWS, "native", at=at(d3, 9, 0, 2)),
        # Test traffic: counted only with includeTest.
        event("impression", "t1", HOME, at=at(d3, 10), test=True),
        click("t1", HOME, "MainImage", at=at(d3, 10, 0, 5), test=True),
    ]


def number(text):
    return int(text.replace(",", ""))


def percent(ratio):
    return f"{ratio * 100:.1f} %"


class Reports:
    """The JSON reports API, asked what the page should show."""

    def __init__(self, api, **params):
        self.rows = {name: api.report(name, **params).json()["rows"] for name in ("summary", "assets", "sources", "adchoices")}

    def total(self, report, field):
        return sum(row[field] for row in self.rows[report])

    def grouped(self, report, keys, fields):
        out = {}
        for row in self.rows[report]:
            key = tuple(row[k] for k in keys)
            group = out.setdefault(key, {f: 0 for f in fields})
            for f in fields:
                group[f] += row[f]
        return out


def apply(page, from_day, to_day, ad_unit="", format_id="", include_test=False):
    page.fill("#from", from_day.isoformat())
    page.fill("#to", to_day.isoformat())
    page.fill("#ad-unit", ad_unit)
    page.fill("#format-id", format_id)
    page.set_checked("#include-test", include_test)
    page.click("#filters button[type=submit]")
    page.wait_for_selector("body:is([data-state=ready], [data-state=error])", state="attached")
    assert page.get_attribute("body", "data-state") == "ready", page.inner_text("#status")


def table(page, table_id):
    """The body rows of a table as lists of cell texts keyed by the cells' data-col."""
    return page.eval_on_selector_all(
        f"#{table_id} tbody tr",
        "rows => rows.filter(r => !r.querySelector('td.empty')).map(r => ({cls: r.className, cells: Object.fromEntries([...r.cells].map(c => [c.dataset.col, c.textContent]))}))")


def assert_page_shows(page, reports, from_day, to_day):
    """Every number on the page equals the API's for the same filters."""
    impressions = reports.total("summary", "impressions")
    attributed = reports.total("summary", "attributedClicks")
    tiles = {
        "total-impressions": str(impressions),
        "total-clicks": str(reports.total("summary", "clicks")),
        "total-attributed": str(attributed),
        "total-ctr": percent(attributed / impressions if impressions else 0),
        "total-duplicate-impressions": str(reports.total("summary", "duplicateImpressions")),
        "total-duplicate-clicks": str(reports.total("summary", "duplicateClicks")),
        "total-stale": str(reports.total("summary", "staleImpressions")),
    }
    for tile, expected in tiles.items():
        shown = page.inner_text(f"#{tile}")
        if tile != "total-ctr":
            shown = str(number(shown))
        assert shown == expected, f"{tile}: the page shows {shown}, the API says {expected}"
    eea = reports.total("adchoices", "eeaReservationImpressions")
    share = page.inner_text("#total-adchoices-share")
    if eea:
        assert share == percent(reports.total("adchoices", "withAdChoices") / eea)

    per_day = reports.grouped("summary", ["day"], ["impressions", "clicks", "attributedClicks"])
    shown_days = {row["cells"]["day"]: row["cells"] for row in table(page, "daily-table")}
    assert set(shown_days) == {day for (day,) in per_day}
    for (day,), expected in per_day.items():
        for field in ("impressions", "clicks", "attributedClicks"):
            assert number(shown_days[day][field]) == expected[field], f"{day} {field}"

    chart_days = page.evaluate("Chart.getChart(document.getElementById('daily-chart')).data.labels")
    chart_impressions = page.evaluate("Chart.getChart(document.getElementById('daily-chart')).data.datasets[0].data")
    span = (to_day - from_day).days + 1
    assert chart_days == [(from_day + datetime.timedelta(days=i)).isoformat() for i in range(span)]
    assert chart_impressions == [per_day.get((d,), {"impressions": 0})["impressions"] for d in chart_days]

    asset_fields = ["clicks", "attributedClicks", "noImpression", "beforeImpression", "outsideWindow", "duplicateClicks"]
    per_asset = reports.grouped("assets", ["assetKey"], asset_fields)
    shown_assets = {row["cells"]["assetKey"]: row["cells"] for row in table(page, "assets-table")}
    assert set(shown_assets) == {key for (key,) in per_asset}
    for (key,), expected in per_asset.items():
        for field in asset_fields:
            assert number(shown_assets[key][field]) == expected[field], f"asset {key} {field}"

    source_fields = ["appImpressions", "sdkImpressions", "mediationImpressions", "doubleTrackedImpressionAds", "doubleTrackedClickAds"]
    per_adapter = reports.grouped("sources", ["adUnit", "adapter"], source_fields)
    shown_adapters = {(r["cells"]["adUnit"], r["cells"]["adapter"]): r for r in table(page, "sources-table")}
    assert set(shown_adapters) == {(u, a or "(none)") for (u, a) in per_adapter}
    for (unit, adapter), expected in per_adapter.items():
        row = shown_adapters[(unit, adapter or "(none)")]
        for field in source_fields:
            assert number(row["cells"][field]) == expected[field], f"{unit} {adapter} {field}"
        double = expected["doubleTrackedImpressionAds"] + expected["doubleTrackedClickAds"] > 0
        assert ("flag" in row["cls"]) == double, f"{unit} {adapter}: double tracking is highlighted"

    duplicate_fields = ["impressions", "duplicateImpressions", "staleImpressions", "clicks", "duplicateClicks"]
    per_unit = reports.grouped("summary", ["adUnit", "formatId"], duplicate_fields)
    shown_units = {(r["cells"]["adUnit"], r["cells"]["formatId"]): r["cells"] for r in table(page, "duplicates-table")}
    assert set(shown_units) == set(per_unit)
    for key, expected in per_unit.items():
        for field in duplicate_fields:
            assert number(shown_units[key][field]) == expected[field], f"{key} {field}"

    shown_adchoices = table(page, "adchoices-table")
    assert len(shown_adchoices) == len(reports.rows["adchoices"])
    for shown, row in zip(shown_adchoices, reports.rows["adchoices"]):
        cells = shown["cells"]
        assert (cells["day"], cells["adUnit"], cells["formatId"]) == (row["day"], row["adUnit"], row["formatId"])
        assert number(cells["eeaReservationImpressions"]) == row["eeaReservationImpressions"]
        assert number(cells["withAdChoices"]) == row["withAdChoices"]
        assert cells["share"] == percent(row["share"])
        below = row["eeaReservationImpressions"] > 0 and row["share"] < 1
        assert ("below" in shown["cls"]) == below, f"{row['day']} {row['adUnit']}: rows below 100 % are highlighted"


def test_dashboard_shows_the_reports_numbers_and_follows_the_filters(browser, dashboard_database, start_tracker):
    db = dashboard_database
    tracker = start_tracker(db.url, "dashboard")
    today = datetime.datetime.now(datetime.timezone.utc).date()
    d1, d2, d3 = (today - datetime.timedelta(days=n) for n in (3, 2, 1))
    receipt = API(tracker.base, db.ingest_key).post_events(known_events(d1, d2, d3))
    assert receipt.status_code == 200 and receipt.json()["rejected"] == [], receipt.text
    api = API(tracker.base, db.report_key)
    from_day, to_day = d1 - datetime.timedelta(days=1), today

    everything = Reports(api, **{"from": from_day.isoformat(), "to": to_day.isoformat()})
    # The known events, as the API counts them (so the comparisons below cannot pass on zeros).
    assert (everything.total("summary", "impressions"), everything.total("summary", "clicks"),
            everything.total("summary", "attributedClicks"), everything.total("summary", "duplicateImpressions"),
            everything.total("summary", "duplicateClicks"), everything.total("summary", "staleImpressions")) == (6, 6, 3, 2, 1, 1)
    assert any(row["share"] < 1 for row in everything.rows["adchoices"])

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems, requests_seen = [], []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("request", lambda request: requests_seen.append(request))

    page.goto(tracker.base + "/")
    assert page.is_visible("#key-panel") and not page.is_visible("#dashboard")

    # A wrong key: the page says so and keeps nothing.
    page.fill("#key", "trk_not_a_key")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#key-error:not([hidden])")
    assert "refused" in page.inner_text("#key-error")
    assert page.evaluate(f"sessionStorage.getItem('{STORAGE_KEY}')") is None
    # The page asks for several reports at once; an unknown key waits for the server's shared
    # key reload (at most 4 a second), so later refusals may still be on their way: let them land.
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)
    assert all("401" in p for p in problems), problems  # Chromium logs each refused request
    problems.clear()

    page.fill("#key", db.report_key)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("body[data-state=ready]", state="attached")
    apply(page, from_day, to_day)
    assert_page_shows(page, everything, from_day, to_day)
    assert re.fullmatch(r"Projection lag: [\d,]+ events, \d+\.\d s", page.inner_text("#lag")), page.inner_text("#lag")

    # The key lives in sessionStorage, travels in the Authorization header, never in a URL.
    assert page.evaluate(f"sessionStorage.getItem('{STORAGE_KEY}')") == db.report_key
    assert page.evaluate(f"localStorage.getItem('{STORAGE_KEY}')") is None
    report_requests = [r for r in requests_seen if "/v1/reports/" in r.url]
    sent = {r.headers.get("authorization") for r in report_requests}
    assert sent == {"Bearer trk_not_a_key", f"Bearer {db.report_key}"}, "every report request carries the key entered"
    assert all(db.report_key not in r.url for r in requests_seen), "the key appeared in a URL"
    assert all(r.url.startswith(tracker.base) or r.url.startswith("data:") for r in requests_seen), "a request left the server"

    RESULTS.mkdir(exist_ok=True)
    page.screenshot(path=str(RESULTS / "dashboard.png"), full_page=True)

    # A filter changes what is shown: one ad unit.
    news = Reports(api, **{"from": from_day.isoformat(), "to": to_day.isoformat(), "adUnit": NEWS})
    assert news.total("summary", "impressions") == 2 and news.total("summary", "impressions") != everything.total("summary", "impressions")
    apply(page, from_day, to_day, ad_unit=NEWS)
    assert_page_shows(page, news, from_day, to_day)
    assert page.inner_text("#total-impressions") == "2"
    page.screenshot(path=str(RESULTS / "dashboard-news.png"), full_page=True)

    # Test traffic only when asked for.
    with_test = Reports(api, **{"from": from_day.isoformat(), "to": to_day.isoformat(), "includeTest": "true"})
    assert with_test.total("summary", "impressions") == 7
    apply(page, from_day, to_day, include_test=True)
    assert_page_shows(page, with_test, from_day, to_day)

    # A reload keeps the key for this tab; "Forget key" drops it.
    page.reload()
    page.wait_for_selector("body[data-state=ready]", state="attached")
    assert page.is_visible("#dashboard")
    page.click("#forget")
    assert page.is_visible("#key-panel")
    assert page.evaluate(f"sessionStorage.getItem('{STORAGE_KEY}')") is None

    assert not problems, f"the browser reported errors (a Content-Security-Policy violation shows here): {problems}"
    context.close()


def test_dashboard_without_chart_js_says_so_and_still_shows_the_numbers(browser, dashboard_database, start_tracker):
    db = dashboard_database
    tracker = start_tracker(db.url, "dashboard-no-chart", {"TRACKER_CHARTJS_PATH": "/nonexistent/chart.min.js"})
    today = datetime.datetime.now(datetime.timezone.utc).date()
    from_day = today - datetime.timedelta(days=5)
    everything = Reports(API(tracker.base, db.report_key), **{"from": from_day.isoformat(), "to": today.isoformat()})
    assert everything.total("summary", "impressions") > 0, "the first test stored its events"

    context = browser.new_context()
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(tracker.base + "/")
    notice = page.inner_text("#chart-notice")
    assert "/nonexistent/chart.min.js" in notice and "libjs-chart.js" in notice
    page.fill("#key", db.report_key)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("body[data-state=ready]", state="attached")
    apply(page, from_day, today)
    assert number(page.inner_text("#total-impressions")) == everything.total("summary", "impressions")
    assert page.evaluate("typeof window.Chart") == "undefined"
    assert not problems, problems
    context.close()
    requests.get(tracker.base + "/healthz", timeout=5).raise_for_status()
