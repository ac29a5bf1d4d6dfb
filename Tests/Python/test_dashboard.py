"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright):
known events go in through the API, the page is loaded and given the key, and every number
it shows must equal what the JSON reports API answers for the same filters (time zone and
granularity included). Invalid traffic is labelled by a small rule set activated before any
event arrives, the ad funnel has two days of loads, failures and waterfalls of its own, and Ad
Manager exports are imported through the API for the reconciliation view.
"""

import contextlib
import datetime
import decimal
import json
import math
import os
import re
import shutil
import urllib.parse
from zoneinfo import ZoneInfo

import pytest
import requests

from conftest import RESULTS, Database, required_env, run
from events import API, click, event

HOME = "/5555/home/native"
NEWS = "/5555/news/native"
WORLD = "/5555/world/native"
STORAGE_KEY = "tracker.reportKey"
REPORTS = ("summary", "assets", "sources", "adchoices", "ivt", "funnel", "failures", "waterfall")
# The invalid-traffic labels in the order the rules decide them (docs/REPORTS.md).
LABELS = ("declared_bot", "datacenter", "high_rate", "excessive_clicks")
# Two ad units of their own for invalid traffic and the reconciliation, so the other tests'
# numbers stay what they were; their last segments are unique (Ad Manager names them so).
SPORT = "/5555/rec/sport_top"
WEATHER = "/5555/rec/weather_box"
# Two ad units of the ad funnel (PROTOCOL.md section 10), on days of their own.
FEED = "/5555/feed/native"
SEARCH = "/5555/search/native"
FUNNEL_COUNTS = ["requests", "adsRequested", "filledRequests", "failedRequests", "unansweredRequests", "loadedAds", "shownAds"]
CRAWLER = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PHONE_UA = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) NewsApp/4.2"
# The rule set of this file: the crawler by its user agent, a cloud range, at most 2 counted
# clicks per ad, and at most 40 events a minute per client (the known events are 30 from one
# client, 127.0.0.1 with requests' user agent, so none of them is labelled).
RULE_SET = {
    "name": "dashboard test",
    "userAgents": [{"pattern": "Googlebot", "name": "Googlebot"}],
    "ipRanges": ["34.64.0.0/10"],
    "maxClicksPerAd": 2,
    "maxEventsPerClientMinute": 40,
}
UTC = datetime.timezone.utc
NEW_YORK = "America/New_York"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# New York's fall-back day of 2025: 01:00-01:59 happens twice, at -04:00 and then at -05:00.
FALL_BACK = datetime.date(2025, 11, 2)
STATE = "body:is([data-state=ready], [data-state=error])"


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
    return datetime.datetime.combine(day, datetime.time(hour, minute), tzinfo=UTC) + datetime.timedelta(seconds=second)


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


def utc(text):
    return datetime.datetime.fromisoformat(text).astimezone(UTC)


def new_york_events():
    """WORLD in 2025, placed so New York's local days and hours differ from UTC's: an ad whose
    two assets are clicked (CTR 200 % in its hour), both 01:00 hours of the fall-back day, a
    click without an impression (an hour with clicks and no CTR), and an evening that is
    already the next UTC day."""
    eea = {"eea": True, "reservation": True}
    return [
        event("impression", "w1", WORLD, "native", at=utc("2025-10-31T23:30:00-04:00")),
        click("w1", WORLD, "MainImage", format_id="native", at=utc("2025-10-31T23:30:10-04:00")),
        click("w1", WORLD, "Headline", format_id="native", at=utc("2025-10-31T23:30:20-04:00")),
        event("impression", "w2", WORLD, "native", at=utc("2025-11-02T01:15:00-04:00")),
        click("w2", WORLD, "MainImage", format_id="native", at=utc("2025-11-02T01:16:00-04:00")),
        event("impression", "w3", WORLD, "native", at=utc("2025-11-02T01:15:00-05:00"), **eea),
        click("w4", WORLD, "MainImage", format_id="native", at=utc("2025-11-02T10:00:00-05:00")),
        event("impression", "w5", WORLD, "native", at=utc("2025-11-03T20:00:00-05:00")),
        event("impression", "w6", WORLD, "native", at=utc("2025-10-28T08:00:00-04:00")),
    ]


def ny(day, hour, minute=0, second=0.0):
    """A New York wall-clock time of a day (summer or winter) as a UTC datetime."""
    local = datetime.datetime.combine(day, datetime.time(hour, minute), tzinfo=ZoneInfo(NEW_YORK))
    return local.astimezone(UTC) + datetime.timedelta(seconds=second)


def device(n):
    """The user agent and address of the n-th person's phone (a server key may send both)."""
    return {"userAgent": PHONE_UA, "ip": f"192.0.2.{n}"}


def invalid_traffic(a, b):
    """Two New York days of SPORT and WEATHER with people and every kind of invalid traffic, as
    batches (key, User-Agent header, events). People come through a server key, each ad from its
    own phone; the crawler sends its own User-Agent header through the ordinary key.

    Expected (New York days a and b): SPORT a: 15 impressions (2 duplicates, 1 stale), 5 clicks
    (1 duplicate), crawler 3 impressions and 1 click; WEATHER a: 10 impressions, 1 click,
    crawler 1 impression; SPORT b: 9 impressions, 3 clicks (2 more of one ad are
    excessive_clicks), a data-center client 2 impressions and 1 click; WEATHER b: 6
    impressions, and a burst of 41 events of one client in a minute (high_rate: 20
    impressions, 1 click)."""
    people, crawler, cloud, burst = [], [], [], []
    n = 0

    def person(*events):
        nonlocal n
        n += 1
        for e in events:
            e.update(device(n))
            people.append(e)

    for i in range(1, 16):
        t = ny(a, 10, i)
        events = [event("impression", f"s{i}", SPORT, at=t)]
        if i <= 2:
            events.append(event("impression", f"s{i}", SPORT, at=t + datetime.timedelta(seconds=5)))
        if i == 3:
            events.append(event("ad_loaded", f"s{i}", SPORT, at=ny(a, 8, 30)))
        if i <= 5:
            events.append(click(f"s{i}", SPORT, at=t + datetime.timedelta(seconds=30)))
        if i == 5:
            events.append(click(f"s{i}", SPORT, at=t + datetime.timedelta(seconds=30.5)))
        person(*events)
    for i in range(1, 11):
        events = [event("impression", f"wa{i}", WEATHER, at=ny(a, 12, i))]
        if i == 1:
            events.append(click(f"wa{i}", WEATHER, at=ny(a, 12, i, 20)))
        person(*events)
    for i in range(1, 9):
        events = [event("impression", f"sb{i}", SPORT, at=ny(b, 9, i))]
        if i == 1:
            events.append(click(f"sb{i}", SPORT, at=ny(b, 9, i, 15)))
        person(*events)
    person(event("impression", "x1", SPORT, at=ny(b, 9, 30)),
           *[click("x1", SPORT, asset, at=ny(b, 9, 30, 10 * k)) for k, asset in enumerate(["MainImage", "Headline", "CallToAction", "Body"], 1)])
    for i in range(1, 7):
        person(event("impression", f"wb{i}", WEATHER, at=ny(b, 12, i)))

    crawler += [event("impression", f"b{i}", SPORT, at=ny(a, 11, i)) for i in range(1, 4)]
    crawler += [click("b1", SPORT, at=ny(a, 11, 1, 40)), event("impression", "bw1", WEATHER, at=ny(a, 11, 30))]
    cloud_client = {"userAgent": "Mozilla/5.0 (X11; Linux x86_64)", "ip": "34.64.1.2"}
    cloud += [dict(event("impression", f"d{i}", SPORT, at=ny(b, 10, i)), **cloud_client) for i in range(1, 3)]
    cloud.append(dict(click("d1", SPORT, at=ny(b, 10, 1, 20)), **cloud_client))
    burst_client = {"userAgent": "BurstClient/1.0", "ip": "198.51.100.7"}
    for i in range(1, 21):
        burst += [dict(event("ad_loaded", f"hr{i}", WEATHER, at=ny(b, 14, i)), **burst_client),
                  dict(event("impression", f"hr{i}", WEATHER, at=ny(b, 14, i, 1)), **burst_client)]
    burst.append(dict(click("hr1", WEATHER, at=ny(b, 14, 1, 5)), **burst_client))
    assert len(burst) == RULE_SET["maxEventsPerClientMinute"] + 1
    return [("server", None, people), ("ingest", CRAWLER, crawler), ("server", None, cloud), ("server", None, burst)]


def load_event(type, load_id, ad_unit, at, **fields):
    """An event of a load (`ad_request`, `ad_failed`, `mediation_result`): a `loadId`, no `requestId`."""
    out = event(type, None, ad_unit, at=at, loadId=load_id, **fields)
    del out["requestId"]
    return out


def funnel_events(f1, f2):
    """Two UTC days of the ad funnel, sent through a server key: each ad unit's day from a phone
    of its own, so that no client sends more than the rule set's events a minute (no label).

    Expected: FEED f1: 5 requests (7 ads requested): L1 filled with 2 ads, L3 failed and then
    filled by a late ad, L2 and L5 failed (mediation_no_fill, no_fill), L4 unanswered; 3 loaded
    ads (420, 480, 2500 ms: p50 500, p95 3000), 2 shown, 1 click; its waterfall: AcmeAdapter at
    1 (a failure, a repeated result and a timeout: 2 attempts, 120 and 5000 ms: p50 150, p95
    5000) and BetaAdapter at 2 (loaded and failed: 380 and 700 ms, p50 400, p95 750). FEED f2:
    2 requests, 1 filled (300 ms), 1 failed (no_fill), 1 shown and clicked, and a test load.
    SEARCH f1: a click and nothing of the funnel. SEARCH f2: 2 requests (3 ads requested), one
    filled by an ad without a latency, one failed (invalid_request); an ad loaded outside any
    load and shown: 2 loaded ads, 1 shown, no latency (p50 and p95 null); AcmeAdapter at 1
    loaded without a latency."""
    def t(day, hour, second=0.0):
        return at(day, hour, 0, second)

    def phone(events):
        client = {}
        for e in events:
            n = client.setdefault((e["adUnit"], e["occurredAt"][:10]), len(client) + 1)
            e.update({"userAgent": PHONE_UA, "ip": f"203.0.113.{n}"})
        return events

    return phone([
        load_event("ad_request", "L1", FEED, t(f1, 9), adsRequested=3),
        load_event("mediation_result", "L1", FEED, t(f1, 9, 0.2), adapter="AcmeAdapter", position=1, result="failed",
                   errorCode="mediation_no_fill", latencyMs=120),
        load_event("mediation_result", "L1", FEED, t(f1, 9, 0.3), adapter="AcmeAdapter", position=1, result="failed",
                   errorCode="mediation_no_fill", latencyMs=130),
        load_event("mediation_result", "L1", FEED, t(f1, 9, 0.6), adapter="BetaAdapter", position=2, result="loaded", latencyMs=380),
        event("ad_loaded", "fa1", FEED, at=t(f1, 9, 0.7), loadId="L1", latencyMs=420),
        event("ad_loaded", "fa2", FEED, at=t(f1, 9, 0.8), loadId="L1", latencyMs=480),
        event("impression", "fa1", FEED, at=t(f1, 9, 60)),
        event("impression", "fa2", FEED, at=t(f1, 9, 65)),
        click("fa1", FEED, at=t(f1, 9, 90)),
        load_event("ad_request", "L2", FEED, t(f1, 10)),
        load_event("mediation_result", "L2", FEED, t(f1, 10, 5), adapter="AcmeAdapter", position=1, result="timeout", latencyMs=5000),
        load_event("mediation_result", "L2", FEED, t(f1, 10, 5.7), adapter="BetaAdapter", position=2, result="failed",
                   errorCode="mediation_no_fill", latencyMs=700),
        load_event("ad_failed", "L2", FEED, t(f1, 10, 5.8), errorCode="mediation_no_fill", latencyMs=5800),
        load_event("ad_request", "L3", FEED, t(f1, 11)),
        load_event("ad_request", "L3", FEED, t(f1, 11, 1)),
        load_event("ad_failed", "L3", FEED, t(f1, 11, 2), errorCode="network_error", latencyMs=900),
        event("ad_loaded", "fa3", FEED, at=t(f1, 11, 3), loadId="L3", latencyMs=2500),
        load_event("ad_request", "L4", FEED, t(f1, 12)),
        load_event("ad_request", "L5", FEED, t(f1, 13)),
        load_event("ad_failed", "L5", FEED, t(f1, 13, 0.25), errorCode="no_fill", latencyMs=250),
        click("sx0", SEARCH, at=t(f1, 14)),
        load_event("ad_request", "L6", FEED, t(f2, 9)),
        load_event("mediation_result", "L6", FEED, t(f2, 9, 0.25), adapter="AcmeAdapter", position=1, result="loaded", latencyMs=250),
        event("ad_loaded", "fb1", FEED, at=t(f2, 9, 0.3), loadId="L6", latencyMs=300),
        event("impression", "fb1", FEED, at=t(f2, 9, 30)),
        click("fb1", FEED, at=t(f2, 9, 45)),
        load_event("ad_request", "L7", FEED, t(f2, 10)),
        load_event("ad_failed", "L7", FEED, t(f2, 10, 0.6), errorCode="no_fill", latencyMs=600),
        load_event("ad_request", "LT", FEED, t(f2, 11), test=True),
        load_event("ad_failed", "LT", FEED, t(f2, 11, 0.4), errorCode="no_fill", latencyMs=400, test=True),
        load_event("ad_request", "S1", SEARCH, t(f2, 14), adsRequested=2),
        load_event("mediation_result", "S1", SEARCH, t(f2, 14, 0.5), adapter="AcmeAdapter", position=1, result="loaded"),
        event("ad_loaded", "sa1", SEARCH, at=t(f2, 14, 0.6), loadId="S1"),
        load_event("ad_request", "S2", SEARCH, t(f2, 15)),
        load_event("ad_failed", "S2", SEARCH, t(f2, 15, 0.04), errorCode="invalid_request", latencyMs=40),
        event("ad_loaded", "sx1", SEARCH, at=t(f2, 16)),
        event("impression", "sx1", SEARCH, at=t(f2, 16, 20)),
    ])


