"""Slow and hostile clients: none of them may stop other clients being served.

The tracker runs under a descriptor limit of 1024 (soft and hard, as in the smoke test's
container) with TRACKER_IDLE_TIMEOUT=5 and TRACKER_REQUEST_TIMEOUT=10. Each part starts a
fresh tracker, attacks it, and meanwhile a well-behaved client ("the probe") posts a
one-event batch on a new connection every second: it must get its 200 within 5 s.

Parts: slowloris (connections sending a header byte every 3 s), stalled uploads (bodies of
~508 KiB stopped 100 bytes before the end, with a valid key), idle keep-alive connections,
a connection flood past the descriptor limit with ingest traffic flowing, oversized request
lines and headers, HTTP/1.0 without keep-alive, and a user-agent flood (every request a new
512-character user agent crafted against backtracking matchers, under a rule set of 2 000
patterns and 10 000 ranges): the requests/s of another client during the flood against the
same client alone, and the projector keeping up.

short: 200 slowloris connections for 16 s and the other parts for 10-15 s each (about 90 s);
long: 600 slowloris connections for 60 s, and every part held longer. SUITE_SCALE overrides.
"""

import errno
import json
import os
import random
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suitelib as s

IDLE_TIMEOUT = 5
REQUEST_TIMEOUT = 10
NOFILE = 1024
ENV = {"TRACKER_IDLE_TIMEOUT": str(IDLE_TIMEOUT), "TRACKER_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT)}


class Prober(threading.Thread):
    """Posts a one-event batch on a new connection every second; records (time, ok, status, seconds)."""

    def __init__(self, port, key, deadline=5):
        super().__init__(daemon=True)
        self.port, self.key, self.deadline = port, key, deadline
        self.results = []
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            start = time.time()
            try:
                r = s.post_batch(self.port, self.key, s.batch_body([s.event()]), timeout=self.deadline)
                self.results.append((start, r.status == 200, r.status, time.time() - start))
            except OSError as error:
                self.results.append((start, False, type(error).__name__, time.time() - start))
            self.stopped.wait(max(0, 1 - (time.time() - start)))

    def stop(self):
        self.stopped.set()
        self.join()

    def summary(self, since=0):
        rs = [r for r in self.results if r[0] >= since]
        failed = [r for r in rs if not r[1]]
        worst = max((r[3] for r in rs), default=0)
        return rs, failed, f"{len(rs) - len(failed)} of {len(rs)} probes got 200 within 5 s (slowest {worst:.2f} s)" + (
            f"; failures e.g. {[(r[2], round(r[3], 1)) for r in failed[:4]]}" if failed else "")


def open_socket(port):
    sock = socket.socket()
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


def closed_by_peer(sock):
    """True when the server closed the connection (EOF, a reset, or an answer such as 408 then EOF)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        data = sock.recv(65536)
        return data == b"" or data.startswith(b"HTTP/1.1 4") or data.startswith(b"HTTP/1.1 5")
    except BlockingIOError:
        return False
    except OSError:
        return True


def send_quietly(sock, data):
    try:
        sock.send(data)
        return True
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        return False


class Part:
    """A fresh tracker for one part; the probe runs while the part attacks it."""

    def __init__(self, checks, binary, url, key, name):
        self.checks, self.name = checks, name
        self.tracker = s.Tracker(binary, url, env=ENV, nofile=NOFILE, name=f"clients-{name}").start()
        self.memory = s.MemorySampler(self.tracker)
        self.memory.start()
        self.prober = Prober(self.tracker.port, key)
        self.prober.start()
        self.started = time.time()

    @property
    def port(self):
        return self.tracker.port

    def finish(self):
        self.prober.stop()
        self.memory.stop()
        alive = self.tracker.alive()
        self.checks.figure(f"{self.name}_peak_rss_mib", round(self.memory.peak_kib / 1024, 1))
        self.checks.check(f"{self.name}.the-tracker-survives", alive,
                          "" if alive else f"exited with {self.tracker.process.returncode}: {self.tracker.log_tail(8)}")
        self.tracker.kill()


def slowloris(checks, binary, url, key, connections, seconds):
    part = Part(checks, binary, url, key, "slowloris")
    socks, refused = [], 0
    for _ in range(connections):
        try:
            sock = open_socket(part.port)
            sock.send(b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            socks.append(sock)
        except OSError:
            refused += 1
    opened = time.time()
    closed_at = {}
    while time.time() - opened < seconds:
        for i, sock in enumerate(socks):
            if i in closed_at:
                continue
            if closed_by_peer(sock) or not send_quietly(sock, b"a"):
                closed_at[i] = time.time() - opened
        time.sleep(3)
    rs, failed, text = part.prober.summary(since=opened)
    checks.figure("slowloris_connections", len(socks))
    checks.figure("slowloris_seconds", seconds)
    checks.figure("slowloris_closed_by_the_server", len(closed_at))
    checks.check("slowloris.other-clients-are-served", not failed and rs, text)
    in_time = [t for t in closed_at.values() if t <= IDLE_TIMEOUT + REQUEST_TIMEOUT]
    checks.check("slowloris.header-trickles-are-cut-off", len(in_time) == len(socks),
                 f"{len(closed_at)} of {len(socks)} connections trickling a header byte every 3 s were closed by the server within "
                 f"{seconds} s ({len(in_time)} within {IDLE_TIMEOUT + REQUEST_TIMEOUT} s; TRACKER_IDLE_TIMEOUT={IDLE_TIMEOUT})")
    for sock in socks:
        sock.close()
    part.finish()


def stalled_uploads(checks, binary, url, key, uploads, seconds):
    part = Part(checks, binary, url, key, "stalled")
    size = 508 * 1024
    head = (f"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n").encode()
    body = b"{\"events\":[" + b" " * (size - 13) + b"]}"
    socks = []
    for _ in range(uploads):
        try:
            sock = socket.create_connection(("127.0.0.1", part.port), timeout=10)
            sock.sendall(head + body[:-100])
            sock.setblocking(False)
            socks.append(sock)
        except OSError:
            break
    stalled = time.time()
    closed_at = {}
    while time.time() - stalled < seconds:
        for i, sock in enumerate(socks):
            if i not in closed_at and closed_by_peer(sock):
                closed_at[i] = time.time() - stalled
        time.sleep(0.5)
    rs, failed, text = part.prober.summary(since=stalled)
    checks.figure("stalled_uploads", len(socks))
    checks.figure("stalled_upload_bytes_each", size - 100)
    checks.figure("stalled_seconds", seconds)
    checks.figure("stalled_closed_by_the_server", len(closed_at))
    checks.check("stalled.other-clients-are-served", not failed and rs, text)
    checks.check("stalled.stalled-bodies-are-cut-off", len(closed_at) == len(socks),
                 f"{len(closed_at)} of {len(socks)} uploads stopped 100 bytes before the end were closed by the server within "
                 f"{seconds} s (TRACKER_REQUEST_TIMEOUT={REQUEST_TIMEOUT})")
    for sock in socks:
        sock.close()
    part.finish()


def idle_keep_alive(checks, binary, url, key, connections, seconds):
    part = Part(checks, binary, url, key, "idle")
    socks = []
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", part.port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s._read_response(sock, time.time() + 5)
        sock.setblocking(False)
        socks.append(sock)
    idle = time.time()
    closed_at = {}
    while time.time() - idle < seconds:
        for i, sock in enumerate(socks):
            if i not in closed_at and closed_by_peer(sock):
                closed_at[i] = time.time() - idle
        time.sleep(0.5)
    rs, failed, text = part.prober.summary(since=idle)
    checks.figure("idle_connections", len(socks))
    checks.figure("idle_closed_by_the_server", len(closed_at))
    checks.check("idle.other-clients-are-served", not failed and rs, text)
    checks.check("idle.idle-keep-alive-connections-are-closed", len(closed_at) == len(socks)
                 and max(closed_at.values()) <= IDLE_TIMEOUT + 3,
                 f"{len(closed_at)} of {len(socks)} idle keep-alive connections closed by the server within {seconds} s "
                 f"(TRACKER_IDLE_TIMEOUT={IDLE_TIMEOUT})")
    for sock in socks:
        sock.close()
    part.finish()


def flood(port, count):
    socks, failed = [], 0
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            sock.setblocking(False)
            socks.append(sock)
        except OSError:
            failed += 1
    return socks, failed


def connection_flood(checks, binary, url, key, extra, seconds):
    """Idle connections up to the descriptor limit and beyond: the server must not spin, and
    must serve others again once the idle ones time out."""
    part = Part(checks, binary, url, key, "flood")
    flood_start = time.time()
    socks, failed_connects = flood(part.port, NOFILE + extra)
    opened = time.time()
    cpu = None
    if part.tracker.alive():
        cpu_start = part.tracker.cpu_seconds()
        time.sleep(5)
        cpu = (part.tracker.cpu_seconds() - cpu_start) / 5 if part.tracker.alive() else None
    descriptors = part.tracker.open_descriptors()
    time.sleep(max(0, seconds - 5))
    rs, failed, text = part.prober.summary(since=opened + IDLE_TIMEOUT + 3)
    checks.figure("flood_connections_opened", len(socks))
    checks.figure("flood_connect_failures", failed_connects)
    checks.figure("flood_seconds_to_open", round(opened - flood_start, 1))
    checks.figure("flood_tracker_cpu_share_of_a_core_idle", None if cpu is None else round(cpu, 2))
    checks.figure("flood_tracker_descriptors_after_flood", descriptors)
    checks.check("flood.other-clients-are-served-once-idle-connections-time-out", part.tracker.alive() and rs and not failed,
                 f"from {IDLE_TIMEOUT + 3} s after the flood of {len(socks)} connections on: {text}")
    checks.check("flood.no-busy-loop-at-the-descriptor-limit", cpu is not None and cpu < 0.5,
                 f"the tracker used {cpu if cpu is None else round(cpu * 100)} % of a core for 5 s while {len(socks)} idle "
                 f"connections were open (descriptor limit {NOFILE}, {descriptors} descriptors open)")
    for sock in socks:
        sock.close()
    part.finish()

    # The same flood while 8 clients keep posting on keep-alive connections opened before it.
    part = Part(checks, binary, url, key, "flood-with-ingest")
    load = s.RetryingLoad(lambda: part.port, key, workers=8, batch_sizes=(1, 20), seed=50, timeout=10, pause=0.02).start()
    time.sleep(1)
    socks, _ = flood(part.port, NOFILE + extra)
    flooded = time.time()
    while time.time() - flooded < seconds and part.tracker.alive():
        time.sleep(0.2)
    died_after = None if part.tracker.alive() else round(time.time() - flooded, 1)
    load.stop()
    checks.figure("flood_with_ingest_answers", load.statuses())
    checks.figure("flood_with_ingest_died_after_seconds", died_after)
    for sock in socks:
        sock.close()
    part.finish()


def limits(checks, binary, url, key):
    part = Part(checks, binary, url, key, "limits")
    cases = {
        "request-line-1-mib": b"GET /healthz?" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        "header-value-1-mib": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",
        "headers-10000": b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(10000)) + b"\r\n",
        "header-name-256-kib": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-" + b"n" * (1 << 18) + b": v\r\n\r\n",
    }
    refused, shaped = [], []
    for name, raw in cases.items():
        c = s.Connection(part.port, timeout=10)
        try:
            r = c.send(raw)
            status, shape = r.status, r.error_shape_ok()
        except OSError as error:
            status, shape = type(error).__name__, False
        finally:
            c.close()
        refused.append((name, status))
        shaped.append((name, status, shape))
    rss = part.tracker.status_field("VmHWM")
    checks.figure("limits_answers", refused)
    ok = [x for x in refused if x[1] in (400, 413, 414, 431)]
    checks.check("limits.oversized-request-lines-and-headers-are-refused", len(ok) == len(cases),
                 f"answers: {refused} (a 4xx, not a dropped connection or a 200)")
    checks.check("limits.refusals-have-the-json-error-shape", all(x[2] for x in shaped),
                 f"{[(n, st) for n, st, shape in shaped if not shape]} answered without the JSON error body")
    checks.figure("limits_peak_rss_mib_after", None if rss is None else round(rss / 1024, 1))

    # HTTP/1.0 without keep-alive: the server must close after its answer.
    sock = socket.create_connection(("127.0.0.1", part.port), timeout=5)
    sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
    closed, data, deadline = False, b"", time.time() + 3
    while time.time() < deadline:
        try:
            sock.settimeout(max(0.01, deadline - time.time()))
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except OSError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    sock.close()
    checks.check("limits.http-1.0-without-keep-alive-is-closed-after-the-answer", closed and data.startswith(b"HTTP/1."),
                 f"answer {data[:40]!r}; connection closed within 3 s: {closed}")
    part.finish()


def rule_set(path):
    """The benchmarks' rule set of 2 000 patterns and 10 000 ranges (scripts/bench/ivt-rule-set.py)."""
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "ivt-rule-set.py"), path],
                   check=True)


