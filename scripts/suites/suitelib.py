"""Shared parts of the fault, hostile-client, fuzz and storage suites (scripts/suites.sh).

Python standard library only, run by Debian's /usr/bin/python3. Everything here talks to
servers on 127.0.0.1 that the suite itself started: private PostgreSQL clusters (through
scripts/pg.sh) and the real `tracker` binary. Every loop is bounded in count and time.

A suite records named checks. A check that fails because of a defect already known (listed
in scripts/suites/known-defects.tsv with the issue that describes it) is reported as
KNOWN and does not fail the run; a known check that passes is reported as FIXED and fails
the run, so that its line is removed from the list once the defect is fixed (a fix that
regresses later then fails again). A defect that shows only in some runs is listed with
"[intermittent]" before its description: its check may pass without failing the run.
"""

import gzip
import itertools
import json
import os
import queue
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG_SCRIPT = os.path.join(ROOT, "scripts", "pg.sh")
PG_BIN = "/usr/lib/postgresql/15/bin"
RESULTS = os.path.join(ROOT, "suite-results")
KNOWN_DEFECTS = os.path.join(ROOT, "scripts", "suites", "known-defects.tsv")


def log(message):
    print(time.strftime("%H:%M:%S"), message, flush=True)


def mode():
    """'short' (the test command) or 'long' (the documented run)."""
    value = os.environ.get("SUITE_MODE", "short")
    if value not in ("short", "long"):
        sys.exit(f"SUITE_MODE must be short or long, got {value!r}")
    return value


def tracker_binary():
    binary = os.environ.get("TRACKER_BINARY")
    if not binary:
        sys.exit("TRACKER_BINARY is not set: run the suites through scripts/suites.sh (it builds the tracker)")
    if not os.access(binary, os.X_OK):
        sys.exit(f"TRACKER_BINARY {binary} is not an executable: run swift build first")
    return binary


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def git_commit():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


# ---------------------------------------------------------------------------------------------
# Checks and figures


class Checks:
    """Named checks of one suite, its figures, and the run's verdict."""

    def __init__(self, suite):
        self.suite = suite
        self.results = []  # (name, status, detail)
        self.figures = {}
        self.known = {}
        self.started = time.time()
        with open(KNOWN_DEFECTS, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line or line.startswith("#"):
                    continue
                name, _, why = line.partition("\t")
                self.known[name.strip()] = why.strip()

    def check(self, name, ok, detail=""):
        """Records one check; `name` is `<suite>.<what a user would notice>`."""
        name = f"{self.suite}.{name}"
        known = self.known.get(name)
        if ok and (known is None or known.startswith("[intermittent]")):
            status = "PASS"
        elif ok:
            status = "FIXED"
        elif known is not None:
            status = "KNOWN"
        else:
            status = "FAIL"
        self.results.append((name, status, detail))
        text = f"[{status}] {name}"
        if detail:
            text += f": {detail}"
        if status == "KNOWN":
            text += f"\n         known defect: {known}"
        if status == "FIXED":
            text += "\n         this check passes now: remove its line from scripts/suites/known-defects.tsv"
        log(text)
        return ok

    def figure(self, name, value):
        self.figures[name] = value
        log(f"figure {name} = {value}")

    def finish(self):
        """Prints the summary, writes suite-results/<suite>.json, returns the exit status."""
        counts = {s: sum(1 for _, st, _ in self.results if st == s) for s in ("PASS", "FAIL", "KNOWN", "FIXED")}
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, f"{self.suite}.json"), "w", encoding="utf-8") as f:
            json.dump({"suite": self.suite, "mode": mode(), "commit": git_commit(),
                       "seconds": round(time.time() - self.started, 1), "figures": self.figures,
                       "checks": [{"name": n, "status": s, "detail": d} for n, s, d in self.results]}, f, indent=2)
        print(f"---- {self.suite} ({mode()}, commit {git_commit()}, {time.time() - self.started:.0f} s)")
        for name, status, detail in self.results:
            if status != "PASS":
                print(f"  {status:5} {name}: {detail}")
        print(f"  {counts['PASS']} passed, {counts['FAIL']} failed, {counts['KNOWN']} failing by a known defect, "
              f"{counts['FIXED']} known defects now passing")
        return 1 if counts["FAIL"] or counts["FIXED"] else 0