class Site:
    """One tracker with the known events and the invalid traffic, shared by the tests of this file."""

    def __init__(self, tracker, db, binary):
        self.tracker = tracker
        self.base = tracker.base
        self.db = db
        self.binary = binary
        self.api = API(tracker.base, db.report_key)
        self.today = datetime.datetime.now(UTC).date()
        self.d1, self.d2, self.d3 = (self.today - datetime.timedelta(days=n) for n in (3, 2, 1))
        # The invalid traffic's two days: before every range the older tests look at by number.
        self.givt_a, self.givt_b = (self.today - datetime.timedelta(days=n) for n in (12, 11))
        # The funnel's two days: between those and the known events, so that they count in
        # the two weeks of the docs' picture and in no range compared with fixed numbers.
        self.f1, self.f2 = (self.today - datetime.timedelta(days=n) for n in (9, 8))


def activate(binary, db, rule_set, directory):
    path = directory / f"rules-{len(list(directory.iterdir()))}.json"
    path.write_text(json.dumps(rule_set))
    return run([binary, "ivt", "activate", str(path), "--database-url", db.url])


@pytest.fixture(scope="module")
def site(dashboard_database, start_tracker, binary, tmp_path_factory):
    db = dashboard_database
    # Before the tracker starts and before any event: empty projections take the newest rule
    # set at once, so every event is labelled under it with no rebuild.
    out = activate(binary, db, RULE_SET, tmp_path_factory.mktemp("ivt"))
    assert "activated rule set 1" in out, out
    tracker = start_tracker(db.url, "dashboard")
    s = Site(tracker, db, binary)
    receipt = API(tracker.base, db.ingest_key).post_events(known_events(s.d1, s.d2, s.d3) + new_york_events())
    assert receipt.status_code == 200 and receipt.json()["rejected"] == [], receipt.text
    server_key = run([binary, "keys", "create", "--database-url", db.url, "--name", "py-server", "--scope", "ingest",
                      "--server"]).strip().splitlines()[-1]
    receipt = API(tracker.base, server_key).post_events(funnel_events(s.f1, s.f2))
    assert receipt.status_code == 200 and receipt.json()["rejected"] == [], receipt.text
    keys = {"ingest": db.ingest_key, "server": server_key}
    for key, user_agent, events in invalid_traffic(s.givt_a, s.givt_b):
        receipt = API(tracker.base, keys[key]).post_events(events, extra_headers={"User-Agent": user_agent} if user_agent else None)
        assert receipt.status_code == 200 and receipt.json()["rejected"] == [], receipt.text
    return s


def number(text):
    return int(text.replace(",", ""))


def to_fixed_1(x):
    """JavaScript's x.toFixed(1): the exact binary value rounded, a tie away from zero (6.25 is
    6.3, where Python's format gives 6.2)."""
    return str(decimal.Decimal(x).quantize(decimal.Decimal("0.1"), rounding=decimal.ROUND_HALF_UP))


def percent(ratio):
    return f"{to_fixed_1(ratio * 100)} %"


def ctr_text(attributed, impressions):
    return percent(attributed / impressions) if impressions else "–"


def js_round(x):
    """JavaScript's Math.round: halves go up."""
    return math.floor(x + 0.5)


def days(first, last):
    return [(first + datetime.timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def offset_text(offset):
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def local_hours(first, last, tz):
    """Every local hour of the days first..last in the zone, labelled as the API labels them
    (Python's zone data, not the browser's): the clock's hour with the offset then, so the
    repeated hour of a fall-back day is two hours."""
    zone = ZoneInfo(tz)
    labels = []
    t = datetime.datetime.combine(first, datetime.time(), tzinfo=UTC) - datetime.timedelta(hours=15)
    end = datetime.datetime.combine(last, datetime.time(), tzinfo=UTC) + datetime.timedelta(hours=39)
    while t < end:
        local = t.astimezone(zone)
        if first <= local.date() <= last:
            label = local.strftime("%Y-%m-%dT%H:00:00") + ("Z" if tz == "UTC" else offset_text(local.utcoffset()))
            if label not in labels:
                labels.append(label)
        t += datetime.timedelta(minutes=15)
    return labels


class Reports:
    """The JSON reports API, asked what the page should show: every report by day, and the
    summary by hour as well when the range is short enough for the page to chart it by hour."""

    def __init__(self, api, **params):
        self.params = dict(params)
        self.tz = params.get("tz", "UTC")
        self.first = datetime.date.fromisoformat(params["from"])
        self.last = datetime.date.fromisoformat(params["to"])
        self.hourly = (self.last - self.first).days + 1 <= 7
        self.json = {name: self.ask(api, name, **params) for name in REPORTS}
        self.rows = {name: body["rows"] for name, body in self.json.items()}
        self.ivt_rules = self.json["summary"]["ivtRules"]
        self.hours = self.ask(api, "summary", granularity="hour", **params)["rows"] if self.hourly else None

    @staticmethod
    def ask(api, name, **params):
        response = api.report(name, **params)
        assert response.status_code == 200, response.text
        return response.json()

    def total(self, report, field):
        return sum(row[field] for row in self.rows[report])

    def grouped(self, report, keys, fields, rows=None):
        out = {}
        for row in self.rows[report] if rows is None else rows:
            key = tuple(row[k] for k in keys)
            group = out.setdefault(key, {f: 0 for f in fields})
            for f in fields:
                group[f] += row[f]
        return out

    def per_time(self):
        """The chart's and table's periods: hours or days, as the API labels them."""
        if self.hourly:
            return {k: v for (k,), v in self.grouped(None, ["hour"], ["impressions", "clicks", "attributedClicks"], self.hours).items()}
        return {k: v for (k,), v in self.grouped("summary", ["day"], ["impressions", "clicks", "attributedClicks"]).items()}


@contextlib.contextmanager
def dashboard(browser, site, viewport=None, timezone_id="UTC", path="/", key=True, **options):
    """A fresh tab on the dashboard (the browser in `timezone_id`), given the key; the browser
    must report no error by the end (a Content-Security-Policy violation would be one)."""
    context = browser.new_context(viewport=viewport or DESKTOP, timezone_id=timezone_id, accept_downloads=True, **options)
    page = context.new_page()
    problems = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.problems = problems  # a test that provokes an error on purpose clears what it expected
    page.goto(site.base + path)
    if key:
        enter_key(page, site.db.report_key)
    yield page
    assert not problems, f"the browser reported errors: {problems}"
    context.close()


def enter_key(page, key):
    page.fill("#key", key)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector(STATE, state="attached")
    assert page.get_attribute("body", "data-state") == "ready", page.inner_text("#status")


def wait_ready(page):
    page.wait_for_selector(STATE, state="attached")
    assert page.get_attribute("body", "data-state") == "ready", page.inner_text("#status")


def apply(page, from_day, to_day, ad_unit="", format_id="", include_test=False, tz=None, compare=None):
    page.fill("#from", from_day.isoformat())
    page.fill("#to", to_day.isoformat())
    page.fill("#ad-unit", ad_unit)
    page.fill("#format-id", format_id)
    page.set_checked("#include-test", include_test)
    if tz is not None:
        page.fill("#tz", tz)
    if compare is not None:
        page.set_checked("#compare", compare)
    page.click("#filters button[type=submit]")
    wait_ready(page)


def click_and_wait(page, selector):
    page.click(selector)
    wait_ready(page)


# A cell's text: a time's summary without what opens under it.
CELL_TEXT = "c => (c.querySelector('summary') || c).textContent"


def table(page, table_id):
    """The body rows of a table as lists of cell texts keyed by the cells' data-col."""
    return page.eval_on_selector_all(
        f"#{table_id} tbody tr",
        "rows => rows.filter(r => !r.querySelector('td.empty')).map(r => ({cls: r.className, data: {...r.dataset}, "
        f"cells: Object.fromEntries([...r.cells].map(c => [c.dataset.col, ({CELL_TEXT})(c)]))}}))")


def totals_row(page, table_id):
    """The cells of a table's totals row keyed by data-col, or None when it has none."""
    return page.eval_on_selector(
        f"#{table_id}",
        "t => { const r = t.tFoot && t.tFoot.rows[0]; return r ? Object.fromEntries([...r.cells].map(c => [c.dataset.col, c.textContent])) : null; }")


def assert_totals(page, table_id, rows, counts, ratios=None, first=None):
    """The totals row sums every count of the rows the API gave and works every ratio out
    from the summed counts (`ratios`: column -> (numerator, denominator) of the sums, or a
    function of the sums), "–" where there is no denominator; "Total" in the first column."""
    shown = totals_row(page, table_id)
    if not rows:
        assert shown is None, f"{table_id}: a totals row without rows"
        return
    sums = {field: sum(row[field] for row in rows) for field in counts}
    assert shown[first] == "Total", (table_id, shown)
    for field in counts:
        assert number(shown[field]) == sums[field], f"{table_id} total {field}: {shown[field]}, the API's rows sum to {sums[field]}"
    for field, of in (ratios or {}).items():
        numerator, denominator = of(sums) if callable(of) else (sums[of[0]], sums[of[1]])
        assert shown[field] == ctr_text(numerator, denominator), f"{table_id} total {field}"


def chart(page, canvas="time-chart"):
    return page.evaluate(f"(() => {{ const c = Chart.getChart(document.getElementById('{canvas}')); "
                         "return {labels: c.data.labels, data: c.data.datasets.map(d => d.data)}; })()")


def fragment(page):
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(page.url).fragment))


