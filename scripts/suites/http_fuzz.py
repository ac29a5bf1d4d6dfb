"""HTTP-level fuzzing: a mutational client against a tracker on loopback.

The oracle, for every request: the answer is a 2xx, or a 4xx whose body is the API's JSON
error shape {"error", "message"}; never a 5xx, never a dropped connection, never a hang
(10 s). It is `acceptable()` below, one function, so another generator (schemathesis over
the OpenAPI document, when there is one) can reuse it.

First a fixed list of reproducers of defects found before (each a named check), then random
requests built from valid seeds: JSON-aware mutations of batches (types swapped, fields
removed, boundary values, duplicated keys), byte-level mutations (flips, splices, tokens of
a dictionary), gzip bodies (valid, cut, corrupted, several members), chunked bodies, report
queries with hostile parameters, odd paths and methods. A failure is saved to
suite-results/http-fuzz/<n>.http (the exact bytes sent) for replay with `nc`.

short: 25 s of random requests; long: 600 s. SUITE_SECONDS and SUITE_SEED override.
"""

import copy
import gzip
import json
import os
import random
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s


def acceptable(method, response):
    """None when the answer keeps the contract, else why not."""
    if 200 <= response.status < 300:
        return None
    if 400 <= response.status < 500:
        if method == "HEAD" or response.error_shape_ok():
            return None
        return f"{response.status} without the JSON error shape: {response.body[:120]!r}"
    return f"{response.status}: {response.body[:160]!r}"


# Known defects a random input may hit, recognised by what was sent and what came back, so
# that they are counted apart (and fail the run once the defect is fixed and the list updated).
def known_signature(raw, response, reason):
    if response is not None and response.status == 500 and b"e-" in raw.lower():
        import re
        if re.search(rb"[0-9][eE]-[0-9]{4,}", raw):
            return "tiny-number-attribute"
    if response is not None and response.status == 500 and b"chunked" in raw.lower():
        return "chunked-body-over-512-kib"
    if response is not None and response.status == 400 and response.body == b"":
        return "parser-400-without-json-body"
    return None


DICTIONARY = [b'"', b"{", b"}", b"[", b"]", b",", b":", b"null", b"true", b"false", b"0", b"-0", b"1e308", b"1e309",
              b"-1e-400", b"1e-20000", b"123456789012345678901234567890", b'"\\u0000"', b'"\\ud800"', b'"\\udc00\\ud800"',
              b'"\\uDBFF\\uDFFF"', b"\xc0\x80", b"\xed\xa0\x80", b"\xff", b"\xf4\x90\x80\x80", b"\x00", b"\t", b"\\",
              b'"events"', b'"sentAt"', b'"id"', b'"type"', b'"attributes"', b'"occurredAt"', b'"2026-11-20T10:00:60Z"',
              b'"9999-12-31T23:59:59.999999999999Z"', b'"0000-01-01T00:00:00Z"', b'"1969-12-31T23:59:59Z"',
              b'"2026-02-30T00:00:00Z"', b'"2026-11-20T10:00:00+24:00"', b"[" * 70, b"]" * 70, b"{" * 70,
              "\U0001F600".encode(), "\u202e".encode(), b'"' + b"a" * 5000 + b'"']