# ---------------------------------------------------------------------------------------------
# PostgreSQL


def as_postgres(args, **kwargs):
    """Runs a PostgreSQL server program as the postgres user when we are root."""
    if os.getuid() == 0:
        args = ["runuser", "-u", "postgres", "--"] + args
    return subprocess.run(args, **kwargs)


class Cluster:
    """A private PostgreSQL 15 cluster on a loopback port (scripts/pg.sh)."""

    def __init__(self, name, port=None, base=None):
        self.dir = tempfile.mkdtemp(prefix=f"tracker-suite-{name}-", dir=base)
        os.chmod(self.dir, 0o755)
        self.port = port or free_port()

    @property
    def data(self):
        return os.path.join(self.dir, "data")

    def start(self):
        subprocess.run([PG_SCRIPT, "start", self.dir, str(self.port)], check=True)
        return self

    def stop(self, how="fast"):
        """pg_ctl stop -m fast|immediate|smart; waits for the exit."""
        as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", how, "-w", "-t", "60", "stop"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def restart(self):
        """Starts a stopped cluster again (runs crash recovery after an immediate stop)."""
        self.start()

    def running(self):
        return as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "status"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL).returncode == 0

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def server_pids(self):
        """The postmaster and its children (for SIGSTOP/SIGCONT)."""
        root = self.postmaster_pid()
        if root is None:
            return []
        pids = [root]
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(root)], capture_output=True, text=True).stdout
        pids += [int(p) for p in out.split()]
        return pids

    def url(self, database="postgres"):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql, database="postgres", check=True, timeout=60):
        """Rows of the last statement as lists of strings (tab-separated, unaligned)."""
        r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", self.url(database), "-c", sql],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"psql failed: {r.stderr.strip()}\n{sql}")
        return [line.split("\t") for line in r.stdout.splitlines() if line != ""]

    def append_conf(self, text):
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n" + text + "\n")

    def remove(self):
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def new_database(cluster, binary, name="tracker"):
    """Creates and migrates a database; returns its URL."""
    cluster.psql(f"CREATE DATABASE {name}")
    url = cluster.url(name)
    run_tracker_command(binary, ["migrate"], url)
    return url


def run_tracker_command(binary, args, database_url, timeout=600, env=None):
    e = dict(os.environ, DATABASE_URL=database_url, TRACKER_LOG_LEVEL="warning")
    e.update(env or {})
    r = subprocess.run([binary] + args, capture_output=True, text=True, env=e, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"tracker {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def create_key(binary, database_url, name, scope):
    return run_tracker_command(binary, ["keys", "create", "--name", name, "--scope", scope], database_url).strip().splitlines()[-1]


# ---------------------------------------------------------------------------------------------
# The tracker process


class Tracker:
    """`tracker serve` on a loopback port, its output in a file."""

    def __init__(self, binary, database_url, env=None, port=None, nofile=None, name="tracker"):
        self.binary = binary
        self.database_url = database_url
        self.env = env or {}
        self.port = port or free_port()
        self.nofile = nofile
        self.output = os.path.join(tempfile.gettempdir(), f"tracker-suite-{name}-{self.port}.log")
        self.process = None

    def start(self, wait=True, timeout=60):
        env = dict(os.environ, DATABASE_URL=self.database_url, TRACKER_LOG_LEVEL="warning")
        env.update(self.env)
        nofile = self.nofile

        def limits():
            os.setsid()
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        out = open(self.output, "ab")
        self.process = subprocess.Popen([self.binary, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                                        env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        preexec_fn=limits)
        out.close()
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tracker exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if request(self.port, "GET", "/healthz", timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"tracker did not answer /healthz within {timeout} s:\n{self.log_tail()}")

    @property
    def pid(self):
        return self.process.pid

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.alive():
            self.process.send_signal(sig)
        if self.process is not None:
            try:
                return self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait()

    def status_field(self, field):
        """A field of /proc/<pid>/status in KiB (VmRSS, VmHWM), or None once it exited."""
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1])
        except OSError:
            return None

    def cpu_seconds(self):
        """User + system CPU time so far."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def open_descriptors(self):
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return None

    def log_tail(self, lines=30):
        try:
            with open(self.output, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def log_text(self):
        try:
            with open(self.output, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class MemorySampler(threading.Thread):
    """Samples a process's VmRSS every `interval` seconds; `peak_kib` is the largest seen."""

    def __init__(self, tracker, interval=0.1):
        super().__init__(daemon=True)
        self.tracker = tracker
        self.interval = interval
        self.peak_kib = 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            rss = self.tracker.status_field("VmRSS")
            if rss:
                self.peak_kib = max(self.peak_kib, rss)
            time.sleep(self.interval)

    def stop(self):
        self.stopped.set()
        self.join()