def assert_page_shows(page, reports):
    """Every number on the page equals the API's for the same filters."""
    impressions = reports.total("summary", "impressions")
    attributed = reports.total("summary", "attributedClicks")
    tiles = {
        "total-impressions": str(impressions),
        "total-clicks": str(reports.total("summary", "clicks")),
        "total-attributed": str(attributed),
        "total-ctr": ctr_text(attributed, impressions),
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
    else:
        assert share == "no EEA reservation impressions"

    # Over time: the table has the API's periods (hours for a short range, else days), the
    # chart every period of the range; a period without impressions has no CTR in either.
    time_key = "hour" if reports.hourly else "day"
    assert page.inner_text(f"#time-table thead th[data-col={time_key}]") == time_key.capitalize()
    per_time = reports.per_time()
    time_rows = reports.hours if reports.hourly else reports.rows["summary"]
    assert_totals(page, "time-table", time_rows, ["impressions", "clicks", "attributedClicks"],
                  {"ctr": ("attributedClicks", "impressions")}, first=time_key)
    shown_times = {row["cells"][time_key]: row["cells"] for row in table(page, "time-table")}
    assert list(shown_times) == list(per_time), "the table lists the API's periods in its order"
    for period, expected in per_time.items():
        for field in ("impressions", "clicks", "attributedClicks"):
            assert number(shown_times[period][field]) == expected[field], f"{period} {field}"
        assert shown_times[period]["ctr"] == ctr_text(expected["attributedClicks"], expected["impressions"]), period

    if page.evaluate("typeof window.Chart") == "function":
        drawn = chart(page)
        expected_labels = local_hours(reports.first, reports.last, reports.tz) if reports.hourly else days(reports.first, reports.last)
        assert drawn["labels"] == expected_labels
        impressions_line, clicks_line, ctr_line = drawn["data"]
        for label, shown_impressions, shown_clicks, shown_ctr in zip(drawn["labels"], impressions_line, clicks_line, ctr_line):
            expected = per_time.get(label, {"impressions": 0, "clicks": 0, "attributedClicks": 0})
            assert (shown_impressions, shown_clicks) == (expected["impressions"], expected["clicks"]), label
            if expected["impressions"] == 0:
                assert shown_ctr is None, f"{label}: no impressions, yet the chart draws a CTR of {shown_ctr} %"
            else:
                assert abs(shown_ctr - 100 * expected["attributedClicks"] / expected["impressions"]) < 0.006, label

    asset_fields = ["clicks", "attributedClicks", "noImpression", "beforeImpression", "outsideWindow", "duplicateClicks"]
    per_asset = reports.grouped("assets", ["assetKey"], asset_fields)
    shown_assets = {row["cells"]["assetKey"]: row["cells"] for row in table(page, "assets-table")}
    assert set(shown_assets) == {key for (key,) in per_asset}
    for (key,), expected in per_asset.items():
        for field in asset_fields:
            assert number(shown_assets[key][field]) == expected[field], f"asset {key} {field}"
    assert_totals(page, "assets-table", reports.rows["assets"], asset_fields, first="assetKey")

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
    assert_totals(page, "sources-table", reports.rows["sources"], source_fields, first="adUnit")

    duplicate_fields = ["impressions", "duplicateImpressions", "staleImpressions", "clicks", "duplicateClicks"]
    per_unit = reports.grouped("summary", ["adUnit", "formatId"], duplicate_fields)
    shown_units = {(r["cells"]["adUnit"], r["cells"]["formatId"]): r["cells"] for r in table(page, "duplicates-table")}
    assert set(shown_units) == set(per_unit)
    for key, expected in per_unit.items():
        for field in duplicate_fields:
            assert number(shown_units[key][field]) == expected[field], f"{key} {field}"
    assert_totals(page, "duplicates-table", reports.rows["summary"], duplicate_fields, first="adUnit")

    # GIVT beside the net numbers: shares of counted + labelled, the labels, the rule set.
    for what, counted in (("impressions", impressions), ("clicks", reports.total("summary", "clicks"))):
        labelled = reports.total("summary", "givt" + what.capitalize())
        assert page.inner_text(f"#givt-{what}-share") == ctr_text(labelled, counted + labelled), what
        assert page.inner_text(f"#givt-{what}-detail") == f"{labelled:,} labelled, {counted:,} counted", what
    assert page.inner_text("#ivt-rules") == str(reports.ivt_rules)
    assert {body["ivtRules"] for body in reports.json.values()} == {reports.ivt_rules}
    per_label = reports.grouped("ivt", ["label"], ["impressions", "clicks", "events"])
    shown_labels = table(page, "ivt-table")
    assert [r["cells"]["label"] for r in shown_labels] == [label for label in LABELS if (label,) in per_label]
    assert page.is_visible("#ivt-table") == bool(per_label) and page.is_visible("#ivt-none") == (not per_label)
    all_impressions = impressions + reports.total("summary", "givtImpressions")
    all_clicks = reports.total("summary", "clicks") + reports.total("summary", "givtClicks")
    for row in shown_labels:
        expected = per_label[(row["cells"]["label"],)]
        for field in ("impressions", "clicks", "events"):
            assert number(row["cells"][field]) == expected[field], f"{row['cells']['label']} {field}"
        assert row["cells"]["impressionShare"] == ctr_text(expected["impressions"], all_impressions)
        assert row["cells"]["clickShare"] == ctr_text(expected["clicks"], all_clicks)
    assert_totals(page, "ivt-table", reports.rows["ivt"], ["impressions", "clicks", "events"],
                  {"impressionShare": lambda t: (t["impressions"], all_impressions),
                   "clickShare": lambda t: (t["clicks"], all_clicks)}, first="label")

    shown_adchoices = table(page, "adchoices-table")
    assert len(shown_adchoices) == len(reports.rows["adchoices"])
    for shown, row in zip(shown_adchoices, reports.rows["adchoices"]):
        cells = shown["cells"]
        assert (cells["day"], cells["adUnit"], cells["formatId"]) == (row["day"], row["adUnit"], row["formatId"])
        assert number(cells["eeaReservationImpressions"]) == row["eeaReservationImpressions"]
        assert number(cells["withAdChoices"]) == row["withAdChoices"]
        assert cells["share"] == ctr_text(row["withAdChoices"], row["eeaReservationImpressions"])
        below = row["withAdChoices"] < row["eeaReservationImpressions"]
        assert ("below" in shown["cls"]) == below, f"{row['day']} {row['adUnit']}: rows below 100 % are highlighted"
    assert_totals(page, "adchoices-table", reports.rows["adchoices"], ["eeaReservationImpressions", "withAdChoices", "adchoicesClicks"],
                  {"share": ("withAdChoices", "eeaReservationImpressions")}, first="day")
    assert_funnel_shows(page, reports)


def latency_text(ms):
    return "–" if ms is None else f"{ms:,} ms"


def funnel_rows(reports):
    """The funnel table the page should show: the funnel report's rows, each with the summary's
    clicks of the same day and ad unit."""
    clicks = reports.grouped("summary", ["day", "adUnit"], ["clicks"])
    rows = [dict(r, clicks=clicks.get((r["day"], r["adUnit"]), {"clicks": 0})["clicks"]) for r in reports.rows["funnel"]]
    return sorted(rows, key=lambda r: (r["day"], r["adUnit"]))


def assert_latency_totals(page, table_id, rows, fields):
    """A percentile of several rows is no sum of theirs: the totals row has "–"."""
    if rows:
        shown = totals_row(page, table_id)
        assert [shown[f] for f in fields] == ["–"] * len(fields), f"{table_id}: the totals row has percentiles {shown}"


def assert_funnel_shows(page, reports):
    """The funnel, failures and waterfall tables and the funnel chart equal the API's rows."""
    expected = funnel_rows(reports)
    shown = table(page, "funnel-table")
    assert [(r["cells"]["day"], r["cells"]["adUnit"]) for r in shown] == [(r["day"], r["adUnit"]) for r in expected]
    for row, want in zip(shown, expected):
        cells, key = row["cells"], (want["day"], want["adUnit"])
        for field in FUNNEL_COUNTS + ["clicks"]:
            assert number(cells[field]) == want[field], f"funnel {key} {field}: {cells[field]}, the API says {want[field]}"
        assert cells["fillRate"] == ctr_text(want["filledRequests"], want["requests"]), key
        assert cells["showRate"] == ctr_text(want["shownAds"], want["loadedAds"]), key
        # Where there is a denominator, the page's rate is the API's own.
        if want["requests"]:
            assert cells["fillRate"] == percent(want["fillRate"]), key
        if want["loadedAds"]:
            assert cells["showRate"] == percent(want["showRate"]), key
        for field in ("loadLatencyP50Ms", "loadLatencyP95Ms"):
            assert cells[field] == latency_text(want[field]), f"funnel {key} {field}"
    assert_totals(page, "funnel-table", expected, FUNNEL_COUNTS + ["clicks"],
                  {"fillRate": ("filledRequests", "requests"), "showRate": ("shownAds", "loadedAds")}, first="day")
    assert_latency_totals(page, "funnel-table", expected, ["loadLatencyP50Ms", "loadLatencyP95Ms"])
    if page.evaluate("typeof window.Chart") == "function":
        drawn = chart(page, "funnel-chart")
        fields = ["requests", "filledRequests", "loadedAds", "shownAds", "clicks"]
        assert drawn["labels"] == ["Requests", "Filled", "Loaded ads", "Shown", "Clicks"]
        assert drawn["data"] == [[sum(r[f] for r in expected) for f in fields]]

    per_code = reports.grouped("failures", ["errorCode", "adUnit"], ["failedRequests"])
    failed = reports.total("failures", "failedRequests")
    shown = table(page, "failures-table")
    assert [(r["cells"]["errorCode"], r["cells"]["adUnit"]) for r in shown] == \
        sorted(per_code, key=lambda key: (-per_code[key]["failedRequests"], key)), "the most frequent failure first"
    for row in shown:
        key = (row["cells"]["errorCode"], row["cells"]["adUnit"])
        assert number(row["cells"]["failedRequests"]) == per_code[key]["failedRequests"], key
        assert row["cells"]["share"] == ctr_text(per_code[key]["failedRequests"], failed), key
        assert row["cells"]["meaning"], f"{key}: no meaning"
    assert_totals(page, "failures-table", reports.rows["failures"], ["failedRequests"],
                  {"share": lambda t: (t["failedRequests"], failed)}, first="errorCode")

    expected = sorted(reports.rows["waterfall"], key=lambda r: (r["day"], r["adUnit"], r["position"], r["adapter"]))
    shown = table(page, "waterfall-table")
    assert [tuple(r["cells"][k] for k in ("day", "adUnit", "position", "adapter")) for r in shown] == \
        [(r["day"], r["adUnit"], str(r["position"]), r["adapter"]) for r in expected], "a waterfall reads from its first position down"
    for row, want in zip(shown, expected):
        cells, key = row["cells"], (want["day"], want["adUnit"], want["adapter"], want["position"])
        for field in ("attempts", "loaded", "failed", "timeouts"):
            assert number(cells[field]) == want[field], f"waterfall {key} {field}"
        assert cells["fillRate"] == ctr_text(want["loaded"], want["attempts"]) == percent(want["fillRate"]), key
        for field in ("latencyP50Ms", "latencyP95Ms"):
            assert cells[field] == latency_text(want[field]), f"waterfall {key} {field}"
    assert_totals(page, "waterfall-table", expected, ["attempts", "loaded", "failed", "timeouts"],
                  {"fillRate": ("loaded", "attempts")}, first="day")
    assert_latency_totals(page, "waterfall-table", expected, ["latencyP50Ms", "latencyP95Ms"])


def test_dashboard_shows_the_reports_numbers_and_follows_the_filters(browser, site):
    db, api = site.db, site.api
    from_day, to_day = site.d1 - datetime.timedelta(days=1), site.today

    everything = Reports(api, **{"from": from_day.isoformat(), "to": to_day.isoformat(), "tz": "UTC"})
    # The known events, as the API counts them (so the comparisons below cannot pass on zeros).
    assert (everything.total("summary", "impressions"), everything.total("summary", "clicks"),
            everything.total("summary", "attributedClicks"), everything.total("summary", "duplicateImpressions"),
            everything.total("summary", "duplicateClicks"), everything.total("summary", "staleImpressions")) == (6, 6, 3, 2, 1, 1)
    assert any(row["share"] < 1 for row in everything.rows["adchoices"])

    context = browser.new_context(viewport=DESKTOP, timezone_id="UTC")
    page = context.new_page()
    problems, requests_seen = [], []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("request", lambda request: requests_seen.append(request))

    page.goto(site.base + "/")
    assert page.is_visible("#key-panel") and not page.is_visible("#dashboard") and not page.is_visible("#ad-form")

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

    enter_key(page, db.report_key)
    apply(page, from_day, to_day)
    assert_page_shows(page, everything)
    assert re.fullmatch(r"Projection lag: [\d,]+ events, \d+\.\d s", page.inner_text("#lag")), page.inner_text("#lag")

    # The key lives in sessionStorage, travels in the Authorization header, never in a URL.
    assert page.evaluate(f"sessionStorage.getItem('{STORAGE_KEY}')") == db.report_key
    assert page.evaluate(f"localStorage.getItem('{STORAGE_KEY}')") is None
    report_requests = [r for r in requests_seen if "/v1/reports/" in r.url]
    sent = {r.headers.get("authorization") for r in report_requests}
    assert sent == {"Bearer trk_not_a_key", f"Bearer {db.report_key}"}, "every report request carries the key entered"
    assert all(db.report_key not in r.url for r in requests_seen), "the key appeared in a URL"
    assert db.report_key not in page.url
    assert all(r.url.startswith(site.base) or r.url.startswith("data:") for r in requests_seen), "a request left the server"
    assert all("tz=" in r.url for r in report_requests), "every report request names the time zone"

    RESULTS.mkdir(exist_ok=True)
    page.screenshot(path=str(RESULTS / "dashboard-all.png"), full_page=True)

    # A filter changes what is shown: one ad unit.
    news = Reports(api, **{"from": from_day.isoformat(), "to": to_day.isoformat(), "adUnit": NEWS, "tz": "UTC"})
    assert news.total("summary", "impressions") == 2 and news.total("summary", "impressions") != everything.total("summary", "impressions")
    apply(page, from_day, to_day, ad_unit=NEWS)
    assert_page_shows(page, news)
    assert page.inner_text("#total-impressions") == "2"
    page.screenshot(path=str(RESULTS / "dashboard-news.png"), full_page=True)

    # Test traffic only when asked for.
    with_test = Reports(api, **{"from": from_day.isoformat(), "to": to_day.isoformat(), "includeTest": "true", "tz": "UTC"})
    assert with_test.total("summary", "impressions") == 7
    apply(page, from_day, to_day, include_test=True)
    assert_page_shows(page, with_test)

    # A reload keeps the key for this tab; "Forget key" drops it.
    page.reload()
    wait_ready(page)
    assert page.is_visible("#dashboard")
    page.click("#forget")
    assert page.is_visible("#key-panel")
    assert page.evaluate(f"sessionStorage.getItem('{STORAGE_KEY}')") is None

    assert not problems, f"the browser reported errors (a Content-Security-Policy violation shows here): {problems}"
    context.close()


def test_the_time_zone_is_the_browsers_by_default_and_days_are_its_local_days(browser, site):
    first, last = datetime.date(2025, 10, 25), datetime.date(2025, 11, 5)  # 12 days: by day
    params = {"from": first.isoformat(), "to": last.isoformat()}
    in_new_york = Reports(site.api, tz=NEW_YORK, **params)
    in_utc = Reports(site.api, tz="UTC", **params)
    # The events were placed so that the zone changes the days (else this test proves nothing).
    assert [r["day"] for r in in_new_york.rows["summary"]] == ["2025-10-28", "2025-10-31", "2025-11-02", "2025-11-03"]
    assert [r["day"] for r in in_utc.rows["summary"]] == ["2025-10-28", "2025-11-01", "2025-11-02", "2025-11-04"]

    with dashboard(browser, site, timezone_id=NEW_YORK) as page:
        assert page.input_value("#tz") == NEW_YORK, "the zone picker starts at the browser's zone"
        assert fragment(page)["tz"] == NEW_YORK
        zones = page.eval_on_selector_all("#tz-names option", "options => options.map(o => o.value)")
        assert zones[0] == "UTC" and {NEW_YORK, "Asia/Tokyo", "Europe/Berlin"} <= set(zones)
        apply(page, first, last)
        assert_page_shows(page, in_new_york)
        assert f"local days in {NEW_YORK}, by day" in page.inner_text("#status")

        # Another zone is one field away, and every number follows it.
        apply(page, first, last, tz="UTC")
        assert_page_shows(page, in_utc)



def test_a_short_range_is_charted_by_hour_with_both_hours_of_a_fall_back_night(browser, site):
    first, last = FALL_BACK - datetime.timedelta(days=2), FALL_BACK + datetime.timedelta(days=1)  # 4 days: by hour
    reports = Reports(site.api, tz=NEW_YORK, **{"from": first.isoformat(), "to": last.isoformat()})
    hours = [r["hour"] for r in reports.hours]
    assert "2025-11-02T01:00:00-04:00" in hours and "2025-11-02T01:00:00-05:00" in hours
    assert any(r["impressions"] == 0 and r["clicks"] > 0 for r in reports.hours), "an hour with clicks and no impressions"

    with dashboard(browser, site, timezone_id=NEW_YORK) as page:
        apply(page, first, last)
        assert_page_shows(page, reports)
        assert "by hour" in page.inner_text("#status")
        drawn = chart(page)
        assert len(drawn["labels"]) == 4 * 24 + 1, "the fall-back day has 25 hours"
        repeated = [i for i, label in enumerate(drawn["labels"]) if label.startswith("2025-11-02T01:00:00")]
        assert [drawn["labels"][i] for i in repeated] == ["2025-11-02T01:00:00-04:00", "2025-11-02T01:00:00-05:00"]
        assert all(drawn["data"][0][i] == 1 for i in repeated), "each 01:00 hour has its own impression"
        # The ticks are clock hours a few hours apart, never turned, the first of each day with its date below.
        ticks = [t for t in page.evaluate("Chart.getChart(document.getElementById('time-chart')).scales.x.ticks.map(t => t.label)") if t]
        hours = [int((t[0] if isinstance(t, list) else t)[:2]) for t in ticks]
        assert all(re.fullmatch(r"\d{2}:00", t[0] if isinstance(t, list) else t) for t in ticks), ticks
        step = hours[1] - hours[0]
        assert step in (1, 2, 3, 4, 6, 12) and all(h % step == 0 for h in hours), ticks
        assert [t[1] for t in ticks if isinstance(t, list)] == days(first, last), ticks
        assert_labels_inside(page, "time-chart")
        # A table's hour with clicks and no impressions has no CTR.
        no_impressions = [r for r in table(page, "time-table") if r["cells"]["impressions"] == "0"]
        assert no_impressions and all(r["cells"]["ctr"] == "–" for r in no_impressions)

        # A longer range is by day, and a day without data has no CTR point either.
        long_first = first - datetime.timedelta(days=10)
        apply(page, long_first, last)
        by_day = Reports(site.api, tz=NEW_YORK, **{"from": long_first.isoformat(), "to": last.isoformat()})
        assert not by_day.hourly
        assert_page_shows(page, by_day)
        assert None in chart(page)["data"][2], "days without impressions leave gaps in the CTR line"


def test_at_phone_width_nothing_scrolls_sideways(browser, site, imports):
    def fits(page, view):
        sizes = page.evaluate("({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth})")
        assert sizes["scroll"] <= sizes["client"], f"{view}: the page scrolls sideways at 390 px ({sizes})"

    options = {"is_mobile": True, "has_touch": True, "device_scale_factor": 2}
    with dashboard(browser, site, viewport=PHONE, timezone_id=NEW_YORK, key=False, **options) as page:
        fits(page, "the key form")
        enter_key(page, site.db.report_key)
        first, last = FALL_BACK - datetime.timedelta(days=2), FALL_BACK + datetime.timedelta(days=1)
        apply(page, first, last, compare=True)
        fits(page, "the reports by hour")

        # The filters stack: each field is below the one before it, all within the screen.
        boxes = [page.locator(selector).bounding_box() for selector in ("#from", "#tz", "#ad-unit", "#format-id")]
        assert all(b["x"] >= 0 and b["x"] + b["width"] <= PHONE["width"] for b in boxes), boxes
        assert [b["y"] for b in boxes] == sorted(b["y"] for b in boxes) and len({b["y"] for b in boxes}) == 4, boxes
        # The tiles wrap onto several rows; every table is a card per row with every column in view.
        tile_rows = page.eval_on_selector_all(".tile", "tiles => tiles.map(t => Math.round(t.getBoundingClientRect().top))")
        assert len(set(tile_rows)) >= 3, tile_rows
        for table_id in ("time-table", "assets-table", "sources-table", "duplicates-table", "adchoices-table"):
            assert_columns_in_view(page, table_id)
        for canvas in ("time-chart", "assets-chart"):
            assert_labels_inside(page, canvas)
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / "dashboard-phone-full.png"), full_page=True)
        # For docs/OPERATIONS.md: the filters and then what a phone shows below them.
        top = page.eval_on_selector("#filters", "e => e.getBoundingClientRect().top + window.scrollY")
        page.screenshot(path=str(RESULTS / "dashboard-phone.png"), full_page=True,
                        clip={"x": 0, "y": top, "width": PHONE["width"], "height": 1500})

        apply(page, site.d1 - datetime.timedelta(days=20), site.today, ad_unit="/5555/" + "a-very-long-ad-unit-name" * 6 + "/native")
        fits(page, "a long ad unit in the status line")
        apply(page, site.d1 - datetime.timedelta(days=20), site.today)
        fits(page, "the reports by day")
        assert_columns_in_view(page, "time-table")
        assert_labels_inside(page, "time-chart")
        # For docs/OPERATIONS.md: a table as a phone shows it, a card per row and the totals.
        page.locator("#time-table").locator("xpath=ancestor::section[1]").screenshot(path=str(RESULTS / "dashboard-phone-table.png"))

        page.fill("#ad-lookup", "h1")
        page.click("#ad-form button[type=submit]")
        page.wait_for_selector("#ad-view[data-state=ready]")
        fits(page, "an ad's audit trail")
        assert_columns_in_view(page, "ad-events")
        page.screenshot(path=str(RESULTS / "dashboard-phone-ad.png"), full_page=True)
        page.fill("#ad-lookup", "x" * 128)
        page.click("#ad-form button[type=submit]")
        page.wait_for_selector("#ad-view[data-state=missing]")
        fits(page, "no such ad")
        assert len(page.problems) == 1 and "404" in page.problems[0], page.problems  # Chromium logs the 404
        page.problems.clear()

        # Invalid traffic: its tiles wrap like the others, its table is cards with every column in view.
        page.click("#ad-back")
        wait_ready(page)
        apply(page, site.givt_a, site.givt_b, tz=NEW_YORK)
        fits(page, "the GIVT panel")
        assert len(table(page, "ivt-table")) == 4
        assert_columns_in_view(page, "ivt-table")
        givt_tiles = page.eval_on_selector_all("#givt-panel .tile", "ts => ts.map(t => t.getBoundingClientRect().right)")
        assert max(givt_tiles) <= PHONE["width"], givt_tiles

        # The reconciliation: the chooser's long lines, the table and the breakdowns stay within the screen.
        page.click("#views [data-view=reconciliation]")
        wait_reconciliation(page)
        fits(page, "the reconciliation")
        assert_columns_in_view(page, "rec-table")
        box = page.locator("#rec-import").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
        articles = page.eval_on_selector_all("#rec-explain article", "as => as.map(a => a.getBoundingClientRect().right)")
        assert len(articles) == 2 and max(articles) <= PHONE["width"], articles
        page.screenshot(path=str(RESULTS / "dashboard-phone-reconciliation.png"), full_page=True)
        page.select_option("#rec-import", imports[0]["id"])
        page.wait_for_function(f"() => location.hash.includes('import={imports[0]['id']}')")
        wait_reconciliation(page)
        fits(page, "the other import")