def client_rate(port, key, seconds, agent):
    """A well-behaved client: one-event batches on a keep-alive connection for `seconds`; its requests/s."""
    c = s.Connection(port, timeout=10)
    done, end = 0, time.time() + seconds
    try:
        while time.time() < end:
            r = s.post_batch(port, key, s.batch_body([s.event()]), connection=c, extra={"User-Agent": agent})
            if r.status == 200:
                done += 1
    finally:
        c.close()
    return done / seconds


def user_agent_flood(checks, binary, url, key, seconds):
    """Every request of the flood carries a user agent the tracker has never seen: each must be
    numbered at ingest and matched once by the projector, against 2 000 patterns."""
    path = os.path.join(tempfile.mkdtemp(prefix="tracker-ivt-"), "rules.json")
    rule_set(path)
    s.run_tracker_command(binary, ["ivt", "activate", path], url)
    part = Part(checks, binary, url, key, "agents")
    alone = client_rate(part.port, key, seconds, "Mozilla/5.0 (iPhone) well-behaved")
    stop = threading.Event()
    sent = [0]

    def flooder(n):
        rng = random.Random(n)
        c = s.Connection(part.port, timeout=10)
        while not stop.is_set():
            # "aaaa…!" defeats (a+)+$ in a backtracking engine; the tail makes every agent new.
            agent = "a" * 480 + "!" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(31))
            try:
                s.post_batch(part.port, key, s.batch_body([s.event()]), connection=c, extra={"User-Agent": agent})
                sent[0] += 1
            except OSError:
                pass
        c.close()

    flooders = [threading.Thread(target=flooder, args=(n,), daemon=True) for n in range(2)]
    for t in flooders:
        t.start()
    during = client_rate(part.port, key, seconds, "Mozilla/5.0 (iPhone) well-behaved")
    stop.set()
    for t in flooders:
        t.join()
    drained, lag = None, None
    started = time.time()
    while time.time() - started < 60:
        r = s.request(part.port, "GET", "/readyz")
        lag = json.loads(r.body).get("projectionLag", {}) if r.status == 200 else None
        if lag and lag.get("events") == 0:
            drained = time.time() - started
            break
        time.sleep(0.5)
    distinct = s.as_postgres(["psql", url, "-qAtc", "SELECT count(*) FROM user_agents"], capture_output=True, text=True).stdout.strip()
    ratio = during / alone if alone else 0
    checks.figure("agents_client_requests_per_second_alone", round(alone, 1))
    checks.figure("agents_client_requests_per_second_during_flood", round(during, 1))
    checks.figure("agents_client_ratio", round(ratio, 2))
    checks.figure("agents_flood_requests", sent[0])
    checks.figure("agents_distinct_user_agents_stored", distinct)
    checks.figure("agents_projector_drained_seconds", None if drained is None else round(drained, 1))
    # Two flooders and the client share two cores: a fair share is about a third of the rate alone.
    checks.check("agents.another-client-keeps-being-served", ratio >= 0.25,
                 f"{during:.0f} requests/s during the flood against {alone:.0f} alone ({ratio:.2f}; at least 0.25)")
    checks.check("agents.the-projector-keeps-up", drained is not None and drained <= 30,
                 f"the projector's lag after {sent[0]} requests with new user agents drained in "
                 f"{'more than 60' if drained is None else f'{drained:.1f}'} s (at most 30; last lag {lag})")
    part.finish()


def main():
    checks = s.Checks("clients")
    binary = s.tracker_binary()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    long = s.mode() == "long"
    scale = float(os.environ.get("SUITE_SCALE", "1"))
    cluster = s.Cluster("clients").start()
    try:
        url = s.new_database(cluster, binary)
        key = s.create_key(binary, url, "hostile-app", "ingest")
        parts = os.environ.get("SUITE_PARTS", "limits,slowloris,stalled,idle,flood,agents").split(",")
        if "limits" in parts:
            limits(checks, binary, url, key)
        if "slowloris" in parts:
            slowloris(checks, binary, url, key, int((600 if long else 200) * scale), 60 if long else 16)
        if "stalled" in parts:
            stalled_uploads(checks, binary, url, key, 260, 30 if long else REQUEST_TIMEOUT + 5)
        if "idle" in parts:
            idle_keep_alive(checks, binary, url, key, int((600 if long else 300) * scale), 20 if long else IDLE_TIMEOUT + 5)
        if "flood" in parts:
            connection_flood(checks, binary, url, key, 200, 30 if long else 14)
        if "agents" in parts:
            user_agent_flood(checks, binary, url, key, 30 if long else 8)
    finally:
        cluster.remove()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