# ---------------------------------------------------------------------------------------------
# HTTP/1.1 over raw sockets (so a suite controls every byte and every timeout)


class Response:
    def __init__(self, status, headers, body, elapsed):
        self.status = status
        self.headers = headers  # lower-case name -> value
        self.body = body
        self.elapsed = elapsed

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def error_shape_ok(self):
        """PROTOCOL.md 1: every error body is {"error": "<code>", "message": "<what to fix>"}."""
        doc = self.json()
        return (isinstance(doc, dict) and isinstance(doc.get("error"), str) and doc["error"] != ""
                and isinstance(doc.get("message"), str) and doc["message"] != ""
                and self.headers.get("content-type", "").startswith("application/json"))

    def __repr__(self):
        return f"<{self.status} {self.body[:200]!r}>"


class ConnectionClosed(OSError):
    pass


def _read_response(sock, deadline, head_only=False):
    data = b""
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(0.001, deadline - time.time()))
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionClosed("connection closed before a response" if not data else "connection closed inside the response head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if head_only:
        return status, headers, b""

    def fill(n):
        nonlocal rest
        while len(rest) < n:
            sock.settimeout(max(0.001, deadline - time.time()))
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionClosed("connection closed inside the body")
            rest += chunk

    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while True:
            while b"\r\n" not in rest:
                fill(len(rest) + 1)
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            fill(size + 2)
            body += rest[:size]
            rest = rest[size + 2:]
            if size == 0:
                break
        return status, headers, body
    if "content-length" in headers:
        n = int(headers["content-length"])
        fill(n)
        return status, headers, rest[:n]
    # Neither: the body runs to the close.
    while True:
        sock.settimeout(max(0.001, deadline - time.time()))
        chunk = sock.recv(65536)
        if not chunk:
            return status, headers, rest
        rest += chunk


def build_request(method, path, headers=None, body=None, version="HTTP/1.1"):
    headers = dict(headers or {})
    lower = {k.lower() for k in headers}
    if "host" not in lower:
        headers["Host"] = "127.0.0.1"
    if body is not None and "content-length" not in lower and "transfer-encoding" not in lower:
        headers["Content-Length"] = str(len(body))
    head = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("latin-1") + (body or b"")


class Connection:
    """One keep-alive connection; reconnects when the server closed it.

    Like browsers and HTTP libraries, a request sent on a reused connection that the server
    closed before answering (it timed the connection out as idle just as the request left:
    the keep-alive race of RFC 9112, section 9.3.1) is sent once more on a new connection.
    Batches are idempotent by their events' ids, so this is what a real client does;
    `Connection.stale_retries` counts these, and suites report it."""

    stale_retries = 0
    _lock = threading.Lock()

    def __init__(self, port, timeout=10):
        self.port = port
        self.timeout = timeout
        self.sock = None
        self.reused = False

    def _connect(self):
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None

    def send(self, raw, timeout=None):
        """Sends raw request bytes and reads one response. Raises OSError on a failure."""
        timeout = timeout or self.timeout
        start = time.time()
        for attempt in (1, 2):
            if self.sock is None:
                self._connect()
                self.reused = False
            reused = self.reused
            try:
                self.sock.settimeout(timeout)
                self.sock.sendall(raw)
                status, headers, body = _read_response(self.sock, start + timeout)
                break
            except (ConnectionClosed, BrokenPipeError, ConnectionResetError) as error:
                self.close()
                before_any_answer = not isinstance(error, ConnectionClosed) or "before a response" in str(error)
                if attempt == 1 and reused and before_any_answer:
                    with Connection._lock:
                        Connection.stale_retries += 1
                    continue
                raise
            except BaseException:
                self.close()
                raise
        self.reused = True
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Response(status, headers, body, time.time() - start)

    def request(self, method, path, headers=None, body=None, timeout=None):
        return self.send(build_request(method, path, headers, body), timeout)


def request(port, method, path, headers=None, body=None, timeout=10):
    """One request on a fresh connection."""
    c = Connection(port, timeout)
    try:
        return c.request(method, path, dict(headers or {}, Connection="close"), body, timeout)
    finally:
        c.close()


def ingest_headers(key, extra=None):
    h = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    h.update(extra or {})
    return h


def post_batch(port, key, body, timeout=10, connection=None, extra=None):
    if connection is not None:
        return connection.request("POST", "/v1/events", ingest_headers(key, extra), body, timeout)
    return request(port, "POST", "/v1/events", ingest_headers(key, extra), body, timeout)


# ---------------------------------------------------------------------------------------------
# Events


def iso(t=None):
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"


def uuid7(t=None):
    """A time-ordered UUID (v7), as the protocol recommends."""
    ms = int((time.time() if t is None else t) * 1000)
    rand = random.getrandbits(74)
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


AD_UNITS = ["/1234/home/native", "/1234/feed/native", "/5678/article/native"]
ASSETS = ["MainImage", "Headline", "Caption", "CallToAction"]


def event(**fields):
    e = {"id": uuid7(), "type": "impression", "requestId": "req-1", "adUnit": AD_UNITS[0],
         "formatId": "10063170", "occurredAt": iso(time.time() - 1)}
    e.update(fields)
    return e


_events_made = itertools.count()


def random_event(rng, ads=None):
    """An event of a random ad: impressions, clicks, AdChoices, from several sources, so the
    projections have duplicates, attribution and cross-source tracking to get right.

    Without `ads`, ads come and go as in real traffic: each event goes to one of the 16 ads
    after the (n / 8)th, so an ad gets about 8 events, some after newer ads started (late
    events). A fixed set of a few hundred ads would give each ad thousands of events, a load
    no app sends, under which the projector reloads every ad's history at every step."""
    ad = next(_events_made) // 8 + rng.randrange(16) if ads is None else rng.randrange(ads)
    kind = rng.choices(["impression", "click", "ad_loaded", "adchoices_impression", "video_play"], [5, 4, 1, 1, 1])[0]
    e = event(type=kind, requestId=f"ad-{ad}", adUnit=AD_UNITS[ad % len(AD_UNITS)],
              occurredAt=iso(time.time() - rng.uniform(0, 600)),
              source=rng.choice(["app", "app", "sdk", "mediation"]), eea=rng.random() < 0.5,
              reservation=rng.random() < 0.5)
    if kind == "click":
        e["assetKey"] = rng.choice(ASSETS)
    return e


def batch_body(events, sent_at=None):
    doc = {"events": events}
    if sent_at:
        doc["sentAt"] = sent_at
    return json.dumps(doc, ensure_ascii=False).encode()


def gzip_bytes(data):
    return gzip.compress(data)


# ---------------------------------------------------------------------------------------------
# A client that retries unacknowledged batches with the same ids


class Batch:
    __slots__ = ("ids", "body", "attempts", "acked", "abandoned", "first_sent", "outcomes")

    def __init__(self, events):
        self.ids = [e["id"] for e in events]
        self.body = batch_body(events)
        self.attempts = 0
        self.acked = False
        self.abandoned = False
        self.first_sent = None
        self.outcomes = []


class RetryingLoad:
    """`workers` threads that send batches and retry every unacknowledged one with the same ids.

    A batch is acknowledged by a 200 whose accepted + duplicates + rejections equal its size.
    Every answer is recorded in a timeline (time, status, retry-after, error shape) so a suite
    can measure the time to the first 503 after a fault and to the first 200 after recovery.
    With `abandon` > 0, that fraction of the batches whose attempt failed without an answer
    (the connection broke: the server died mid-request) are never retried, to prove they were
    stored all or nothing.
    """

    def __init__(self, port_of, key, workers=4, batch_sizes=(1, 50), abandon=0.0, seed=1, pause=0.0,
                 timeout=15, max_batches=None):
        self.port_of = port_of  # a function: the tracker may move
        self.key = key
        self.workers = workers
        self.batch_sizes = batch_sizes
        self.abandon = abandon
        self.rng = random.Random(seed)
        self.pause = pause
        self.timeout = timeout
        self.max_batches = max_batches
        self.lock = threading.Lock()
        self.batches = []
        self.timeline = []  # (time, status or 'conn', retry_after, shape_ok, message)
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.threads = []
        self.made = 0

    def _new_batch(self, rng):
        n = rng.randint(*self.batch_sizes)
        b = Batch([random_event(rng) for _ in range(n)])
        with self.lock:
            self.batches.append(b)
            self.made += 1
        return b

    def _worker(self, index):
        rng = random.Random(self.rng.random() + index)
        conn = None
        pending = None
        while not self.stop_event.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            if pending is None:
                if self.max_batches is not None and self.made >= self.max_batches:
                    time.sleep(0.05)
                    continue
                pending = self._new_batch(rng)
            port = self.port_of()
            if conn is None or conn.port != port:
                if conn:
                    conn.close()
                conn = Connection(port, self.timeout)
            pending.attempts += 1
            pending.first_sent = pending.first_sent or time.time()
            try:
                r = post_batch(port, self.key, pending.body, timeout=self.timeout, connection=conn)
            except OSError as error:
                now = time.time()
                with self.lock:
                    self.timeline.append((now, "conn", None, None, type(error).__name__))
                    pending.outcomes.append("conn")
                # An answer never came: the server may or may not have stored it.
                if self.abandon and rng.random() < self.abandon and isinstance(error, ConnectionClosed):
                    pending.abandoned = True
                    pending = None
                time.sleep(0.05)
                continue
            now = time.time()
            shape = r.status == 200 or r.error_shape_ok()
            with self.lock:
                self.timeline.append((now, r.status, r.headers.get("retry-after"), shape, r.body[:300]))
                pending.outcomes.append(r.status)
            if r.status == 200:
                doc = r.json() or {}
                total = doc.get("accepted", 0) + doc.get("duplicates", 0) + len(doc.get("rejected", []))
                if total == len(pending.ids) and not doc.get("rejected"):
                    pending.acked = True
                    pending = None
                    if self.pause:
                        time.sleep(self.pause)
                    continue
            retry = r.headers.get("retry-after")
            time.sleep(min(float(retry), 0.5) if retry and retry.isdigit() else 0.1)

    def start(self):
        for i in range(self.workers):
            t = threading.Thread(target=self._worker, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=self.timeout + 5)

    def drain(self, port_of, deadline_seconds=120):
        """After stop(): retries every batch neither acknowledged nor abandoned until it is."""
        deadline = time.time() + deadline_seconds
        for b in self.batches:
            while not b.acked and not b.abandoned and time.time() < deadline:
                try:
                    r = post_batch(port_of(), self.key, b.body, timeout=self.timeout)
                    b.outcomes.append(r.status)
                    doc = r.json() or {}
                    if r.status == 200 and doc.get("accepted", 0) + doc.get("duplicates", 0) == len(b.ids):
                        b.acked = True
                        continue
                except OSError:
                    pass
                time.sleep(0.2)

    def acknowledged_ids(self):
        return [i for b in self.batches if b.acked for i in b.ids]

    def statuses(self):
        counts = {}
        for entry in self.timeline:
            counts[entry[1]] = counts.get(entry[1], 0) + 1
        return counts


# ---------------------------------------------------------------------------------------------
# Log and projections


def log_id_counts(cluster, database):
    """id -> how many rows of the log carry it, and the number of event_ids rows."""
    rows = cluster.psql("SELECT id::text, count(*) FROM events GROUP BY id", database)
    ids = cluster.psql("SELECT count(*) FROM event_ids", database)
    return {r[0]: int(r[1]) for r in rows}, int(ids[0][0])


def verify_log(checks, cluster, database, load, part="", also_sent=frozenset()):
    """Every acknowledged event exactly once; every abandoned batch all or nothing; nothing foreign.

    `part` names the part of a suite (its checks become `<suite>.<part>.<check>`); `also_sent`
    are ids the suite wrote beside the load (not foreign)."""
    prefix = part.replace("-", "_") + "_" if part else ""
    named = (part + ".") if part else ""
    counts, id_rows = log_id_counts(cluster, database)
    acked = load.acknowledged_ids()
    missing = [i for i in acked if counts.get(i, 0) == 0]
    doubled = [i for i, n in counts.items() if n > 1]
    sent = {i for b in load.batches for i in b.ids}
    foreign = [i for i in counts if i not in sent and i not in also_sent]
    partial = []
    abandoned = [b for b in load.batches if b.abandoned and not b.acked]
    stored_abandoned = 0
    for b in abandoned:
        present = sum(1 for i in b.ids if counts.get(i, 0) > 0)
        if present not in (0, len(b.ids)):
            partial.append((b.ids[0], present, len(b.ids)))
        stored_abandoned += present == len(b.ids)
    checks.figure(prefix + "events_acknowledged", len(acked))
    checks.figure(prefix + "events_in_log", sum(counts.values()))
    checks.figure(prefix + "batches_acknowledged", sum(1 for b in load.batches if b.acked))
    checks.figure(prefix + "batches_abandoned_unacknowledged", len(abandoned))
    checks.figure(prefix + "abandoned_batches_found_whole", stored_abandoned)
    checks.check(named + "every-acknowledged-event-is-in-the-log", not missing,
                 f"{len(acked)} acknowledged, {len(missing)} missing" + (f" (e.g. {missing[:3]})" if missing else ""))
    checks.check(named + "no-event-is-in-the-log-twice", not doubled and id_rows == len(counts),
                 f"{len(doubled)} ids stored more than once, {id_rows} event_ids rows for {len(counts)} distinct logged ids")
    checks.check(named + "unacknowledged-batches-are-all-or-nothing", not partial,
                 f"{len(abandoned)} batches abandoned without an answer, {stored_abandoned} stored whole, "
                 f"{len(abandoned) - stored_abandoned - len(partial)} not at all, {len(partial)} partly {partial[:3]}")
    checks.check(named + "the-log-holds-only-events-that-were-sent", not foreign, f"{len(foreign)} unknown ids")


PROJECTION_TABLES = {
    "format_day": "traffic_class, day, ad_unit, format_id",
    "asset_day": "traffic_class, day, ad_unit, format_id, asset_key",
    "source_day": "traffic_class, day, ad_unit, format_id, adapter",
    "ad_events": "request_id, id",
}


def projection_snapshot(cluster, database):
    """Every row of the report tables and of ad_events, as sorted text."""
    snapshot = {}
    for table, order in PROJECTION_TABLES.items():
        rows = cluster.psql(f"SELECT t::text FROM {table} t ORDER BY {order}", database)
        snapshot[table] = [r[0] for r in rows]
    return snapshot


def compare_with_rebuild(checks, binary, cluster, database, name="projections-equal-a-rebuild"):
    """Catches the projector up (tracker project --once), snapshots, rebuilds, compares."""
    url = cluster.url(database)
    run_tracker_command(binary, ["project", "--once"], url, timeout=1800)
    before = projection_snapshot(cluster, database)
    run_tracker_command(binary, ["rebuild"], url, timeout=1800)
    after = projection_snapshot(cluster, database)
    differences = []
    for table in PROJECTION_TABLES:
        a, b = before[table], after[table]
        if a != b:
            only_a = sorted(set(a) - set(b))[:2]
            only_b = sorted(set(b) - set(a))[:2]
            differences.append(f"{table}: {len(a)} rows incrementally vs {len(b)} rebuilt; incremental only {only_a}; rebuilt only {only_b}")
    rows = sum(len(v) for v in before.values())
    checks.figure("projection_rows_compared", rows)
    checks.check(name, not differences and rows > 0,
                 "; ".join(differences) or f"{rows} rows of format_day, asset_day, source_day and ad_events equal a rebuild")


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]