class Generator:
    def __init__(self, rng, ingest, report, day):
        self.rng, self.ingest, self.report, self.day = rng, ingest, report, day

    def event(self):
        rng = self.rng
        e = s.random_event(rng)
        if rng.random() < 0.3:
            e["attributes"] = {f"a{i}": rng.choice(["v", 1, 2.5, True, "x" * rng.randint(0, 100)]) for i in range(rng.randint(0, 5))}
        if rng.random() < 0.2:
            e["adapter"] = rng.choice(["", "AdMob", "x" * 64])
        if rng.random() < 0.2:
            e["clickAction"] = rng.choice(["custom_handler", "deep_link", "destination_url"])
        return e

    def mutate_json(self, doc):
        rng = self.rng
        values = [None, True, False, 0, -1, 1.5, 1e308, "", "x", "\u0000", "\U0010FFFF", [], {}, "a" * 300,
                  "2026-11-20T10:00:60Z", "2026-11-20T10:00:00.1234567890123456789012345678901234567890123456789Z",
                  "/6499/" + "a" * 260, s.uuid7(), s.uuid7().upper(), "00000000-0000-0000-0000-000000000000", 2 ** 64, -2 ** 63]
        for _ in range(rng.randint(1, 4)):
            events = doc.get("events") if isinstance(doc, dict) else None
            choice = rng.random()
            if isinstance(events, list) and events and choice < 0.6:
                e = rng.choice(events)
                if isinstance(e, dict):
                    field = rng.choice(list(e.keys()) + ["attributes", "sentAt", "eea", "unknownField"])
                    if rng.random() < 0.2:
                        e.pop(field, None)
                    elif field == "attributes" and rng.random() < 0.5:
                        e["attributes"] = {rng.choice(["k", "", "\u0000", "a" * 200]): rng.choice(values) for _ in range(rng.randint(0, 40))}
                    else:
                        e[field] = copy.deepcopy(rng.choice(values))
            elif isinstance(doc, dict) and choice < 0.8:
                doc[rng.choice(["sentAt", "events", "extra"])] = copy.deepcopy(rng.choice(values + [[1, 2], [None]]))
            elif isinstance(events, list) and choice < 0.9:
                events.extend(copy.deepcopy(events[: rng.randint(0, len(events))]))  # repeated ids in one batch
            else:
                doc = copy.deepcopy(rng.choice(values + [[doc], {"events": doc}]))
        return doc

    def mutate_bytes(self, data):
        rng = self.rng
        data = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            if not data:
                data += rng.choice(DICTIONARY)
                continue
            i = rng.randrange(len(data))
            op = rng.random()
            if op < 0.25:
                data[i] ^= 1 << rng.randrange(8)
            elif op < 0.5:
                data[i:i] = rng.choice(DICTIONARY)
            elif op < 0.65:
                del data[i:i + rng.randint(1, 16)]
            elif op < 0.8:
                j = rng.randrange(len(data))
                data[i:i] = data[j:j + rng.randint(1, 64)]
            else:
                data[i:i + rng.randint(0, 8)] = rng.choice(DICTIONARY)
        return bytes(data)

    def batch_request(self):
        rng = self.rng
        doc = {"events": [self.event() for _ in range(rng.choice([0, 1, 1, 3, 10, 50]))]}
        if rng.random() < 0.3:
            doc["sentAt"] = s.iso()
        if rng.random() < 0.5:
            doc = self.mutate_json(doc)
        try:
            body = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        except (ValueError, TypeError):
            body = b"{}"
        if rng.random() < 0.4:
            body = self.mutate_bytes(body)
        headers = {"Authorization": f"Bearer {rng.choice([self.ingest] * 8 + [self.report, 'nope', ''])}",
                   "Content-Type": rng.choice(["application/json"] * 8 + ["application/json; charset=utf-8", "text/plain", "", "application/JSON"])}
        if rng.random() < 0.1:
            del headers["Authorization"]
        op = rng.random()
        if op < 0.15:
            packed = gzip.compress(body)
            if rng.random() < 0.3:
                packed = packed[: rng.randint(0, len(packed))]
            elif rng.random() < 0.3:
                packed = self.mutate_bytes(packed)
            elif rng.random() < 0.3:
                packed = packed + gzip.compress(b"")
            headers["Content-Encoding"] = rng.choice(["gzip", "GZIP", "x-gzip"])
            body = packed
        elif op < 0.2:
            headers["Content-Encoding"] = rng.choice(["br", "deflate", "identity", "", "gzip, identity"])
        if rng.random() < 0.1:
            chunks, i = [], 0
            while i < len(body):
                n = rng.randint(1, 4096)
                chunks.append(b"%x\r\n" % len(body[i:i + n]) + body[i:i + n] + b"\r\n")
                i += n
            headers["Transfer-Encoding"] = "chunked"
            return "POST", "/v1/events", headers, b"".join(chunks) + b"0\r\n\r\n"
        return "POST", "/v1/events", headers, body

    def report_request(self):
        rng = self.rng
        kind = rng.choice(["summary", "assets", "sources", "adchoices"] * 4 + ["", "nope", "summary/extra", "%00", "..", "SUMMARY"])
        values = [self.day, "2026-02-30", "0000-01-01", "9999-12-31", "", "x", "2026-1-1", "%00", "%FF", "+", "2026-11-20T00:00:00Z",
                  "/6499/a%00b", "a" * 3000, "true", "1", "csv", "json", "%2F1%2Fa", "-1", "99999999999999999999"]
        params = []
        for name in ["from", "to", "adUnit", "formatId", "includeTest", "format", rng.choice(["from", "x", "to"])]:
            if rng.random() < 0.85:
                params.append(f"{name}={rng.choice(values)}")
        headers = {"Authorization": f"Bearer {rng.choice([self.report] * 6 + [self.ingest, 'x'])}"}
        if rng.random() < 0.3:
            headers["Accept"] = rng.choice(["text/csv", "application/json", "*/*", "text/html"])
        return "GET", f"/v1/reports/{kind}?" + "&".join(params), headers, None

    def other_request(self):
        rng = self.rng
        method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
        path = rng.choice(["/healthz", "/readyz", "/", "/v1", "/v1/events", "/v1/events/", "/v1/reports", "/v1/reports/",
                           "/%2e%2e/etc/passwd", "/v1/events?x=%00", "/" + "a" * 4000, "/v1//events", "/healthz?%FF"])
        headers = {}
        body = None
        if method in ("POST", "PUT", "PATCH"):
            body = self.mutate_bytes(b'{"events":[]}')
            headers["Content-Type"] = "application/json"
        return method, path, headers, body

    def next(self):
        r = self.rng.random()
        if r < 0.65:
            return self.batch_request()
        if r < 0.9:
            return self.report_request()
        return self.other_request()


