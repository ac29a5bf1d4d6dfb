"""Writes the default invalid-traffic rule set (run by scripts/ivt/default-rule-set.sh).

Usage: python default_rule_set.py OUT.json

The rule set is the whole crawler-user-agents list (the installed package's), with the list's
patterns that match the default User-Agent of an HTTP client apps send their events with
named as app exemptions: they judge beacons (a browser's user agent), not the events an app
posts to /v1/events. Which patterns those are is decided here by matching each pattern
against each client's default, so a new list version brings its own.

Fails, writing nothing, when a pattern cannot be checked, or when a declared crawler would
no longer be labelled in app events.
"""

import importlib.metadata
import json
import os
import re
import sys

import crawleruseragents

# The HTTP clients apps send events with, each with the User-Agent it sends when the app sets
# none (its source says so: OkHttp's Version.userAgent, Requests' default_user_agent(),
# urllib's "Python-urllib/X.Y", Go's net/http defaultUserAgent, axios' "axios/VERSION",
# node-fetch 2's and got's headers, Android's bundled HttpClient).
# The curl command line is not one: no app sends its events with it, and the list's "^curl"
# stays a declared bot for app events too (a person trying the API with curl sets an app's
# User-Agent, as the README's example does). Unity's "libcurl/…" does not match "^curl".
# Clients whose default no pattern of the list matches need no entry: Android's
# HttpURLConnection ("Dalvik/2.1.0 (Linux; U; Android 14; …)"), iOS URLSession
# ("App/1 CFNetwork/1494.0.7 Darwin/23.4.0"), Alamofire ("App/1.0 (…; iOS 17.4.0) Alamofire/5.9.0"),
# Dart and Flutter ("Dart/3.3 (dart:io)"),
# Ktor ("Ktor client"), Java's HttpURLConnection ("Java/17.0.10") and HttpClient
# ("Java-http-client/17.0.10"), Unity ("UnityPlayer/… (UnityWebRequest/1.0, libcurl/…)").
APP_CLIENTS = [
    ("OkHttp", "okhttp/4.12.0", "Android apps on OkHttp, Retrofit or React Native"),
    ("Android's bundled Apache HttpClient", "Apache-HttpClient/UNAVAILABLE (java 1.4)", "older Android apps"),
    ("Apache HttpClient", "Apache-HttpClient/4.5.14 (Java/17.0.10)", "Java apps"),
    ("Python Requests", "python-requests/2.32.3", "Python apps"),
    ("Python's urllib", "Python-urllib/3.12", "Python apps"),
    ("aiohttp", "Python/3.12 aiohttp/3.10.5", "Python apps"),
    ("HTTPX", "python-httpx/0.27.2", "Python apps"),
    ("Go's net/http", "Go-http-client/1.1", "Go apps"),
    ("Go's net/http over HTTP/2", "Go-http-client/2.0", "Go apps"),
    ("axios", "axios/1.7.7", "Node.js and Electron apps"),
    ("node-fetch 2", "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)", "Node.js and Electron apps"),
    ("got", "got (https://github.com/sindresorhus/got)", "Node.js and Electron apps"),
]

# Declared crawlers that must stay labelled in app events too: a check that no exemption is
# broader than the clients above.
CRAWLERS = [
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
    "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.1.1 Safari/605.1.15 (Applebot/0.1; +http://www.apple.com/go/applebot)",
]


def compiled(pattern):
    """The pattern as Python reads it: the list's syntax is JavaScript's, whose named groups
    are written (?<name>…); matched anywhere, ignoring case, as the tracker does."""
    try:
        return re.compile(re.sub(r"\(\?<(?![=!])", "(?P<", pattern), re.IGNORECASE)
    except re.error as error:
        sys.exit(f"default rule set: cannot check the list's pattern {pattern!r} against the app clients: {error}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: default_rule_set.py OUT.json")
    out = sys.argv[1]
    path = os.path.join(os.path.dirname(crawleruseragents.__file__), "crawler-user-agents.json")
    version = importlib.metadata.version("crawler-user-agents")
    with open(path, encoding="utf-8") as f:
        patterns = [entry["pattern"] for entry in json.load(f)]

    exemptions = []
    for pattern in dict.fromkeys(patterns):
        regex = compiled(pattern)
        matched = [(client, ua, apps) for client, ua, apps in APP_CLIENTS if regex.search(ua)]
        if matched:
            reason = "; ".join(f"{client} sends {ua} by default ({apps})" for client, ua, apps in matched)
            exemptions.append({"pattern": pattern, "reason": reason})

    exempted = {e["pattern"] for e in exemptions}
    still = [compiled(p) for p in patterns if p not in exempted]
    for crawler in CRAWLERS:
        if not any(r.search(crawler) for r in still):
            sys.exit(f"default rule set: no pattern left for app events matches the crawler {crawler!r}; an exemption is too broad")
    for client, ua, _ in APP_CLIENTS:
        if any(r.search(ua) for r in still):
            sys.exit(f"default rule set: {client}'s default user agent {ua!r} would still be labelled in app events")

    rule_set = {
        "name": f"crawler-user-agents {version}, {len(exemptions)} patterns exempted for app events (make run's default)",
        "userAgentLists": [path],
        "appExemptions": exemptions,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(rule_set, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
