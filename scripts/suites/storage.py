"""Byte-exact storage: what a client sends is what the log stores and what a report shows.

Quotes, SQL fragments, characters of every Unicode plane, right-to-left marks, combining
characters and the largest allowed values go in through POST /v1/events; the stored columns
are compared byte for byte (hex of their UTF-8) and the report rows (JSON and CSV) must carry
the same text. NUL characters and invalid UTF-8 must be refused with a message that says
what is wrong. The same inputs in both modes (it takes seconds).
"""

import csv
import io
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s

# Text that must survive unchanged. Each is valid in every identifier field (no control
# characters) and within 64 characters, so it can be a requestId, assetKey, adapter and a
# segment of an adUnit (no whitespace there).
TRICKY = {
    "quotes": "it's \"quoted\" `back` ''",
    "sql": "x');DROP TABLE events;--",
    "sql-comment": "/**/UNION/**/SELECT/**/1--",
    "placeholders": "$1 %s %%d {0} ${x} ?",
    "backslashes": "C:\\path\\n\\u0000\\\\",
    "csv": "a,b;c\"d'e",
    "html": "<script>alert(1)</script>&amp;",
    "plane-0": "caf\u00e9 \u4e2d\u6587 \uac00 \ufffd \uffef",
    "plane-1": "\U0001F600\U0001F44D\U0001F3FD\U00010348\U0001D11E",
    "plane-2": "\U00020000\U0002A6D6",
    "plane-3": "\U00030000\U0003134A",
    "plane-14": "\U000E0001\U000E0041\U000E007F",
    "plane-15": "\U000F0000\U000FFFFD",
    "plane-16": "\U00100000\U0010FFFD",
    "noncharacters": "\ufdd0\ufffe\uffff\U0001FFFE\U0010FFFF",
    "rtl": "\u200fabc\u202edcba\u202c\u2067\u05e9\u05dc\u05d5\u05dd\u2069\u0627\u0644",
    "combining": "e\u0301a\u0300o\u0308\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309\u030a\u0323",
    "zwj": "\U0001F469\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466\u200b\u2060\ufeff",
    "normalization": "\u212b\u00c5A\u030a",  # three spellings of Å: must not be normalized
}
SPACEY = {
    "spaces": "  leading and trailing  ",
    "unicode-spaces": "a\u00a0b\u2003c\u3000d",
}


def max_scalars(n, ch="\U0010FFFD"):
    return ch * n