def head_status(port, path, headers=None):
    """A HEAD request's answer (its head only: a HEAD answer has no body)."""
    c = s.Connection(port, 10)
    try:
        c._connect()
        c.sock.sendall(s.build_request("HEAD", path, headers))
        status, hdrs, _ = s._read_response(c.sock, time.time() + 10, head_only=True)
        return status
    finally:
        c.close()


def reproducers(checks, port, ingest, report):
    """Inputs that showed defects before: each a named check."""
    def post(body, headers=None):
        return s.request(port, "POST", "/v1/events", dict(s.ingest_headers(ingest), **(headers or {})), body)

    e = s.event(attributes={"x": "PLACEHOLDER"})
    r = post(s.batch_body([s.event(), e]).replace(b'"PLACEHOLDER"', b"1e-20000"))
    checks.check("reproducer.a-number-the-database-cannot-store-is-a-per-event-rejection",
                 r.status == 200 and (r.json() or {}).get("accepted") == 1,
                 f"attributes {{\"x\": 1e-20000}} beside a valid event: {r.status} {r.body[:160]!r}")
    big = s.batch_body([s.event(attributes={"pad": "x" * 1500}) for _ in range(400)])
    chunked = b"".join(b"%x\r\n" % len(big[i:i + 65536]) + big[i:i + 65536] + b"\r\n" for i in range(0, len(big), 65536)) + b"0\r\n\r\n"
    r = post(chunked, {"Transfer-Encoding": "chunked"})
    checks.check("reproducer.a-chunked-body-over-512-kib-gets-413", r.status == 413 and r.error_shape_ok(),
                 f"{len(big)} bytes chunked: {r.status} {r.body[:160]!r}")
    answers = {}
    for method in ("HEAD", "PUT", "DELETE", "PATCH"):
        try:
            answers[method] = head_status(port, "/v1/events") if method == "HEAD" else \
                s.request(port, method, "/v1/events", s.ingest_headers(ingest), b"").status
        except OSError as error:
            answers[method] = type(error).__name__
    checks.check("reproducer.wrong-methods-get-405", all(v == 405 for v in answers.values()), f"/v1/events: {answers}")
    r = post(s.batch_body([s.event(occurredAt="2016-12-31T23:59:60Z")]))
    checks.check("reproducer.a-leap-second-is-accepted", r.status == 200 and (r.json() or {}).get("accepted") == 1,
                 f"occurredAt 2016-12-31T23:59:60Z: {r.body[:200]!r}")
    t = time.time() - 5
    long_fraction = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + "." + "1" * 60 + "Z"
    r = post(s.batch_body([s.event(occurredAt=long_fraction)]))
    checks.check("reproducer.a-fraction-of-60-digits-is-accepted", r.status == 200 and (r.json() or {}).get("accepted") == 1,
                 f"occurredAt with 60 fraction digits (PROTOCOL.md: any number): {r.body[:200]!r}")
    packed = gzip.compress(s.batch_body([s.event()]))
    r = post(packed[:-8], {"Content-Encoding": "gzip"})
    checks.check("reproducer.gzip-without-its-trailer-is-refused", r.status == 400 and r.error_shape_ok(),
                 f"gzip body without its CRC and length trailer: {r.status} {r.body[:160]!r}")
    a, b = s.event(), s.event()
    whole = s.batch_body([a, b])
    cut = whole.index(b'{"id": "' + b["id"].encode())
    r = post(gzip.compress(whole[:cut]) + gzip.compress(whole[cut:]), {"Content-Encoding": "gzip"})
    checks.check("reproducer.every-gzip-member-is-read", r.status == 200 and (r.json() or {}).get("accepted") == 2,
                 f"a batch of 2 split over two gzip members: {r.status} {r.body[:160]!r}")