def test_presets_pick_their_days_in_the_chosen_zone(browser, site):
    # A zone whose date differs from UTC's right now, so "today" must be the zone's.
    now = datetime.datetime.now(UTC)
    zone = "Pacific/Kiritimati" if now.hour >= 10 else "Pacific/Pago_Pago"
    with dashboard(browser, site) as page:
        page.fill("#tz", zone)
        click_and_wait(page, "[data-preset=today]")
        today = datetime.datetime.now(ZoneInfo(zone)).date()
        assert today != datetime.datetime.now(UTC).date()
        assert (page.input_value("#from"), page.input_value("#to")) == (today.isoformat(), today.isoformat())
        assert_page_shows(page, Reports(site.api, tz=zone, **{"from": today.isoformat(), "to": today.isoformat()}))
        assert len(chart(page)["labels"]) == 24

        first_of_month = today.replace(day=1)
        last_month_end = first_of_month - datetime.timedelta(days=1)
        expected = {
            "yesterday": (today - datetime.timedelta(days=1), today - datetime.timedelta(days=1)),
            "last-7-days": (today - datetime.timedelta(days=6), today),
            "last-30-days": (today - datetime.timedelta(days=29), today),
            "this-month": (first_of_month, today),
            "last-month": (last_month_end.replace(day=1), last_month_end),
        }
        assert [b.strip() for b in page.eval_on_selector_all("[data-preset]", "bs => bs.map(b => b.textContent)")] == \
            ["Today", "Yesterday", "Last 7 days", "Last 30 days", "This month", "Last month"]
        for preset, (first, last) in expected.items():
            click_and_wait(page, f"[data-preset={preset}]")
            assert (page.input_value("#from"), page.input_value("#to")) == (first.isoformat(), last.isoformat()), preset
            assert (fragment(page)["from"], fragment(page)["to"], fragment(page)["tz"]) == (first.isoformat(), last.isoformat(), zone)
            reports = Reports(site.api, tz=zone, **{"from": first.isoformat(), "to": last.isoformat()})
            assert_page_shows(page, reports)
            assert len(chart(page)["labels"]) == (24 * ((last - first).days + 1) if reports.hourly else (last - first).days + 1)
        assert Reports(site.api, tz=zone, **{"from": expected["last-30-days"][0].isoformat(), "to": today.isoformat()}).total("summary", "impressions") > 0


def test_filters_are_kept_in_the_url_over_a_reload_and_in_a_shared_link(browser, site):
    first, last = FALL_BACK - datetime.timedelta(days=10), FALL_BACK + datetime.timedelta(days=3)
    params = {"from": first.isoformat(), "to": last.isoformat(), "tz": NEW_YORK, "adUnit": WORLD, "formatId": "native", "includeTest": "true"}
    reports = Reports(site.api, **params)
    assert reports.total("summary", "impressions") == 5

    with dashboard(browser, site) as page:
        apply(page, first, last, ad_unit=WORLD, format_id="native", include_test=True, tz=NEW_YORK, compare=True)
        assert_page_shows(page, reports)
        assert fragment(page) == {"from": first.isoformat(), "to": last.isoformat(), "tz": NEW_YORK, "adUnit": WORLD,
                                  "formatId": "native", "includeTest": "true", "compare": "true"}
        assert site.db.report_key not in page.url
        shared = page.url

        page.reload()
        wait_ready(page)
        assert (page.input_value("#from"), page.input_value("#to"), page.input_value("#tz"), page.input_value("#ad-unit"),
                page.input_value("#format-id")) == (first.isoformat(), last.isoformat(), NEW_YORK, WORLD, "native")
        assert page.is_checked("#include-test") and page.is_checked("#compare")
        assert_page_shows(page, reports)

    # Someone else opens the link (another browser, in another zone): the key is asked for,
    # then the link's filters are shown, not that browser's defaults.
    with dashboard(browser, site, timezone_id="Asia/Tokyo", path="/" + shared.split("/", 3)[3], key=False) as page:
        assert page.is_visible("#key-panel")
        enter_key(page, site.db.report_key)
        assert page.input_value("#tz") == NEW_YORK and page.input_value("#ad-unit") == WORLD
        assert_page_shows(page, reports)


def test_the_previous_period_is_compared_as_the_api_counts_it(browser, site):
    first, last = site.d2, site.today  # 3 days; the previous period is the 3 days before
    previous_first, previous_last = first - datetime.timedelta(days=3), first - datetime.timedelta(days=1)
    current = Reports(site.api, tz="UTC", **{"from": first.isoformat(), "to": last.isoformat()})
    previous = Reports(site.api, tz="UTC", **{"from": previous_first.isoformat(), "to": previous_last.isoformat()})
    assert current.total("summary", "impressions") == 4 and previous.total("summary", "impressions") == 2

    def count_change(was, now):
        if was == 0:
            return "±0 %" if now == 0 else "new"
        delta = js_round((now - was) / was * 100)
        return ("+" if delta > 0 else "-" if delta < 0 else "±") + f"{abs(delta)} %"

    def ratio(numerator, denominator):
        return numerator / denominator if denominator else None

    expected = {}
    for tile, field in [("impressions", "impressions"), ("clicks", "clicks"), ("attributed", "attributedClicks"),
                        ("duplicate-impressions", "duplicateImpressions"), ("duplicate-clicks", "duplicateClicks"),
                        ("stale", "staleImpressions")]:
        was, now = previous.total("summary", field), current.total("summary", field)
        expected[tile] = f"previous {was}, {count_change(was, now)}"
    for tile, (numerator, denominator, report) in {"ctr": ("attributedClicks", "impressions", "summary"),
                                                  "adchoices-share": ("withAdChoices", "eeaReservationImpressions", "adchoices")}.items():
        was = ratio(previous.total(report, numerator), previous.total(report, denominator))
        now = ratio(current.total(report, numerator), current.total(report, denominator))
        expected[tile] = ratio_comparison(was, now)
    assert expected["impressions"] == "previous 2, +100 %"

    with dashboard(browser, site) as page:
        apply(page, first, last, compare=False)
        assert not page.is_visible("#change-impressions")
        apply(page, first, last, compare=True)
        assert_page_shows(page, current)
        shown = {tile: page.inner_text(f"#change-{tile}") for tile in expected}
        assert shown == expected
        # Green for better, red for worse: fewer duplicate clicks are better, fewer attributed clicks worse.
        assert expected["duplicate-clicks"] == "previous 1, -100 %" and expected["attributed"] == "previous 2, -50 %"
        colour = {tile: page.get_attribute(f"#change-{tile}", "class") for tile in expected}
        assert colour["impressions"] == colour["duplicate-clicks"] == "change better"
        assert colour["attributed"] == "change worse" and colour["duplicate-impressions"] == "change"
        assert f"Compared with {previous_first.isoformat()} to {previous_last.isoformat()}." in page.inner_text("#status")
        assert_one_kind_of_dash(page)
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / "dashboard-compare.png"), full_page=True)

        # A previous period without impressions has no CTR: "previous –", and no change beside it.
        apply(page, site.d1, site.d3, compare=True)
        assert Reports(site.api, tz="UTC", **{"from": (site.d1 - datetime.timedelta(days=3)).isoformat(),
                                              "to": (site.d1 - datetime.timedelta(days=1)).isoformat()}).total("summary", "impressions") == 0
        assert page.inner_text("#change-ctr") == "previous –"
        assert page.inner_text("#change-impressions") == "previous 0, new"
        assert_one_kind_of_dash(page)


def test_clicking_a_value_in_a_table_filters_by_it(browser, site):
    first, last = site.d1 - datetime.timedelta(days=10), site.today  # by day
    with dashboard(browser, site) as page:
        apply(page, first, last)
        click_and_wait(page, f"#duplicates-table button[data-filter=adUnit][data-value='{NEWS}']")
        assert page.input_value("#ad-unit") == NEWS and fragment(page)["adUnit"] == NEWS
        assert_page_shows(page, Reports(site.api, tz="UTC", adUnit=NEWS, **{"from": first.isoformat(), "to": last.isoformat()}))

        click_and_wait(page, "#duplicates-table button[data-filter=formatId][data-value='native']")
        assert (page.input_value("#ad-unit"), page.input_value("#format-id")) == (NEWS, "native")
        assert_page_shows(page, Reports(site.api, tz="UTC", adUnit=NEWS, formatId="native",
                                        **{"from": first.isoformat(), "to": last.isoformat()}))

        # Back undoes a filter.
        page.go_back()
        page.wait_for_function("() => document.getElementById('format-id').value === '' && document.body.dataset.state === 'ready'")
        assert "formatId" not in fragment(page)
        assert_page_shows(page, Reports(site.api, tz="UTC", adUnit=NEWS, **{"from": first.isoformat(), "to": last.isoformat()}))

        # The sources table's ad unit and the AdChoices table's too.
        page.fill("#ad-unit", "")
        apply(page, first, last)
        click_and_wait(page, f"#sources-table button[data-filter=adUnit][data-value='{HOME}']")
        assert page.input_value("#ad-unit") == HOME
        assert_page_shows(page, Reports(site.api, tz="UTC", adUnit=HOME, **{"from": first.isoformat(), "to": last.isoformat()}))

        # A day of the daily table opens that day by hour.
        click_and_wait(page, f"#time-table button[data-filter=day][data-value='{site.d2.isoformat()}']")
        assert (page.input_value("#from"), page.input_value("#to")) == (site.d2.isoformat(), site.d2.isoformat())
        assert_page_shows(page, Reports(site.api, tz="UTC", adUnit=HOME, **{"from": site.d2.isoformat(), "to": site.d2.isoformat()}))


