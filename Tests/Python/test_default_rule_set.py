"""The default invalid-traffic rule set, made and activated by scripts/ivt/default-rule-set.sh as
`make run` does: on a fresh database, events sent with the default user agent of an app's HTTP
client are counted, declared crawlers and the curl command line are labelled whatever they send
to, and the audit trail names the pattern behind each label.
"""

import datetime
import os
import re
import subprocess
import time
import urllib.parse

import pytest
import requests

from conftest import BEACON_SECRET, REPOSITORY, Database, required_env
from events import API, event
from openapi_contract import Contract

# The defaults of the HTTP clients apps send events with (scripts/ivt/default_rule_set.py), and
# the user agents of the app frameworks built on them.
APP_CLIENTS = {
    "okhttp": "okhttp/4.12.0",
    "okhttp3": "okhttp/3.14.9",
    "react-native": "okhttp/4.9.2",
    "requests": "python-requests/2.31.0",
    "go": "Go-http-client/1.1",
    "go2": "Go-http-client/2.0",
    "urllib": "Python-urllib/3.11",
    "apache": "Apache-HttpClient/4.5.14 (Java/17.0.10)",
    "axios": "axios/1.6.8",
    "dalvik": "Dalvik/2.1.0 (Linux; U; Android 14; Pixel 8 Build/AP1A.240405.002)",
    "cfnetwork": "MyApp/1.0 CFNetwork/1494.0.7 Darwin/23.4.0",
    "alamofire": "MyApp/1.0 (com.example.app; build:1; iOS 17.4.0) Alamofire/5.9.0",
    "dart": "Dart/3.3 (dart:io)",
    "flutter": "Dart/3.2 (dart:io)",
    "ktor": "Ktor client",
    "java": "Java/17.0.10",
    "unity": "UnityPlayer/2022.3 (UnityWebRequest/1.0, libcurl/8.5.0-DEV)",
    "webview": "Mozilla/5.0 (Linux; Android 14; Pixel 8 Build/AP1A; wv) AppleWebKit/537.36 (KHTML, like Gecko) "
               "Version/4.0 Chrome/120.0.0.0 Mobile Safari/537.36",
    # The README's Try and the example `make run` prints send this one: their impression counts.
    "readme": re.search(r"curl -s -A '([^']+)' ", (REPOSITORY / "README.md").read_text())[1],
}
# Declared crawlers, each with the list's pattern that labels it.
CRAWLERS = {
    "googlebot": ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot\\/"),
    "googlebot-phone": ("Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) "
                        "Chrome/120.0.6099.216 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
                        "Googlebot\\/"),
    "adsbot": ("AdsBot-Google (+http://www.google.com/adsbot.html)", "AdsBot-Google([^-]|$)"),
    "bingbot": ("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", "bingbot"),
    "ahrefs": ("Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)", "Ahrefs(Bot|SiteAudit)"),
    "semrush": ("Mozilla/5.0 (compatible; SemrushBot/7~bl; +http://www.semrush.com/bot.html)", "S[eE][mM]rushBot"),
    "yandex": ("Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)", "yandex\\.com\\/bots"),
    "baidu": ("Mozilla/5.0 (compatible; Baiduspider/2.0; +http://www.baidu.com/search/spider.html)", "Baiduspider"),
    "gptbot": ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)", "GPTBot"),
    "facebook": ("facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", "facebookexternalhit"),
}
AD_UNIT = "/1234567/default-rule-set/native"


@pytest.fixture(scope="module")
def fresh(binary):
    db = Database(required_env("TRACKER_TEST_DATABASE_URL"), binary)
    yield db
    db.drop()