def main():
    checks = s.Checks("fuzz-http")
    binary = s.tracker_binary()
    seconds = float(os.environ.get("SUITE_SECONDS", "25" if s.mode() == "short" else "600"))
    seed = int(os.environ.get("SUITE_SEED", "1234"))
    cluster = s.Cluster("fuzzhttp").start()
    tracker = None
    failures_dir = os.path.join(s.RESULTS, "http-fuzz")
    os.makedirs(failures_dir, exist_ok=True)
    try:
        url = s.new_database(cluster, binary)
        ingest = s.create_key(binary, url, "fuzz-app", "ingest")
        report = s.create_key(binary, url, "fuzz-dashboard", "report")
        tracker = s.Tracker(binary, url, name="fuzzhttp", env={"TRACKER_REPORT_WAIT": "0"}).start()
        reproducers(checks, tracker.port, ingest, report)

        rng = random.Random(seed)
        gen = Generator(rng, ingest, report, time.strftime("%Y-%m-%d"))
        conn = s.Connection(tracker.port, 10)
        tried, statuses, unknown, known = 0, {}, [], {}
        started = time.time()
        while time.time() - started < seconds and tracker.alive():
            method, path, headers, body = gen.next()
            raw = s.build_request(method, path, headers, body)
            response, reason = None, None
            try:
                if method == "HEAD":
                    response = s.Response(head_status(tracker.port, path, headers), {}, b"", 0)
                else:
                    response = conn.send(raw)
                reason = acceptable(method, response)
            except TimeoutError:
                reason = "no answer within 10 s (a hang)"
                conn.close()
            except OSError as error:
                reason = f"no answer: {type(error).__name__} {error}"
                conn.close()
            tried += 1
            key = response.status if response else "none"
            statuses[key] = statuses.get(key, 0) + 1
            if reason:
                signature = known_signature(raw, response, reason)
                if signature:
                    known[signature] = known.get(signature, 0) + 1
                else:
                    path_out = os.path.join(failures_dir, f"{len(unknown):04d}.http")
                    with open(path_out, "wb") as f:
                        f.write(raw)
                    unknown.append((reason, path_out))
        checks.figure("requests_tried", tried)
        checks.figure("seconds", round(time.time() - started, 1))
        checks.figure("seed", seed)
        checks.figure("answers", {str(k): v for k, v in sorted(statuses.items(), key=lambda kv: str(kv[0]))})
        checks.figure("known_defect_hits", known)
        checks.check("random.every-answer-is-2xx-or-4xx-with-the-json-error-shape", not unknown and tracker.alive(),
                     f"{tried} requests, {len(unknown)} broke the contract" +
                     (f", e.g. {unknown[0][0]} (replay: nc 127.0.0.1 PORT < {unknown[0][1]})" if unknown else "") +
                     (f"; known defects hit {known}" if known else ""))
        checks.check("random.no-known-defect-was-hit", not known, f"known defects hit by random inputs: {known}")
    finally:
        if tracker:
            tracker.kill()
        cluster.remove()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