def test_csv_downloads_are_the_apis_csv_for_the_filters_shown(browser, site):
    first, last = FALL_BACK - datetime.timedelta(days=2), FALL_BACK + datetime.timedelta(days=1)
    params = {"from": first.isoformat(), "to": last.isoformat(), "tz": NEW_YORK, "includeTest": "false"}
    with dashboard(browser, site, timezone_id=NEW_YORK) as page:
        apply(page, first, last)
        for report, extra, suffix in [("summary", {"granularity": "hour"}, "-hourly"), ("assets", {}, ""),
                                      ("sources", {}, ""), ("adchoices", {}, "")]:
            expected = site.api.report(report, format="csv", **params, **extra)
            assert expected.status_code == 200 and expected.text.count("\n") > 1, f"{report}: the API has rows to compare"
            with page.expect_download() as download:
                page.click(f"[data-csv={report}]")
            path = download.value.path()
            with open(path, encoding="utf-8") as f:
                assert f.read() == expected.text, f"{report}: the file is not the API's CSV"
            assert download.value.suggested_filename == \
                f"tracker-{report}-{first.isoformat()}-{last.isoformat()}-America_New_York{suffix}.csv"
        assert "hour" in site.api.report("summary", format="csv", granularity="hour", **params).text.splitlines()[0]


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_funnel_failures_and_waterfall_are_the_apis_at_desktop_and_phone_width(browser, site, viewport):
    first, last = site.f1, site.f2
    params = {"from": first.isoformat(), "to": last.isoformat(), "tz": "UTC"}
    reports = Reports(site.api, **params)
    # The known funnel events as the API counts them, so that the page cannot pass on zeros or nulls.
    f1, f2 = first.isoformat(), last.isoformat()
    funnel = {(r["day"], r["adUnit"]): r for r in reports.rows["funnel"]}
    assert set(funnel) == {(f1, FEED), (f2, FEED), (f2, SEARCH)}
    assert [funnel[(f1, FEED)][f] for f in FUNNEL_COUNTS] == [5, 7, 2, 2, 1, 3, 2]
    assert [funnel[(f2, SEARCH)][f] for f in FUNNEL_COUNTS] == [2, 3, 1, 1, 0, 2, 1]
    assert (funnel[(f1, FEED)]["loadLatencyP50Ms"], funnel[(f1, FEED)]["loadLatencyP95Ms"]) == (500, 3000)
    assert (funnel[(f2, SEARCH)]["loadLatencyP50Ms"], funnel[(f2, SEARCH)]["loadLatencyP95Ms"]) == (None, None)
    waterfall = {(r["day"], r["adUnit"], r["adapter"], r["position"]): r for r in reports.rows["waterfall"]}
    acme = waterfall[(f1, FEED, "AcmeAdapter", 1)]
    assert [acme[f] for f in ("attempts", "loaded", "failed", "timeouts", "latencyP50Ms", "latencyP95Ms")] == [2, 0, 1, 1, 150, 5000]
    assert waterfall[(f2, SEARCH, "AcmeAdapter", 1)]["latencyP50Ms"] is None
    assert reports.grouped("failures", ["errorCode", "adUnit"], ["failedRequests"]) == {
        ("mediation_no_fill", FEED): {"failedRequests": 1}, ("no_fill", FEED): {"failedRequests": 2},
        ("invalid_request", SEARCH): {"failedRequests": 1}}
    assert reports.total("failures", "failedRequests") == reports.total("funnel", "failedRequests")

    phone = viewport == PHONE
    options = {"is_mobile": True, "has_touch": True, "device_scale_factor": 2} if phone else {}
    with dashboard(browser, site, viewport=viewport, **options) as page:
        apply(page, first, last)
        assert_page_shows(page, reports)
        # What a user reads, in the page's words: rates from the counts, a latency's bucket in ms,
        # "–" for a row without latencies and in every totals row.
        rows = {(r["cells"]["day"], r["cells"]["adUnit"]): r["cells"] for r in table(page, "funnel-table")}
        assert list(rows) == [(f1, FEED), (f2, FEED), (f2, SEARCH)]
        assert [rows[(f1, FEED)][f] for f in ("fillRate", "showRate", "clicks", "loadLatencyP50Ms", "loadLatencyP95Ms")] == \
            ["40.0 %", "66.7 %", "1", "500 ms", "3,000 ms"]
        assert (rows[(f2, SEARCH)]["loadLatencyP50Ms"], rows[(f2, SEARCH)]["loadLatencyP95Ms"]) == ("–", "–")
        totals = totals_row(page, "funnel-table")
        assert [totals[f] for f in ("requests", "filledRequests", "fillRate", "loadedAds", "shownAds", "showRate", "clicks")] == \
            ["9", "4", "44.4 %", "6", "4", "66.7 %", "2"]
        # SEARCH's click of f1, a day without its funnel events, is in the Clicks tile and not in the funnel.
        assert page.inner_text("#total-clicks") == "3"
        steps = [r["cells"] for r in table(page, "waterfall-table")]
        assert [(c["day"], c["adUnit"], c["position"], c["adapter"], c["fillRate"], c["latencyP50Ms"], c["latencyP95Ms"]) for c in steps] == [
            (f1, FEED, "1", "AcmeAdapter", "0.0 %", "150 ms", "5,000 ms"), (f1, FEED, "2", "BetaAdapter", "50.0 %", "400 ms", "750 ms"),
            (f2, FEED, "1", "AcmeAdapter", "100.0 %", "300 ms", "300 ms"), (f2, SEARCH, "1", "AcmeAdapter", "100.0 %", "–", "–")]
        codes = [(r["cells"]["errorCode"], r["cells"]["share"]) for r in table(page, "failures-table")]
        assert codes == [("no_fill", "50.0 %"), ("invalid_request", "25.0 %"), ("mediation_no_fill", "25.0 %")]

        if phone:
            sizes = page.evaluate("({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth})")
            assert sizes["scroll"] <= sizes["client"], f"the page scrolls sideways at 390 px ({sizes})"
            for table_id in ("funnel-table", "failures-table", "waterfall-table"):
                assert_columns_in_view(page, table_id)
        else:
            # At 1280 px each table is whole in its box.
            for table_id in ("funnel-table", "failures-table", "waterfall-table"):
                box = page.eval_on_selector(f"#{table_id}", "t => ({scroll: t.parentElement.scrollWidth, client: t.parentElement.clientWidth})")
                assert box["scroll"] <= box["client"], f"{table_id} is wider than its box at 1280 px ({box})"
        assert_labels_inside(page, "funnel-chart")
        RESULTS.mkdir(exist_ok=True)
        top = page.eval_on_selector("#funnel-panel", "e => e.getBoundingClientRect().top + window.scrollY")
        bottom = page.eval_on_selector("#waterfall-table", "e => e.closest('section').getBoundingClientRect().bottom + window.scrollY")
        page.screenshot(path=str(RESULTS / f"dashboard-funnel{'-phone' if phone else ''}.png"), full_page=True,
                        clip={"x": 0, "y": top - 8, "width": viewport["width"], "height": bottom - top + 16})

        # Test traffic only when asked for: the test load is one more request and failure.
        with_test = Reports(site.api, includeTest="true", **params)
        assert with_test.total("funnel", "requests") == reports.total("funnel", "requests") + 1
        apply(page, first, last, include_test=True)
        assert_page_shows(page, with_test)

        # An ad unit of the funnel table filters the page by it, the waterfall and the failures too.
        click_and_wait(page, f"#funnel-table button[data-filter=adUnit][data-value='{SEARCH}']")
        assert page.input_value("#ad-unit") == SEARCH
        search = Reports(site.api, adUnit=SEARCH, includeTest="true", **params)
        assert search.total("funnel", "requests") == 2
        assert_page_shows(page, search)

        if not phone:
            # Each "Download CSV" is the API's CSV for the filters shown, a null percentile an empty cell.
            for report in ("funnel", "failures", "waterfall"):
                expected = site.api.report(report, format="csv", adUnit=SEARCH, includeTest="true", **params)
                assert expected.status_code == 200 and expected.text.count("\n") > 1, report
                with page.expect_download() as download:
                    page.click(f"[data-csv={report}]")
                with open(download.value.path(), encoding="utf-8") as f:
                    assert f.read() == expected.text, f"{report}: the file is not the API's CSV"
                assert download.value.suggested_filename == f"tracker-{report}-{f1}-{f2}-UTC.csv"


def without_trailing_zeros(time):
    """An RFC 3339 time with its fraction of a second cut after the last digit that is not 0."""
    m = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", time)
    return m[1] + (m[2] or "").rstrip("0").rstrip(".") + m[3]


def test_an_ad_is_looked_up_by_its_request_id(browser, site):
    trail = site.api.get("/v1/ads/h1")
    assert trail.status_code == 200, trail.text
    ad = trail.json()
    number = {e["id"]: i + 1 for i, e in enumerate(ad["events"])}
    assert len(ad["events"]) == 6

    with dashboard(browser, site) as page:
        page.fill("#ad-lookup", "h1")
        page.click("#ad-form button[type=submit]")
        page.wait_for_selector("#ad-view[data-state=ready]")
        assert not page.is_visible("#dashboard") and fragment(page)["ad"] == "h1"
        assert page.inner_text("#ad-request-id") == "h1"
        rows = table(page, "ad-events")
        assert [r["data"]["id"] for r in rows] == [e["id"] for e in ad["events"]]
        assert [r["data"]["kind"] for r in rows] == [e["outcome"]["kind"] for e in ad["events"]]
        assert [r["cells"]["type"] for r in rows] == [e["type"] for e in ad["events"]]
        for row, e in zip(rows, ad["events"]):
            outcome = e["outcome"]
            if "duplicateOf" in outcome:
                assert row["cells"]["outcome"].endswith(f"of event {number[outcome['duplicateOf']]}")
            if "attributedTo" in outcome:
                assert row["cells"]["outcome"] == f"counted click, attributed to event {number[outcome['attributedTo']]}"
            # Times are the corrected time in the chosen zone (UTC here), in ISO notation, to the
            # digit of a second that is not zero.
            assert row["cells"]["time"] == without_trailing_zeros(e["correctedAt"])
        kinds = [r["data"]["kind"] for r in rows]
        assert kinds.count("duplicate_click") == 1 and kinds.count("counted_click") == 2
        assert page.inner_text("[data-fact=countedImpression]") == f"event {number[ad['countedImpression']]}"

        # The view survives a reload, and "Back" returns to the reports as they were.
        page.reload()
        page.wait_for_selector("#ad-view[data-state=ready]")
        assert len(table(page, "ad-events")) == 6
        page.click("#ad-back")
        wait_ready(page)
        assert page.is_visible("#dashboard") and not page.is_visible("#ad-view") and "ad" not in fragment(page)

        # In another zone the times are that zone's local times.
        page.fill("#tz", NEW_YORK)
        page.click("#filters button[type=submit]")
        wait_ready(page)
        page.fill("#ad-lookup", "w2")
        page.click("#ad-form button[type=submit]")
        page.wait_for_selector("#ad-view[data-state=ready]")
        assert [r["cells"]["time"] for r in table(page, "ad-events")] == ["2025-11-02T01:15:00-04:00", "2025-11-02T01:16:00-04:00"]

        # An id nobody sent.
        page.fill("#ad-lookup", "no-such-ad-4711")
        page.click("#ad-form button[type=submit]")
        page.wait_for_selector("#ad-view[data-state=missing]")
        assert page.inner_text("#ad-status").startswith("No such ad")
        assert not page.is_visible("#ad-events")
        assert len(page.problems) == 1 and "404" in page.problems[0], page.problems  # Chromium logs the 404
        page.problems.clear()
        page.go_back()
        page.wait_for_selector("#ad-view[data-state=ready]")
        assert page.inner_text("#ad-request-id") == "w2"


def test_dates_are_iso_and_a_ctr_above_100_percent_is_explained(browser, site):
    first, last = datetime.date(2025, 10, 31), datetime.date(2025, 11, 1)
    reports = Reports(site.api, tz=NEW_YORK, **{"from": first.isoformat(), "to": last.isoformat()})
    above = [r for r in reports.hours if r["impressions"] and r["attributedClicks"] > r["impressions"]]
    assert [r["hour"] for r in above] == ["2025-10-31T23:00:00-04:00"]

    with dashboard(browser, site, timezone_id=NEW_YORK, locale="en-US") as page:
        # An en-US browser would show a native date field as MM/DD/YYYY: these are text fields in ISO.
        assert page.get_attribute("#from", "type") == "text" and page.get_attribute("#to", "type") == "text"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", page.input_value("#from"))
        apply(page, first, last)
        assert_page_shows(page, reports)
        hour = {r["cells"]["hour"]: r["cells"] for r in table(page, "time-table")}["2025-10-31T23:00:00-04:00"]
        assert hour["ctr"] == "200.0 %"
        note = page.inner_text("#ctr-note")
        assert page.is_visible("#ctr-note") and "exceed 100 %" in note and "asset" in note
        text = page.inner_text("body")
        assert not re.search(r"\b\d{1,2}/\d{1,2}/\d{2,4}\b", text), "a date in the browser's US format"
        assert f"From {first.isoformat()} to {last.isoformat()}" in page.inner_text("#status")

        # A date in another notation is refused next to the field, and nothing is asked.
        asked = []
        page.on("request", lambda request: asked.append(request.url) if "/v1/reports/" in request.url else None)
        page.fill("#from", "10/31/2025")
        page.click("#filters button[type=submit]")
        assert page.eval_on_selector("#from", "e => !e.validity.valid && e.validationMessage.includes('YYYY-MM-DD')")
        page.fill("#from", "2025-02-30")
        page.click("#filters button[type=submit]")
        assert page.eval_on_selector("#from", "e => !e.validity.valid")
        assert asked == [] and page.get_attribute("body", "data-state") == "ready"