def main():
    checks = s.Checks("storage")
    binary = s.tracker_binary()
    cluster = s.Cluster("storage").start()
    tracker = None
    try:
        url = s.new_database(cluster, binary)
        ingest = s.create_key(binary, url, "storage-app", "ingest")
        report = s.create_key(binary, url, "storage-dashboard", "report")
        # Statement logging on, as an operator chasing a slow query would set it: keys, valid or
        # not, must not reach any log in plain text.
        cluster.psql("ALTER SYSTEM SET log_min_duration_statement = 0")
        cluster.psql("SELECT pg_reload_conf()")
        tracker = s.Tracker(binary, url, name="storage", env={"TRACKER_LOG_LEVEL": "debug"}).start()
        wrong_key = "wrong-" + s.uuid7()
        s.post_batch(tracker.port, wrong_key, s.batch_body([s.event()]))
        port = tracker.port
        now = time.time()
        occurred = s.iso(now - 5)

        # (name, event) pairs; every event a click so requestId, adUnit, assetKey and adapter are all stored.
        cases = []
        for name, text in list(TRICKY.items()) + list(SPACEY.items()):
            # An adUnit segment holds no whitespace and no slash (ARCHITECTURE.md, validation decisions).
            segment = "".join(c for c in text if not c.isspace() and c != "/") if name in TRICKY else "seg"
            cases.append((name, s.event(type="click", requestId=text, adUnit=f"/6499/{segment}/n", assetKey=text,
                                        adapter=text, occurredAt=occurred,
                                        attributes={text: text, "k": text})))
        cases.append(("max-lengths", s.event(
            type="click", requestId=max_scalars(128), adUnit="/6499/" + max_scalars(256 - 6), assetKey=max_scalars(64, "\U0001F600"),
            adapter=max_scalars(64, "\u05e9"), formatId="9" * 64, occurredAt=occurred)))
        # 32 attributes, 2048 bytes as compact JSON exactly.
        attrs = {f"k{i:02d}": "" for i in range(32)}
        base = len(json.dumps(attrs, separators=(",", ":"), ensure_ascii=False).encode())
        attrs["k00"] = "\u00e9" * ((2048 - base) // 2) + "x" * ((2048 - base) % 2)
        assert len(json.dumps(attrs, separators=(",", ":"), ensure_ascii=False).encode()) == 2048
        cases.append(("max-attributes", s.event(type="click", requestId="max-attrs", assetKey="A", occurredAt=occurred, attributes=attrs)))
        numbers = {"max": 1.7976931348623157e308, "min-subnormal": "5e-324", "neg-zero": "-0", "exp": "1E+2",
                   "long": "123456789012345678901234567890.123456789", "frac": "0.1", "int": 9007199254740993}
        cases.append(("numbers", s.event(type="click", requestId="numbers", assetKey="A", occurredAt=occurred, attributes=numbers)))

        # The sources report has a row per ad unit and adapter with impressions: each click's ad
        # gets an impression too, with the same text.
        body_events = []
        for _, e in cases:
            body_events.append(e)
            body_events.append({k: v for k, v in dict(e, id=s.uuid7(), type="impression").items() if k != "assetKey"})
        # Numbers must reach the log as written (jsonb keeps numeric text): send them raw.
        raw = s.batch_body(body_events)
        for name, value in numbers.items():
            if isinstance(value, str):
                raw = raw.replace(json.dumps(value).encode(), value.encode(), 1)
        r = s.post_batch(port, ingest, raw)
        doc = r.json() or {}
        checks.check("tricky-and-largest-values-are-accepted", r.status == 200 and doc.get("accepted") == len(body_events),
                     f"{r.status} {r.body[:500]!r}")
        checks.figure("events_sent", len(body_events))

        # The stored columns, byte for byte.
        mismatches = []
        for name, e in cases:
            rows = cluster.psql(
                "SELECT encode(convert_to(request_id, 'UTF8'), 'hex'), encode(convert_to(ad_unit, 'UTF8'), 'hex'), "
                "encode(convert_to(asset_key, 'UTF8'), 'hex'), encode(convert_to(coalesce(adapter, ''), 'UTF8'), 'hex'), "
                f"format_id, encode(convert_to(attributes::text, 'UTF8'), 'hex') FROM events WHERE id = '{e['id']}'", "tracker")
            if len(rows) != 1:
                mismatches.append(f"{name}: {len(rows)} rows stored")
                continue
            got = rows[0]
            for column, field, index in (("request_id", "requestId", 0), ("ad_unit", "adUnit", 1), ("asset_key", "assetKey", 2),
                                         ("adapter", "adapter", 3)):
                want = e.get(field, "").encode("utf-8").hex()
                if got[index] != want:
                    mismatches.append(f"{name}: {column} stored {bytes.fromhex(got[index])!r}, sent {e.get(field)!r}")
            if got[4] != e["formatId"]:
                mismatches.append(f"{name}: format_id stored {got[4]!r}")
            if "attributes" in e:
                stored = json.loads(bytes.fromhex(got[5]).decode("utf-8"), parse_float=str, parse_int=str)
                sent = e["attributes"] if name != "numbers" else {k: str(v) for k, v in numbers.items()}
                if name == "numbers":
                    # jsonb keeps numbers as numeric: the same value, written canonically (1E+2 -> 100).
                    for k, v in sent.items():
                        from decimal import Decimal
                        if Decimal(stored.get(k, "nan")) != Decimal(v):
                            mismatches.append(f"numbers: attributes.{k} stored {stored.get(k)!r}, sent {v!r}")
                elif stored != sent:
                    mismatches.append(f"{name}: attributes stored {stored!r}, sent {sent!r}")
        checks.check("stored-columns-equal-what-was-sent-byte-for-byte", not mismatches, "; ".join(mismatches[:5]) or
                     f"{len(cases)} events: request_id, ad_unit, asset_key, adapter, format_id, attributes")

        # Out through the reports, JSON and CSV: the dimensions carry the same text.
        day = time.strftime("%Y-%m-%d", time.gmtime(now - 5))
        report_mismatches = []
        for name, e in cases:
            if name not in TRICKY and name != "max-lengths":
                continue
            query = urllib.parse.urlencode({"from": day, "to": day, "adUnit": e["adUnit"]}, quote_via=urllib.parse.quote)
            for kind, field in (("assets", "assetKey"), ("sources", "adapter")):
                r = s.request(port, "GET", f"/v1/reports/{kind}?{query}", {"Authorization": f"Bearer {report}"})
                rows = (r.json() or {}).get("rows", []) if r.status == 200 else None
                if not rows or rows[0].get("adUnit") != e["adUnit"] or rows[0].get(field) != e[field]:
                    report_mismatches.append(f"{name}: {kind} JSON {r.status} {r.body[:200]!r}")
                r = s.request(port, "GET", f"/v1/reports/{kind}?{query}&format=csv", {"Authorization": f"Bearer {report}"})
                table = list(csv.DictReader(io.StringIO(r.body.decode("utf-8", "replace")))) if r.status == 200 else []
                if not table or table[0].get("adUnit") != e["adUnit"] or table[0].get(field) != e[field]:
                    report_mismatches.append(f"{name}: {kind} CSV {r.status} {r.body[:200]!r}")
        checks.check("reports-show-the-same-text-in-json-and-csv", not report_mismatches,
                     "; ".join(report_mismatches[:4]) or "assets (assetKey) and sources (adapter) reports, filtered by each adUnit")

        # One past each limit: refused per event, naming the field and the limit.
        over = [
            ("requestId-129", s.event(requestId=max_scalars(129)), "requestId", "128"),
            ("adUnit-257", s.event(adUnit="/6499/" + "a" * 251), "adUnit", "256"),
            ("assetKey-65", s.event(type="click", assetKey="k" * 65), "assetKey", "64"),
            ("adapter-65", s.event(adapter="m" * 65), "adapter", "64"),
            ("formatId-65", s.event(formatId="1" * 65), "formatId", "formatId"),
            ("attributes-33", s.event(attributes={f"k{i}": 1 for i in range(33)}), "attributes", "32"),
            ("attributes-2049", s.event(attributes=dict(attrs, k31="x")), "attributes", "2048"),
        ]
        r = s.post_batch(port, ingest, s.batch_body([e for _, e, _, _ in over]))
        rejected = {x["index"]: x["error"] for x in (r.json() or {}).get("rejected", [])}
        bad = [f"{name}: {rejected.get(i)!r}" for i, (name, _, field, limit) in enumerate(over)
               if i not in rejected or field not in rejected[i] or limit not in rejected[i]]
        checks.check("one-past-each-limit-is-refused-naming-field-and-limit", r.status == 200 and not bad,
                     f"{r.status}; " + "; ".join(bad[:4]) if bad or r.status != 200 else f"{len(over)} limits")

        # NUL as a JSON escape, in each kind of text field: refused per event with a clear message.
        nul_events = [
            ("requestId", s.event(requestId="a\u0000b")),
            ("adUnit", s.event(adUnit="/6499/a\u0000b")),
            ("assetKey", s.event(type="click", assetKey="Main\u0000Image")),
            ("adapter", s.event(adapter="x\u0000")),
            ("attributes", s.event(attributes={"k": "v\u0000"})),
            ("attributes", s.event(attributes={"k\u0000": "v"})),
        ]
        r = s.post_batch(port, ingest, s.batch_body([e for _, e in nul_events]))
        doc = r.json() or {}
        rejected = {x["index"]: x["error"] for x in doc.get("rejected", [])}
        unclear = [f"{field}: {rejected.get(i)!r}" for i, (field, _) in enumerate(nul_events)
                   if i not in rejected or field not in rejected[i]
                   or not any(w in rejected[i] for w in ("control", "U+0000", "NUL", "\\u{0}"))]
        checks.check("nul-characters-are-refused-naming-the-field", r.status == 200 and doc.get("accepted") == 0 and not unclear,
                     "; ".join(unclear) or f"{len(nul_events)} events refused, e.g. {rejected.get(0)!r}")

        # Bytes that are not UTF-8 (or a NUL byte raw in a string): the batch is refused, saying so.
        template = s.batch_body([s.event(requestId="PLACEHOLDER")])
        broken = {
            "lone-continuation": b"\x80", "invalid-byte": b"\xff", "overlong-slash": b"\xc0\xaf",
            "overlong-nul": b"\xc0\x80", "utf8-surrogate": b"\xed\xa0\x80", "above-10ffff": b"\xf4\x90\x80\x80",
            "truncated-3-byte": b"\xe2\x82", "truncated-4-byte": b"\xf0\x9f\x98", "five-byte": b"\xf8\x88\x80\x80\x80",
        }
        unclear = []
        for name, bytes_ in broken.items():
            r = s.post_batch(port, ingest, template.replace(b"PLACEHOLDER", b"a" + bytes_ + b"b"))
            message = (r.json() or {}).get("message", "")
            if r.status != 400 or not r.error_shape_ok() or "UTF-8" not in message:
                unclear.append(f"{name}: {r.status} {r.body[:160]!r}")
        checks.check("invalid-utf8-is-refused-saying-utf8", not unclear, "; ".join(unclear[:4]) or f"{len(broken)} kinds of invalid UTF-8 get 400 naming UTF-8")
        r = s.post_batch(port, ingest, template.replace(b"PLACEHOLDER", b"a\x00b"))
        message = (r.json() or {}).get("message", "")
        checks.check("a-raw-nul-byte-is-refused-with-a-clear-message",
                     r.status == 400 and r.error_shape_ok() and any(w in message for w in ("control", "U+0000", "NUL")),
                     f"{r.status} {r.body[:200]!r}")
        r = s.post_batch(port, ingest, template.replace(b"PLACEHOLDER", b"a\\ud800b"))
        doc = r.json() or {}
        text = json.dumps(doc)
        checks.check("a-lone-surrogate-escape-is-refused", (r.status == 400 or doc.get("accepted") == 0) and "surrogate" in text,
                     f"{r.status} {r.body[:200]!r}")

        # A report filter with a NUL: refused, not cut at the NUL and answered for a shorter ad unit.
        cut = s.event(adUnit="/6499/cut", requestId="cut", occurredAt=occurred)
        body_events.append(cut)
        s.post_batch(port, ingest, s.batch_body([cut]))
        r = s.request(port, "GET", f"/v1/reports/summary?from={day}&to={day}&adUnit=%2F6499%2Fcut%00x", {"Authorization": f"Bearer {report}"})
        checks.check("a-report-filter-with-nul-is-refused", r.status == 400 and r.error_shape_ok(),
                     f"with an impression stored for /6499/cut, GET /v1/reports/summary?adUnit=%2F6499%2Fcut%00x answered {r.status} {r.body[:300]!r}")
        r = s.request(port, "GET", f"/v1/reports/summary?from={day}&to={day}&adUnit=%2F6499%2Fcut%FFx", {"Authorization": f"Bearer {report}"})
        checks.check("a-report-filter-with-invalid-utf8-is-refused", r.status == 400 and r.error_shape_ok(),
                     f"GET /v1/reports/summary?adUnit=%2F6499%2Fcut%FFx answered {r.status} {r.body[:160]!r}")

        # Nothing refused above reached the log.
        stored = int(cluster.psql("SELECT count(*) FROM events", "tracker")[0][0])
        checks.check("refused-events-are-not-stored", stored == len(body_events), f"{stored} events in the log, {len(body_events)} accepted")
        checks.check("the-tracker-survived", tracker.alive(), tracker.log_tail(5) if not tracker.alive() else "")
        tracker_log = tracker.log_text()
        leaked = [name for name, k in (("ingest", ingest), ("report", report), ("unknown", wrong_key)) if k in tracker_log]
        checks.check("keys-never-appear-in-the-tracker-output", not leaked, f"keys found in the tracker's output (debug level): {leaked}")
        with open(os.path.join(cluster.dir, "server.log"), errors="replace") as f:
            pg_log = f.read()
        leaked = [name for name, k in (("ingest", ingest), ("report", report), ("unknown", wrong_key)) if k in pg_log]
        checks.check("keys-never-appear-in-the-postgresql-log", not leaked,
                     f"with log_min_duration_statement = 0, these keys were in PostgreSQL's log in plain text: {leaked}")
    finally:
        if tracker:
            tracker.kill()
        cluster.remove()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