def run_script(binary, database_url):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REPORT_DATABASE_URL")}
    env["DATABASE_URL"] = database_url
    result = subprocess.run([str(REPOSITORY / "scripts/ivt/default-rule-set.sh"), binary], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, f"default-rule-set.sh exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def tracker_cli(binary, database_url, *args):
    result = subprocess.run([binary, *args, "--database-url", database_url], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"tracker {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def wait_for(condition, what, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_default_rule_set_counts_app_clients_and_labels_crawlers(binary, fresh, start_tracker):
    activated = run_script(binary, fresh.url)
    assert activated.startswith("activated rule set 1 (crawler-user-agents "), activated
    # A fresh database: the projections take the rule set at once, and the message says so.
    assert "no rebuild needed" in activated and "tracker rebuild" not in activated, activated
    # Run again, it keeps the rule set the database has.
    assert run_script(binary, fresh.url) == ""

    shown = tracker_cli(binary, fresh.url, "ivt", "show")
    for pattern, client in [('"okhttp"', "OkHttp sends okhttp/4.12.0 by default"),
                            ('"python-requests"', "python-requests/"), ('"Go-http-client"', "Go-http-client/1.1"),
                            ('"Python-urllib"', "Python-urllib/")]:
        assert any(line.strip().startswith(pattern) and client in line for line in shown.splitlines()), f"{pattern}:\n{shown}"
    assert not any(line.strip().startswith('"^curl"') for line in shown.splitlines()), f"curl is no app's client:\n{shown}"
    assert "lists read" in shown and "crawler-user-agents.json" in shown, shown

    tracker = start_tracker(fresh.url, "default-rule-set", {"TRACKER_BEACON_SECRET": BEACON_SECRET})
    def taken():
        ready = requests.get(tracker.base + "/readyz", timeout=5).json()
        return ready if ready["ivtRules"]["projections"] == 1 else None
    ready = wait_for(taken, "the projector to take rule set 1")
    assert ready["ivtRules"] == {"projections": 1, "newest": 1}, ready
    assert not any("invalid-traffic" in w for w in ready.get("warnings", [])), ready

    ingest, reporter = API(tracker.base, fresh.ingest_key), API(tracker.base, fresh.report_key)
    agents = {**APP_CLIENTS, **{name: ua for name, (ua, _) in CRAWLERS.items()}, "curl": "curl/8.5.0"}
    for name, agent in agents.items():
        response = ingest.post_events([event("impression", f"app-{name}", AD_UNIT)], extra_headers={"User-Agent": agent})
        assert response.status_code == 200, response.text
    # A beacon fetched by curl (no browser sends curl's user agent) and one by a browser.
    minted = requests.post(tracker.base + "/v1/beacons", json={"beacons": [
        {"event": {"type": "impression", "requestId": "web-curl", "adUnit": AD_UNIT, "formatId": "10063170"}},
        {"event": {"type": "impression", "requestId": "web-browser", "adUnit": AD_UNIT, "formatId": "10063170"}},
    ]}, headers=ingest.headers(), timeout=30)
    assert minted.status_code == 200, minted.text
    curl_beacon, browser_beacon = (b["path"] for b in minted.json()["beacons"])
    assert requests.get(tracker.base + curl_beacon, headers={"User-Agent": "curl/8.5.0"}, timeout=30).status_code == 200
    browser = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.81 Mobile Safari/537.36"
    assert requests.get(tracker.base + browser_beacon, headers={"User-Agent": browser}, timeout=30).status_code == 200

    # A report waits for the projector only while it moves; its first step compiles the whole
    # list twice (the patterns of beacons and of app events), a second or more in a debug build.
    wait_for(lambda: requests.get(tracker.base + "/readyz", timeout=5).json()["projectionLag"]["events"] == 0,
             "the projector to take every event", seconds=120)
    today = datetime.datetime.now(datetime.timezone.utc).date()
    days = {"from": str(today - datetime.timedelta(days=1)), "to": str(today + datetime.timedelta(days=1))}
    summary = reporter.report("summary", **days)
    assert summary.status_code == 200, summary.text
    assert summary.headers["X-Projection-Lag-Events"] == "0", summary.headers
    rows = [r for r in summary.json()["rows"] if r["adUnit"] == AD_UNIT]
    impressions, givt = sum(r["impressions"] for r in rows), sum(r["givtImpressions"] for r in rows)
    assert (impressions, givt) == (len(APP_CLIENTS) + 1, len(CRAWLERS) + 2), rows

    contract = Contract()

    def trail(ad):
        response = reporter.get("/v1/ads/" + urllib.parse.quote(ad, safe=""))
        assert response.status_code == 200, response.text
        contract.check("/v1/ads/{requestId}", "get", response)
        [only] = response.json()["events"]
        return only

    for name in APP_CLIENTS:
        e = trail(f"app-{name}")
        assert (e["label"], e["labelledBy"], e["outcome"]["kind"]) == (None, None, "counted_impression"), (name, e)
    for name, (_, pattern) in CRAWLERS.items():
        e = trail(f"app-{name}")
        assert (e["label"], e["labelledBy"]) == ("declared_bot", {"pattern": pattern}), (name, e)
    for ad in ["app-curl", "web-curl"]:
        e = trail(ad)
        assert (e["label"], e["labelledBy"]) == ("declared_bot", {"pattern": "^curl"}), (ad, e)
    assert trail("web-browser")["label"] is None

    explained = tracker_cli(binary, fresh.url, "explain", "app-googlebot")
    assert 'invalid traffic (declared_bot, pattern "Googlebot\\\\/"), left out of every measure' in explained, explained