def test_dashboard_without_chart_js_says_so_and_still_shows_the_numbers(browser, site, start_tracker):
    db = site.db
    tracker = start_tracker(db.url, "dashboard-no-chart", {"TRACKER_CHARTJS_PATH": "/nonexistent/chart.min.js"})
    from_day = site.today - datetime.timedelta(days=5)
    everything = Reports(API(tracker.base, db.report_key), tz="UTC", **{"from": from_day.isoformat(), "to": site.today.isoformat()})
    assert everything.total("summary", "impressions") > 0

    context = browser.new_context(timezone_id="UTC")
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(tracker.base + "/")
    notice = page.inner_text("#chart-notice")
    assert "/nonexistent/chart.min.js" in notice and "libjs-chart.js" in notice
    enter_key(page, db.report_key)
    apply(page, from_day, site.today)
    assert page.evaluate("typeof window.Chart") == "undefined"
    assert_page_shows(page, everything)
    assert not problems, problems
    context.close()
    requests.get(tracker.base + "/healthz", timeout=5).raise_for_status()


def test_the_deployments_default_zone_is_where_the_page_starts_unless_its_url_names_one(browser, site, start_tracker):
    """TRACKER_DEFAULT_TZ (read from /dashboard/settings.json) wins over the browser's zone; a URL's zone wins over both."""
    db, zone = site.db, "Asia/Kolkata"
    tracker = start_tracker(db.url, "dashboard-default-zone", {"TRACKER_DEFAULT_TZ": zone})
    assert requests.get(tracker.base + "/dashboard/settings.json", timeout=5).json() == {"defaultTimeZone": zone}
    context = browser.new_context(viewport=DESKTOP, timezone_id=NEW_YORK)
    page = context.new_page()
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    asked = []
    page.on("request", lambda request: asked.append(request.url) if "/v1/reports/" in request.url else None)
    page.goto(tracker.base + "/")
    enter_key(page, db.report_key)
    today = datetime.datetime.now(ZoneInfo(zone)).date()
    assert page.input_value("#tz") == zone and fragment(page)["tz"] == zone, "the deployment's zone, not the browser's New York"
    assert fragment(page)["to"] == today.isoformat() and f"local days in {zone}" in page.inner_text("#status")
    assert asked and {urllib.parse.parse_qs(urllib.parse.urlsplit(u).query)["tz"][0] for u in asked} == {zone}
    first, last = site.d1, site.d3
    page.goto(tracker.base + f"/#from={first}&to={last}&tz=UTC")
    page.wait_for_function("() => new URLSearchParams(location.hash.slice(1)).get('tz') === 'UTC' && document.body.dataset.state === 'ready'")
    assert page.input_value("#tz") == "UTC" and "local days in UTC" in page.inner_text("#status")
    assert not problems, problems
    context.close()


def ratio_change(was, now):
    """The comparison's change of a ratio, as the page writes it (percentage points)."""
    delta = js_round((now - was) * 1000) / 10
    return ("+" if delta > 0 else "-" if delta < 0 else "±") + f"{abs(delta):.1f} pp"


def ratio_comparison(was, now):
    """A ratio's comparison line: the previous value, and the change when both periods have one."""
    if was is None or now is None:
        return f"previous {'–' if was is None else percent(was)}"
    return f"previous {percent(was)}, {ratio_change(was, now)}"


def assert_one_kind_of_dash(page):
    """No line of the tiles has both the dash of "no value" (–) and a minus sign (-)."""
    for text in page.eval_on_selector_all("#dashboard .tile .change, #dashboard .tile .detail", "es => es.map(e => e.textContent)"):
        assert not ("–" in text and "-" in text), f"two kinds of dash in {text!r}"


def test_givt_is_shown_beside_the_net_numbers_by_label_with_its_rule_set(browser, site, tmp_path):
    a, b = site.givt_a, site.givt_b
    params = {"from": a.isoformat(), "to": b.isoformat(), "tz": NEW_YORK}
    reports = Reports(site.api, **params)
    # The traffic was labelled as it was sent (else the comparisons below prove little).
    assert reports.ivt_rules == 1
    assert [reports.total("summary", f) for f in ("impressions", "givtImpressions", "clicks", "givtClicks")] == [40, 26, 9, 5]
    assert reports.grouped("ivt", ["label"], ["impressions", "clicks", "events"]) == {
        ("declared_bot",): {"impressions": 4, "clicks": 1, "events": 5},
        ("datacenter",): {"impressions": 2, "clicks": 1, "events": 3},
        ("high_rate",): {"impressions": 20, "clicks": 1, "events": 41},
        ("excessive_clicks",): {"impressions": 0, "clicks": 2, "events": 2},
    }
    header = site.api.report("summary", **params)
    assert header.headers["X-IVT-Rules"] == "1"

    with dashboard(browser, site, timezone_id=NEW_YORK) as page:
        apply(page, a, b)
        assert_page_shows(page, reports)
        # The net tiles are the net numbers; GIVT is beside them, as shares of the whole.
        assert page.inner_text("#total-impressions") == "40" and page.inner_text("#total-clicks") == "9"
        assert page.inner_text("#givt-impressions-share") == "39.4 %"  # 26 / (40 + 26)
        assert page.inner_text("#givt-clicks-share") == "35.7 %"  # 5 / (9 + 5)
        assert [r["cells"]["label"] for r in table(page, "ivt-table")] == list(LABELS)
        assert page.inner_text("#ivt-rules") == "1" and page.inner_text("#ivt-rules-detail") == "the newest"
        assert not page.is_visible("#ivt-waiting")

        # One ad unit: the shares and labels follow the filter.
        weather = Reports(site.api, adUnit=WEATHER, **params)
        apply(page, a, b, ad_unit=WEATHER)
        assert_page_shows(page, weather)
        assert [r["cells"]["label"] for r in table(page, "ivt-table")] == ["declared_bot", "high_rate"]

        # Compared with the previous period (day a before day b), a rise of GIVT is worse.
        current = Reports(site.api, tz=NEW_YORK, **{"from": b.isoformat(), "to": b.isoformat()})
        previous = Reports(site.api, tz=NEW_YORK, **{"from": a.isoformat(), "to": a.isoformat()})
        apply(page, b, b, compare=True)
        assert_page_shows(page, current)
        for tile, what in (("givt-impressions-share", "Impressions"), ("givt-clicks-share", "Clicks")):
            def share(r):
                labelled, counted = r.total("summary", "givt" + what), r.total("summary", what.lower())
                return labelled / (labelled + counted) if labelled + counted else None
            was, now = share(previous), share(current)
            assert page.inner_text(f"#change-{tile}") == f"previous {percent(was)}, {ratio_change(was, now)}"
            assert page.get_attribute(f"#change-{tile}", "class") == ("change worse" if now > was else "change better")

        # The ivt report's CSV, as the API gives it for the filters shown.
        expected = site.api.report("ivt", format="csv", includeTest="false", **{"from": b.isoformat(), "to": b.isoformat(), "tz": NEW_YORK})
        assert expected.status_code == 200 and "high_rate" in expected.text
        with page.expect_download() as download:
            page.click("[data-csv=ivt]")
        with open(download.value.path(), encoding="utf-8") as f:
            assert f.read() == expected.text
        assert download.value.suggested_filename == f"tracker-ivt-{b.isoformat()}-{b.isoformat()}-America_New_York.csv"

        # The crawler's ad in the audit trail: its events are invalid traffic, with the label.
        trail = site.api.get("/v1/ads/b1").json()
        assert [e["label"] for e in trail["events"]] == ["declared_bot", "declared_bot"]
        page.fill("#ad-lookup", "b1")
        page.click("#ad-form button[type=submit]")
        page.wait_for_selector("#ad-view[data-state=ready]")
        rows = table(page, "ad-events")
        assert [r["data"]["label"] for r in rows] == [e["label"] for e in trail["events"]]
        assert [r["data"]["kind"] for r in rows] == ["invalid_traffic", "invalid_traffic"]
        # The outcome names the rule behind the label, as the trail's labelledBy does.
        assert all(e["labelledBy"]["pattern"] for e in trail["events"])
        assert [r["cells"]["outcome"] for r in rows] == [
            "invalid traffic (declared bot), left out of every measure by pattern " + e["labelledBy"]["pattern"]
            + (f" ({e['labelledBy']['name']})" if e["labelledBy"].get("name") else "")
            for e in trail["events"]]
        page.click("#ad-back")
        wait_ready(page)

        # The desktop picture of docs/OPERATIONS.md: two weeks with every kind of traffic.
        apply(page, site.today - datetime.timedelta(days=13), site.today, tz="UTC", compare=False)
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / "dashboard.png"), full_page=True)

        # A newer rule set activated while the projections hold events waits for a rebuild:
        # the numbers keep rule set 1, and the page says that 2 waits.
        out = activate(site.binary, site.db, {"name": "second", "userAgents": [{"pattern": "BurstClient"}]}, tmp_path)
        assert "activated rule set 2" in out, out
        ready = requests.get(site.base + "/readyz", timeout=5).json()
        assert ready["ivtRules"] == {"projections": 1, "newest": 2}
        apply(page, a, b, tz=NEW_YORK)
        assert_page_shows(page, reports)
        assert page.inner_text("#ivt-rules") == "1"
        assert page.inner_text("#ivt-rules-detail") == "rule set 2 waits for tracker rebuild"
        waiting = page.inner_text("#ivt-waiting")
        assert page.is_visible("#ivt-waiting") and "rule set 2" in waiting and "rule set 1" in waiting and "tracker rebuild" in waiting


# Every figure of the reports view, to tell a blank page from one with numbers: the tiles'
# numbers, details and changes, every cell of every table's body and totals row, whether a
# chart exists and whether its canvas has a drawn pixel, the heading that names the zone, the
# lag and whether the CSV buttons can fetch anything.
FIGURES = """() => {
  const texts = (selector) => [...document.querySelectorAll(selector)].map(e => e.textContent);
  return {
    outputs: texts('#dashboard output'),
    notes: texts('#dashboard .tile .detail, #dashboard .tile .change'),
    cells: texts('#dashboard tbody td, #dashboard tfoot td'),
    charts: [...document.querySelectorAll('#dashboard canvas')].map(c => {
      const pixels = c.getContext('2d').getImageData(0, 0, Math.max(c.width, 1), Math.max(c.height, 1)).data;
      return {id: c.id, chart: Boolean(window.Chart && Chart.getChart(c)), drawn: pixels.some(v => v !== 0)};
    }),
    heading: document.getElementById('time-heading').textContent,
    lag: document.getElementById('lag').hidden ? '' : document.getElementById('lag').textContent,
    csv: [...document.querySelectorAll('[data-csv]')].map(b => !b.disabled),
  };
}"""


def assert_blank(page, previous_zone):
    """Nothing of the previous answer is left: every number "–", no row, no chart, no zone."""
    figures = page.evaluate(FIGURES)
    assert set(figures["outputs"]) == {"–"}, figures["outputs"]
    assert set(figures["notes"]) <= {""}, figures["notes"]
    assert figures["cells"] == [], figures["cells"]
    assert not any(c["chart"] or c["drawn"] for c in figures["charts"]), figures["charts"]
    assert figures["heading"] == "Impressions, clicks and CTR over time"
    assert figures["lag"] == "" and not any(figures["csv"]), figures
    # The status line is the message (whose examples may name any zone); below it, nothing names the old one.
    below = page.evaluate("[...document.querySelectorAll('#dashboard > :not(#filters):not(#status)')].map(e => e.innerText).join(' ')")
    assert previous_zone not in below and "Impressions" in below


def assert_not_blank(page, zone):
    """The counterpart of assert_blank, so that it cannot pass on a page that showed nothing."""
    figures = page.evaluate(FIGURES)
    assert all(re.search(r"\d", o) for o in figures["outputs"]), figures["outputs"]
    assert any(re.search(r"\d", n) for n in figures["notes"]) and len(figures["cells"]) > 20, figures
    assert all(c["chart"] and c["drawn"] for c in figures["charts"]), figures["charts"]
    assert f"({zone})" in figures["heading"] and figures["lag"] and all(figures["csv"]), figures


def fail_with_unknown_zone(page, zone="Europe/Atlantis"):
    page.fill("#tz", zone)
    page.click("#filters button[type=submit]")
    page.wait_for_selector(STATE, state="attached")
    assert page.get_attribute("body", "data-state") == "error"
    return page.inner_text("#status")


