"""Fixtures for the HTTP contract and dashboard tests: a fresh database on the test cluster
(scripts/test.sh or scripts/lib/python-tests.sh started it), migrated with `tracker migrate`,
keys from `tracker keys create`, and real `tracker serve` processes on loopback.

Run through scripts/test-contract.sh or scripts/test-dashboard.sh, which set
TRACKER_TEST_DATABASE_URL and TRACKER_BINARY.
"""

import os
import pathlib
import secrets
import signal
import socket
import subprocess
import time
import urllib.parse

import pytest
import requests

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
RESULTS = REPOSITORY / "test-results"


def required_env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through scripts/test-contract.sh or scripts/test-dashboard.sh", pytrace=False)
    return value


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_database(url, name):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result.stdout


class Tracker:
    """One `tracker serve` on a free loopback port; stopped by `stop()` (SIGTERM, then SIGKILL)."""

    def __init__(self, binary, database_url, name, environment=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        RESULTS.mkdir(exist_ok=True)
        self.log_path = RESULTS / f"tracker-{name}.log"
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REPORT_DATABASE_URL")}
        env.update({"DATABASE_URL": database_url, "TRACKER_LOG_LEVEL": "warning"})
        env.update(environment or {})
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if requests.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"tracker '{name}' did not become healthy on port {self.port}:\n{self.log_path.read_text()}")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class Database:
    """A fresh database on the test cluster with the schema and one key of each scope."""

    def __init__(self, admin_url, binary):
        self.admin_url = admin_url
        self.name = "py_" + secrets.token_hex(6)
        # TRACKER_TEST_DATABASE_SETUP: a command that makes the database NAME itself (the Citus
        # suite's, which makes it on every node of its cluster with the citus extension).
        setup = os.environ.get("TRACKER_TEST_DATABASE_SETUP")
        if setup:
            run(setup.split() + [self.name])
        else:
            run(["psql", admin_url, "-qAtc", f"CREATE DATABASE {self.name}"])
        self.url = with_database(admin_url, self.name)
        run([binary, "migrate", "--database-url", self.url])
        self.ingest_key = self.create_key(binary, "ingest")
        self.report_key = self.create_key(binary, "report")

    def create_key(self, binary, scope):
        out = run([binary, "keys", "create", "--database-url", self.url, "--name", f"py-{scope}", "--scope", scope])
        return out.strip().splitlines()[-1]

    def drop(self):
        subprocess.run(["psql", self.admin_url, "-qAtc", f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)"],
                       capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def binary():
    path = required_env("TRACKER_BINARY")
    if not os.access(path, os.X_OK):
        pytest.fail(f"TRACKER_BINARY={path} is not an executable: build it with 'swift build'", pytrace=False)
    return path


@pytest.fixture(scope="session")
def database(binary):
    db = Database(required_env("TRACKER_TEST_DATABASE_URL"), binary)
    yield db
    db.drop()


@pytest.fixture(scope="session")
def start_tracker(binary):
    """Starts trackers that are all stopped when the session ends, whatever happened."""
    started = []

    def start(database_url, name, environment=None):
        tracker = Tracker(binary, database_url, name, environment)
        started.append(tracker)
        return tracker

    yield start
    for tracker in started:
        tracker.stop()


# The main tracker signs web beacons with this secret (docs/CLIENT.md, "Web beacons").
BEACON_SECRET = "contract-test-beacon-secret-0123456789"


@pytest.fixture(scope="session")
def tracker(database, start_tracker):
    return start_tracker(database.url, "main", {"TRACKER_BEACON_SECRET": BEACON_SECRET})