def settle_failures(page, status):
    """Chromium logs each failed request as a console error: those are expected."""
    page.wait_for_load_state("networkidle")
    assert all(f"status of {status}" in p for p in page.problems), page.problems
    page.problems.clear()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_failed_request_blanks_every_number_it_would_have_replaced(browser, site, viewport):
    first, last = FALL_BACK - datetime.timedelta(days=2), FALL_BACK + datetime.timedelta(days=1)
    with dashboard(browser, site, viewport=viewport, timezone_id=NEW_YORK) as page:
        apply(page, first, last, compare=True)
        assert_page_shows(page, Reports(site.api, tz=NEW_YORK, **{"from": first.isoformat(), "to": last.isoformat()}))
        assert_not_blank(page, NEW_YORK)

        # A zone the server does not know: every number, chart and zone of New York goes, the
        # form and the URL keep what was asked, and one sentence says what to fix.
        message = fail_with_unknown_zone(page)
        settle_failures(page, 400)
        assert_blank(page, NEW_YORK)
        assert fragment(page)["tz"] == "Europe/Atlantis" and page.input_value("#tz") == "Europe/Atlantis"
        assert re.fullmatch(r"The server cannot answer for these filters: the time zone [^.]*'Europe/Atlantis'[^.]*\.", message), message
        assert "invalid_parameter" not in page.inner_text("body")
        # For docs/OPERATIONS.md: what the screen shows of the refused zone.
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / f"dashboard-unknown-zone-{'phone' if viewport == PHONE else 'desktop'}.png"))

        # The same sentence whichever report's refusal arrives first: the summary's, then the ivt report's.
        for first_answer in ("summary", "ivt"):
            held = []
            page.route("**/v1/reports/**", lambda route: held.append(route))
            page.fill("#tz", "Europe/Atlantis")
            page.click("#filters button[type=submit]")
            page.wait_for_function("() => document.body.dataset.state === 'loading'")
            while len(held) < 10:  # eight reports and the previous period's two
                page.wait_for_timeout(20)
            held.sort(key=lambda route: urllib.parse.urlsplit(route.request.url).path.rsplit("/", 1)[1] != first_answer)
            for i, route in enumerate(held):
                route.fulfill(response=route.fetch())
                if i == 0:
                    page.wait_for_timeout(300)
            page.unroute("**/v1/reports/**")
            page.wait_for_selector(STATE, state="attached")
            assert page.inner_text("#status") == message, first_answer
            assert_blank(page, NEW_YORK)
            settle_failures(page, 400)

        # Back to New York: the numbers are the API's again.
        apply(page, first, last, tz=NEW_YORK)
        assert_not_blank(page, NEW_YORK)

        # One report of eight fails (the server could not read it): nothing is shown, not the seven others.
        assets = re.compile(r"/v1/reports/assets\?")
        page.route(assets, lambda route: route.fulfill(
            status=503, content_type="application/json",
            body=json.dumps({"error": "database_unavailable", "message": "the database is unavailable; retry later"})))
        page.click("#filters button[type=submit]")
        page.wait_for_selector(STATE, state="attached")
        page.unroute(assets)
        assert page.get_attribute("body", "data-state") == "error"
        assert page.inner_text("#status") == \
            "The server could not answer just now (the database is unavailable; retry later): try again in a moment."
        assert "database_unavailable" not in page.inner_text("body")
        assert_blank(page, NEW_YORK)
        settle_failures(page, 503)
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / f"dashboard-error-{'phone' if viewport == PHONE else 'desktop'}.png"), full_page=True)

        page.click("#filters button[type=submit]")
        wait_ready(page)
        assert_page_shows(page, Reports(site.api, tz=NEW_YORK, **{"from": first.isoformat(), "to": last.isoformat()}))


@pytest.mark.parametrize("browser_zone, current", [("Asia/Kolkata", "Asia/Kolkata"), ("Asia/Calcutta", "Asia/Kolkata"),
                                                    ("Europe/Kiev", "Europe/Kyiv"), ("Asia/Saigon", "Asia/Ho_Chi_Minh")])
def test_a_zone_is_shown_asked_and_named_by_its_current_name(browser, site, browser_zone, current):
    first, last = site.d1, site.d3
    with dashboard(browser, site, timezone_id=browser_zone, key=False) as page:
        # Chromium names these zones by CLDR's old identifiers (else this test proves nothing).
        old = page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone")
        assert old != current, old
        asked = []
        page.on("request", lambda request: asked.append(request.url) if "/v1/reports/" in request.url else None)
        enter_key(page, site.db.report_key)
        assert page.input_value("#tz") == current and fragment(page)["tz"] == current
        zones = page.eval_on_selector_all("#tz-names option", "options => options.map(o => o.value)")
        assert current in zones and old not in zones
        apply(page, first, last)
        assert asked and {urllib.parse.parse_qs(urllib.parse.urlsplit(u).query)["tz"][0] for u in asked} == {current}
        assert_page_shows(page, Reports(site.api, tz=current, **{"from": first.isoformat(), "to": last.isoformat()}))
        assert page.inner_text("#time-heading").endswith(f"({current})")
        assert f"local days in {current}" in page.inner_text("#status")
        with page.expect_download() as download:
            page.click("[data-csv=assets]")
        assert download.value.suggested_filename == f"tracker-assets-{first}-{last}-{current.replace('/', '_')}.csv"

        # The old name typed in the form, or in a link, is shown by the current one too.
        apply(page, first, last, tz=old)
        assert page.input_value("#tz") == current and fragment(page)["tz"] == current
        page.goto(site.base + f"/#from={first}&to={last}&tz={old}")
        page.wait_for_function(f"() => new URLSearchParams(location.hash.slice(1)).get('tz') === '{current}' && document.body.dataset.state === 'ready'")
        assert page.input_value("#tz") == current

        # An ad's trail names the zone of its times by the current name too.
        page.fill("#ad-lookup", "h1")
        page.click("#ad-form button[type=submit]")
        page.wait_for_selector("#ad-view[data-state=ready]")
        assert page.inner_text("#ad-zone") == current


# The columns of a table out of view on a phone, where each row is a card: every cell of the
# first row and of the totals row must lie within the screen, whole (nothing cut off), and
# every cell but the card's title must show its column's heading above its value.
COLUMNS_OUT_OF_VIEW = """(table) => {
  const screen = document.documentElement.clientWidth;
  const out = [];
  const box = table.closest('.scroll');
  if (box.scrollWidth > box.clientWidth) out.push('the table scrolls sideways: ' + box.scrollWidth + ' > ' + box.clientWidth);
  const headings = Object.fromEntries([...table.tHead.querySelectorAll('th[data-col]')].map(th => [th.dataset.col, th.textContent]));
  for (const row of [table.tBodies[0].rows[0], table.tFoot && table.tFoot.rows[0]].filter(Boolean)) {
    // The totals row has nothing in a text column but the first: a phone leaves such cells out.
    for (const cell of [...row.cells].filter(c => c === row.cells[0] || c.textContent !== '' || row.parentElement.tagName !== 'TFOOT')) {
      const name = cell.dataset.col + (row.parentElement.tagName === 'TFOOT' ? ' (totals)' : '');
      const r = cell.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || r.left < -0.5 || r.right > screen + 0.5) out.push(name + ': at ' + r.left + '..' + r.right);
      if (cell.scrollWidth > cell.clientWidth + 1) out.push(name + ': cut, ' + cell.scrollWidth + ' > ' + cell.clientWidth);
      if (cell === row.cells[0]) continue;
      const label = getComputedStyle(cell, '::before').content;
      if (label !== JSON.stringify(cell.dataset.label)) out.push(name + ': its heading shows as ' + label);
      if (cell.dataset.col in headings && headings[cell.dataset.col] !== cell.dataset.label) out.push(name + ': labelled ' + cell.dataset.label);
    }
  }
  return out;
}"""


def assert_columns_in_view(page, table_id):
    assert page.is_visible(f"#{table_id}"), table_id
    hidden = page.eval_on_selector(f"#{table_id}", COLUMNS_OUT_OF_VIEW)
    assert hidden == [], f"{table_id}: columns out of view at {page.viewport_size['width']} px: {hidden}"


# The boxes of a chart's tick labels as drawn (Chart.js's own label items) that are turned or
# reach outside the canvas, and the labels of an axis that overlap.
LABELS_OUTSIDE = """(id) => {
  const chart = Chart.getChart(document.getElementById(id));
  const out = [];
  for (const scale of Object.values(chart.scales)) {
    const boxes = [];
    for (const item of scale._labelItems || scale._computeLabelItems(chart.chartArea)) {
      const lines = Array.isArray(item.label) ? item.label : [item.label];
      chart.ctx.save();
      chart.ctx.font = item.font.string;
      const width = Math.max(...lines.map(l => chart.ctx.measureText(String(l)).width));
      chart.ctx.restore();
      const [x, y] = item.translation;
      const left = item.textAlign === 'center' ? x - width / 2 : item.textAlign === 'right' ? x - width : x;
      const top = y + item.textOffset - item.font.lineHeight / 2;
      const bottom = top + lines.length * item.font.lineHeight;
      const name = scale.id + ' ' + lines.join(' ');
      if (item.rotation) out.push(name + ': turned');
      if (left < -0.5 || left + width > chart.width + 0.5 || top < -0.5 || bottom > chart.height + 0.5) {
        out.push(name + ': ' + [left, left + width, top, bottom].map(Math.round) + ' outside ' + chart.width + 'x' + chart.height);
      }
      boxes.push([left, left + width, top, bottom, name]);
    }
    const along = scale.isHorizontal() ? 0 : 2;
    boxes.sort((a, b) => a[along] - b[along]);
    for (let i = 1; i < boxes.length; i++) {
      if (boxes[i][along] < boxes[i - 1][along + 1] - 0.5) out.push(boxes[i - 1][4] + ' overlaps ' + boxes[i][4]);
    }
  }
  return out;
}"""


def assert_labels_inside(page, canvas):
    outside = page.evaluate(LABELS_OUTSIDE, canvas)
    assert outside == [], f"{canvas}: labels turned, cut or overlapping at {page.viewport_size['width']} px: {outside}"


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_long_ranges_by_hour_draw_bars_not_slivers_and_labels_whole(browser, site, viewport):
    options = {"is_mobile": True, "has_touch": True} if viewport == PHONE else {}
    with dashboard(browser, site, viewport=viewport, timezone_id=NEW_YORK, **options) as page:
        for days_long in (3, 7, 30):
            first, last = FALL_BACK - datetime.timedelta(days=days_long - 2), FALL_BACK + datetime.timedelta(days=1)
            apply(page, first, last)
            drawn = chart(page)
            bars = page.evaluate("[0, 1].flatMap(i => Chart.getChart(document.getElementById('time-chart')).getDatasetMeta(i).data.map(b => b.width))")
            assert len(bars) == 2 * len(drawn["labels"]) and min(bars) >= 4, f"{len(drawn['labels'])} periods: bars {min(bars):.1f} px wide"
            # The chart scrolls in its box rather than the page.
            box = page.eval_on_selector("#time-chart", "c => { const b = c.closest('.chart-box').getBoundingClientRect(); return [b.left, b.right]; }")
            assert box[0] >= 0 and box[1] <= viewport["width"], box
            sizes = page.evaluate("({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth})")
            assert sizes["scroll"] <= sizes["client"], sizes
            for canvas in ("time-chart", "assets-chart"):
                assert_labels_inside(page, canvas)
        RESULTS.mkdir(exist_ok=True)
        page.locator("#time-chart").locator("xpath=ancestor::section[1]").screenshot(
            path=str(RESULTS / f"dashboard-chart-{'phone' if viewport == PHONE else 'desktop'}.png"))


def test_the_audit_trail_fits_a_desktop_and_opens_a_time_by_a_tap(browser, site):
    with dashboard(browser, site) as page:
        for ad in ("h1", "n1", "b1"):
            page.fill("#ad-lookup", ad)
            page.click("#ad-form button[type=submit]")
            page.wait_for_selector("#ad-view[data-state=ready]")
            # At 1280 px the whole table is in its box, "What it became" whole.
            sizes = page.eval_on_selector("#ad-events", "t => ({scroll: t.parentElement.scrollWidth, client: t.parentElement.clientWidth})")
            assert sizes["scroll"] <= sizes["client"], f"{ad}: the audit trail is wider than its box at 1280 px ({sizes})"
            outcomes = page.eval_on_selector_all("#ad-events td[data-col=outcome]", "cs => cs.map(c => c.scrollWidth <= c.clientWidth)")
            assert outcomes and all(outcomes), f"{ad}: a cut outcome"

    trail = site.api.get("/v1/ads/n1").json()
    with dashboard(browser, site, viewport=PHONE, is_mobile=True, has_touch=True) as page:
        page.fill("#ad-lookup", "n1")
        page.click("#ad-form button[type=submit]")
        page.wait_for_selector("#ad-view[data-state=ready]")
        hint = page.inner_text("#ad-details .hint")
        assert "hover" not in hint and "open a time" in hint, hint
        assert not page.is_visible("#ad-events tbody tr >> nth=0 >> dd[data-recorded=received]")
        page.tap("#ad-events tbody tr >> nth=0 >> summary")
        recorded = {name: page.inner_text(f"#ad-events tbody tr >> nth=0 >> dd[data-recorded={name}]") for name in ("corrected", "occurred", "sent", "received")}
        event = trail["events"][0]
        assert recorded == {"corrected": event["correctedAt"], "occurred": event["occurredAt"] or "– (dropped by retention)",
                            "sent": event["sentAt"] or "–", "received": event["receivedAt"] or "–"}
        assert_columns_in_view(page, "ad-events")


def post_import(site, text, tz):
    response = requests.post(site.base + "/v1/reconciliations", params={"tz": tz}, data=text.encode(), timeout=30,
                             headers={"Authorization": f"Bearer {site.db.report_key}", "Content-Type": "text/csv"})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def imports(site):
    """Two Ad Manager exports: the API's headers in UTC (one day), then the UI's in New York
    with a row outside tolerance each day, an extra column, unmatched units (one unknown, one
    that is the code of several paths) and the Total row. The second is the newest."""
    a, b = site.givt_a.isoformat(), site.givt_b.isoformat()
    # The import matches ad unit codes against the units the projections hold: let them hold the traffic.
    Reports.ask(site.api, "summary", **{"from": a, "to": b})
    api_style = f"Dimension.DATE,Dimension.AD_UNIT_NAME,Column.AD_SERVER_IMPRESSIONS,Column.AD_SERVER_CLICKS\n{b},sport_top,10,3\n"
    ui_style = (
        "Date,Ad unit,Ad server impressions,Ad server clicks,Ad server CTR\r\n"
        f"{a},sport_top,20,6,30.00%\r\n"
        f"{a},{WEATHER},11,1,9.09%\r\n"
        f"{a},ghost_unit,5,0,0.00%\r\n"
        f"{b},sport_top,9,3,33.33%\r\n"
        f"{b},{WEATHER},30,0,0.00%\r\n"
        f'{b},native,"1,200",4,0.33%\r\n'
        'Total,,"1,275",14,1.10%\r\n'
    )
    first = post_import(site, api_style, "UTC")
    second = post_import(site, ui_style, NEW_YORK)
    assert (first["rows"], first["matched"], second["rows"], second["matched"]) == (1, 1, 6, 4)
    assert second["unmatched"] == [{"row": 4, "adUnit": "ghost_unit", "reason": "unknown"},
                                   {"row": 7, "adUnit": "native", "reason": "ambiguous"}]
    return first, second


def reconciliation(site, import_id, threshold, **params):
    response = site.api.get("/v1/reports/reconciliation?" + urllib.parse.urlencode(dict(params, threshold=threshold, **{"import": import_id})))
    assert response.status_code == 200, response.text
    return response.json()


def signed_percent(d):
    if d is None:
        return "–"
    return ("+" if d > 0 else "-" if d < 0 else "") + f"{to_fixed_1(abs(d * 100))} %"


REC_READY = "#rec-view:is([data-state=ready], [data-state=empty], [data-state=error], [data-state=missing])"


def wait_reconciliation(page, state="ready"):
    page.wait_for_selector(REC_READY, state="attached")
    assert page.get_attribute("#rec-view", "data-state") == state, page.inner_text("#rec-status")


def assert_reconciliation_shows(page, report):
    """The table is the API's report row for row, rows outside tolerance highlighted with an
    icon and a word, and each has its breakdown with the API's numbers."""
    rows = table(page, "rec-table")
    assert [(r["data"]["day"], r["data"]["adUnit"]) for r in rows] == [(r["day"], r["adUnit"]) for r in report["rows"]]
    for shown, row in zip(rows, report["rows"]):
        cells = shown["cells"]
        assert (cells["day"], cells["adUnit"]) == (row["day"], row["adUnit"])
        for field in ("adManagerImpressions", "impressions", "adManagerClicks", "clicks", "duplicateImpressions",
                      "givtImpressions", "staleImpressions", "givtClicks", "duplicateClicks"):
            assert number(cells[field]) == row[field], f"{row['day']} {row['adUnit']} {field}"
        assert cells["impressionDiscrepancy"] == signed_percent(row["impressionDiscrepancy"])
        assert cells["clickDiscrepancy"] == signed_percent(row["clickDiscrepancy"])
        assert shown["data"]["within"] == str(row["withinTolerance"]).lower()
        assert ("outside" in shown["cls"]) == (not row["withinTolerance"])
        assert cells["withinTolerance"] == ("✓ within" if row["withinTolerance"] else "⚠ outside")

    # The totals row: the counts summed, the discrepancies of the sums (not an average of the rows').
    counts = ("adManagerImpressions", "impressions", "duplicateImpressions", "givtImpressions", "staleImpressions",
              "adManagerClicks", "clicks", "duplicateClicks", "givtClicks")
    assert_totals(page, "rec-table", report["rows"], counts, first="day")
    if report["rows"]:
        shown = totals_row(page, "rec-table")
        sums = {f: sum(r[f] for r in report["rows"]) for f in counts}
        for field, tracker, admanager in (("impressionDiscrepancy", "impressions", "adManagerImpressions"),
                                          ("clickDiscrepancy", "clicks", "adManagerClicks")):
            d = (sums[tracker] - sums[admanager]) / sums[admanager] if sums[admanager] else None
            assert shown[field] == signed_percent(d), field
            assert page.inner_text(f"#rec-totals [data-field={field}]") == shown[field]

    outside = [r for r in report["rows"] if not r["withinTolerance"]]
    articles = page.eval_on_selector_all(
        "#rec-explain article",
        "as => as.map(a => ({day: a.dataset.day, adUnit: a.dataset.adUnit, heading: a.querySelector('h3').textContent, "
        "measures: Object.fromEntries([...a.querySelectorAll('p[data-measure]')].map(p => [p.dataset.measure, "
        "{within: p.dataset.within, text: p.textContent, fields: Object.fromEntries([...p.querySelectorAll('[data-field]')].map(s => [s.dataset.field, s.textContent]))}]))}))")
    assert [(x["day"], x["adUnit"]) for x in articles] == [(r["day"], r["adUnit"]) for r in outside]
    assert page.is_visible("#rec-explain-panel") == bool(outside)
    for article, row in zip(articles, outside):
        assert article["heading"] == f"⚠ {row['day']} · {row['adUnit']}: outside ±{percent(report['threshold'])}"
        for measure, tracker, admanager, d, duplicates, givt, stale in (
                ("impressions", row["impressions"], row["adManagerImpressions"], row["impressionDiscrepancy"],
                 row["duplicateImpressions"], row["givtImpressions"], row["staleImpressions"]),
                ("clicks", row["clicks"], row["adManagerClicks"], row["clickDiscrepancy"], row["duplicateClicks"], row["givtClicks"], None)):
            shown = article["measures"][measure]
            within = (tracker == 0) if d is None else abs(d) <= report["threshold"] + 1e-12
            assert shown["within"] == str(within).lower(), (row, measure)
            fields = {k: v if k in ("discrepancy", "explainedShare") else number(v) for k, v in shown["fields"].items()}
            gap = admanager - tracker
            if admanager == 0 and tracker == 0:
                assert fields == {}
                continue
            expected = {"duplicates": duplicates, "givt": givt, "tracker": tracker}
            if stale is not None:
                expected["stale"] = stale
            if admanager and gap:
                expected.update({"adManager": admanager, "discrepancy": signed_percent(d)})
            if admanager and gap > 0:
                # What the tracker knows of a shortfall: the duplicates and GIVT it left out.
                left = duplicates + givt
                expected.update({"gap": gap, "explained": left})
                if 0 < left < gap:
                    expected.update({"explainedShare": f"{js_round(100 * left / gap)} %", "unexplained": gap - left})
                assert f"the gap is {gap:,} {measure if gap != 1 else measure[:-1]} (" in shown["text"]
            elif admanager and gap < 0:
                expected["surplus"] = -gap
            assert fields == expected, (row, measure)


def test_reconciliation_without_an_import_says_how_to_make_one(browser, binary, start_tracker):
    db = Database(required_env("TRACKER_TEST_DATABASE_URL"), binary)
    try:
        tracker = start_tracker(db.url, "dashboard-no-import")
        empty = Site(tracker, db, binary)
        assert empty.api.get("/v1/reconciliations").json() == {"imports": []}
        asked = []
        with dashboard(browser, empty, viewport=PHONE, timezone_id=NEW_YORK, is_mobile=True, has_touch=True) as page:
            page.on("request", lambda request: asked.append(request.url))
            page.click("#views [data-view=reconciliation]")
            wait_reconciliation(page, "empty")
            assert fragment(page)["view"] == "reconciliation"
            assert page.is_visible("#rec-empty") and not page.is_visible("#rec-details") and not page.is_visible("#rec-form")
            curl = page.inner_text("#rec-curl")
            assert f'curl -X POST "{tracker.base}/v1/reconciliations?tz=America/New_York"' in curl
            assert "Authorization: Bearer $TRACKER_REPORT_KEY" in curl and "Content-Type: text/csv" in curl and "--data-binary @" in curl
            assert db.report_key not in page.inner_text("body")
            assert page.inner_text("#rec-cli") == "tracker reconcile import admanager.csv --tz America/New_York [--unit-map units.csv]"
            assert "Ad server impressions" in page.inner_text("#rec-empty")
            # Nothing to report on, so the report (a 404) is never asked for.
            assert not [u for u in asked if "/v1/reports/reconciliation" in u]
            sizes = page.evaluate("({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth})")
            assert sizes["scroll"] <= sizes["client"], sizes
            RESULTS.mkdir(exist_ok=True)
            page.screenshot(path=str(RESULTS / "dashboard-phone-no-import.png"), full_page=True)
    finally:
        db.drop()


def test_reconciliation_view_shows_the_apis_report_and_explains_rows_outside_tolerance(browser, site, imports):
    first, second = imports
    listed = site.api.get("/v1/reconciliations").json()["imports"]
    assert [i["id"] for i in listed] == [second["id"], first["id"]], "newest first"
    report = reconciliation(site, second["id"], "0.1")
    # The import was made so that rows fall on both sides of 10 %, 5 % and 30 %.
    assert [r["withinTolerance"] for r in report["rows"]] == [False, True, True, False]
    assert report["rows"][0]["impressionDiscrepancy"] == -0.25 and report["rows"][3]["clickDiscrepancy"] is None
    assert report["ivtRules"] >= 1 and report["rows"][3]["givtImpressions"] == 20

    with dashboard(browser, site, timezone_id=NEW_YORK) as page:
        page.click("#views [data-view=reconciliation]")
        wait_reconciliation(page)
        assert page.get_attribute("#views [data-view=reconciliation]", "aria-current") == "page"
        assert not page.is_visible("#dashboard") and page.is_visible("#rec-view")
        # The newest import by default, named in the URL.
        assert {k: fragment(page).get(k) for k in ("view", "import", "threshold")} == \
            {"view": "reconciliation", "import": second["id"], "threshold": "10"}
        options = page.eval_on_selector_all("#rec-import option", "os => os.map(o => ({value: o.value, text: o.textContent, selected: o.selected}))")
        assert [o["value"] for o in options] == [i["id"] for i in listed]
        assert [o["selected"] for o in options] == [True, False]
        assert options[0]["text"] == f"{second['from']} to {second['to']} · America/New_York · 4 of 6 rows matched · " \
            f"{second['importedAt'][:16].replace('T', ' ')} UTC"
        facts = {k: page.inner_text(f"[data-fact={k}]") for k in ("tz", "days", "matched", "imported", "ivtRules", "id")}
        assert facts == {"tz": NEW_YORK, "days": f"{second['from']} to {second['to']}", "matched": "4 of 6",
                         "imported": f"{second['importedAt']} by {second['importedBy']}", "ivtRules": str(report["ivtRules"]),
                         "id": second["id"]}
        unmatched = page.eval_on_selector_all("#rec-unmatched-list li", "ls => ls.map(l => [Number(l.dataset.row), l.dataset.adUnit, l.textContent])")
        assert unmatched == [[4, "ghost_unit", "row 4: ghost_unit (no ad unit path by this name)"],
                             [7, "native", "row 7: native (the name of several ad unit paths)"]]
        assert "--unit-map" in page.inner_text("#rec-unmatched-text")
        assert_reconciliation_shows(page, report)
        totals = {k: page.inner_text(f"#rec-totals [data-field={k}]") for k in ("adManagerImpressions", "impressions", "outside", "rows")}
        assert totals == {"adManagerImpressions": str(sum(r["adManagerImpressions"] for r in report["rows"])),
                          "impressions": str(sum(r["impressions"] for r in report["rows"])), "outside": "2", "rows": "4"}
        # The brief's sentence for the first row: a gap of 5 impressions; duplicates 2, GIVT 3, stale 1.
        first_row = page.inner_text("#rec-explain article >> nth=0 >> p[data-measure=impressions]")
        assert "the gap is 5 impressions" in first_row and "duplicates 2, GIVT 3, stale 1" in first_row and "all of it" in first_row
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / "dashboard-reconciliation.png"), full_page=True)
        # "⚠ outside" leads to the row's breakdown.
        page.click("#rec-table tbody tr >> nth=3 >> button[data-explain]")
        assert page.evaluate("document.activeElement.dataset.day") == report["rows"][3]["day"]

        # The tolerance decides which rows are highlighted, as the API decides it.
        for typed, fraction, outside in (("5", "0.05", 3), ("30", "0.3", 1)):
            page.fill("#rec-threshold", typed)
            page.click("#rec-form button[type=submit]")
            page.wait_for_function(f"() => location.hash.includes('threshold={typed}')")
            wait_reconciliation(page)
            expected = reconciliation(site, second["id"], fraction)
            assert sum(not r["withinTolerance"] for r in expected["rows"]) == outside
            assert_reconciliation_shows(page, expected)
            assert f"outside ±{percent(float(fraction))}" in page.inner_text("#rec-status")

        # A tolerance that is no number is refused at the field, and nothing is asked.
        asked = []
        page.on("request", lambda request: asked.append(request.url))
        page.fill("#rec-threshold", "ten")
        page.click("#rec-form button[type=submit]")
        assert page.eval_on_selector("#rec-threshold", "e => !e.validity.valid && e.validationMessage.includes('%')")
        assert asked == [] and fragment(page)["threshold"] == "30"

        # The chooser shows the other import (the API's headers, in UTC), and the URL names it.
        page.fill("#rec-threshold", "30")
        page.select_option("#rec-import", first["id"])
        page.wait_for_function(f"() => location.hash.includes('import={first['id']}')")
        wait_reconciliation(page)
        assert page.inner_text("[data-fact=tz]") == "UTC" and not page.is_visible("#rec-unmatched")
        assert_reconciliation_shows(page, reconciliation(site, first["id"], "0.3"))

        # Its CSV is the API's for the import and tolerance shown.
        expected_csv = site.api.get(f"/v1/reports/reconciliation?import={first['id']}&threshold=0.3&includeTest=false&format=csv")
        with page.expect_download() as download:
            page.click("#rec-csv")
        with open(download.value.path(), encoding="utf-8") as f:
            assert f.read() == expected_csv.text
        assert download.value.suggested_filename == f"tracker-reconciliation-{first['from']}-{first['to']}-UTC.csv"

        # Reload and Back keep the choice; a day opens that day and ad unit by hour in the import's zone.
        page.reload()
        wait_reconciliation(page)
        assert page.input_value("#rec-import") == first["id"] and page.input_value("#rec-threshold") == "30"
        page.go_back()
        page.wait_for_function(f"() => location.hash.includes('import={second['id']}')")
        wait_reconciliation(page)
        row = report["rows"][3]
        page.click(f"#rec-table tbody tr >> nth=3 >> button[data-open-day='{row['day']}']")
        wait_ready(page)
        assert page.is_visible("#dashboard") and not page.is_visible("#rec-view")
        assert (page.input_value("#from"), page.input_value("#to"), page.input_value("#tz"), page.input_value("#ad-unit")) == \
            (row["day"], row["day"], NEW_YORK, row["adUnit"])
        assert_page_shows(page, Reports(site.api, tz=NEW_YORK, adUnit=row["adUnit"], **{"from": row["day"], "to": row["day"]}))
        page.go_back()
        wait_reconciliation(page)
        assert page.input_value("#rec-import") == second["id"]

        # A link to an import that does not exist says so, and offers the list.
        page.goto(site.base + "/#view=reconciliation&threshold=10&import=" + "0" * 24)
        page.wait_for_selector("#rec-view[data-state=missing]")
        assert "No import has the id" in page.inner_text("#rec-status") and not page.is_visible("#rec-details")
        assert page.eval_on_selector_all("#rec-import option:not([disabled])", "os => os.length") == 2
