#!/usr/bin/env python3
"""Runs the quick-start of a Markdown document exactly as it is written, against a tracker.

Usage: quickstart.py DOCUMENT

Run by scripts/test-client-package.sh inside a network namespace of its own (127.0.0.1:8080 is
free there, and nothing outside the machine can be reached). Needs TRACKER_BINARY, and the test
cluster's Unix socket: TRACKER_TEST_PG_DIR and TRACKER_TEST_PG_PORT (its TCP port is on the
other loopback).

An HTML comment, which a rendered page does not show, marks each fenced block it runs:

  <!-- quickstart:server -->     the reader starts a tracker (`make run`). Instead this starts
                                 the debug tracker on 127.0.0.1:8080 with a database of its own,
                                 and writes .local/env as scripts/run.sh does.
  <!-- quickstart:run -->        shell commands. Every run block goes, in order, into one bash
                                 session, as a reader types them into one terminal: `cd` and
                                 variables carry over. It starts in a folder laid out as this
                                 repository is for the reader (tracker-client/ and .local/), with
                                 no environment but HOME, PATH and LANG, under `set -euo
                                 pipefail`: a variable the document never sets is an error.
  <!-- quickstart:file PATH -->  a file's whole text, written to PATH from the session's folder
                                 at that point (its folder must exist: the document makes it).
  <!-- quickstart:output -->     what the run block before it prints on stdout: each line must
                                 be a line of that output, in this order (other lines may come
                                 between). A date YYYY-MM-DD stands for any date.

A fenced block between the first mark and the last that has no mark fails the run, so that
the test cannot quietly skip a step a reader is told to do.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
MARK = re.compile(r"^\s*<!--\s*quickstart:(server|run|file|output)(?:\s+(\S+))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
ENDPOINT = ("127.0.0.1", 8080)


def fail(message):
    sys.exit(f"quick-start: {message}")


def blocks(path):
    """The fenced blocks of the document: (line, mark or None, argument, text)."""
    lines = path.read_text().splitlines()
    found, mark, i = [], None, 0
    while i < len(lines):
        marked = MARK.match(lines[i])
        fence = FENCE.match(lines[i])
        if marked:
            if mark:
                fail(f"{path.name}:{mark[2]}: quickstart:{mark[0]} is not followed by a fenced block")
            mark = (marked[1], marked[2], i + 1)
        elif fence:
            indent, start, body = len(fence[1]), i + 1, []
            i += 1
            while i < len(lines) and not FENCE.match(lines[i]):
                body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
                i += 1
            if i == len(lines):
                fail(f"{path.name}:{start}: a fenced block is never closed")
            kind, argument = (mark[0], mark[1]) if mark else (None, None)
            found.append((start, kind, argument, "\n".join(body) + "\n"))
            mark = None
        elif mark and lines[i].strip():
            fail(f"{path.name}:{mark[2]}: quickstart:{mark[0]} is followed by text, not a fenced block")
        i += 1
    marked = [n for n, b in enumerate(found) if b[1]]
    if not marked:
        fail(f"{path.name} has no quickstart marks: nothing would be tested")
    steps = found[marked[0]:marked[-1] + 1]
    for line, kind, argument, _ in steps:
        if kind is None:
            fail(f"{path.name}:{line}: a block inside the quick-start has no quickstart mark")
        if kind == "file" and not argument:
            fail(f"{path.name}:{line}: quickstart:file needs the file's path")
    kinds = [b[1] for b in steps]
    for kind in ("server", "run", "file", "output"):
        if kind not in kinds:
            fail(f"{path.name}: the quick-start has no quickstart:{kind} block")
    for n, kind in enumerate(kinds):
        if kind == "output" and (n == 0 or kinds[n - 1] != "run"):
            fail(f"{path.name}:{steps[n][0]}: quickstart:output must follow a quickstart:run block")
    return steps


def check_run_script(server_block):
    """The runner stands in for `make run`: what it stands in for must still be what run.sh does."""
    if server_block.strip() != "make run":
        fail(f"the server block is {server_block.strip()!r}; this runner stands in for `make run` only")
    run_sh = (ROOT / "scripts/run.sh").read_text()
    for promise in ("cat >.local/env", "export DATABASE_URL=", "export PATH=", "export TRACKER_INGEST_KEY=",
                    "export TRACKER_REPORT_KEY=", "export TRACKER_URL=",
                    "host=${TRACKER_HOST:-127.0.0.1}", "port=${TRACKER_PORT:-8080}"):
        if promise not in run_sh:
            fail(f"scripts/run.sh no longer has {promise!r}: the quick-start's keys or address may have "
                 "changed; update docs/CLIENT.md and this runner together")
    # make run activates the default invalid-traffic rule set, which labels curl's own user agent:
    # the example it prints and the README's Try send an app's user agent, the same one.
    agent = re.compile(r"curl -s -A '([^']+)' ")
    printed, readme = agent.findall(run_sh), agent.findall((ROOT / "README.md").read_text())
    if not printed or printed != readme:
        fail(f"the user agent of scripts/run.sh's example ({printed}) and of README.md's Try ({readme}) differ")


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        fail(f"{' '.join(map(str, command))} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result.stdout


def start_tracker(work):
    binary = os.environ.get("TRACKER_BINARY")
    pg_dir, pg_port = os.environ.get("TRACKER_TEST_PG_DIR"), os.environ.get("TRACKER_TEST_PG_PORT")
    if not binary or not os.access(binary, os.X_OK):
        fail("TRACKER_BINARY is not an executable tracker (scripts/test.sh sets it after swift build)")
    if not pg_dir or not pg_port:
        fail("TRACKER_TEST_PG_DIR and TRACKER_TEST_PG_PORT are not set (scripts/test.sh starts the cluster)")
    run(["ip", "link", "set", "lo", "up"])
    database = f"quickstart_{os.getpid()}"
    admin = f"postgresql:///postgres?host={pg_dir}&port={pg_port}&user=postgres"
    run(["psql", admin, "-qc", f"CREATE DATABASE {database}"])
    env = dict(os.environ, DATABASE_URL=f"postgresql:///{database}?host={pg_dir}&port={pg_port}&user=postgres",
               TRACKER_LOG_LEVEL="warning")
    run([binary, "migrate"], env=env)
    keys = {name: run([binary, "keys", "create", "--name", f"quickstart-{scope}", "--scope", scope], env=env)
            .strip().splitlines()[-1] for name, scope in (("TRACKER_INGEST_KEY", "ingest"), ("TRACKER_REPORT_KEY", "report"))}
    log = open(work / "tracker.log", "w")
    server = subprocess.Popen([binary, "serve", "--host", ENDPOINT[0], "--port", str(ENDPOINT[1])],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://{ENDPOINT[0]}:{ENDPOINT[1]}/healthz", timeout=2).read()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                fail(f"the tracker did not answer /healthz:\n{(work / 'tracker.log').read_text()}")
            time.sleep(0.1)
    return server, keys, env["DATABASE_URL"], (admin, database)


def reader_checkout(work, keys, database_url):
    """This repository as the reader has it after `make run`: the client package and .local/env."""
    checkout = work / "tracker"
    shutil.copytree(ROOT / "tracker-client", checkout / "tracker-client",
                    ignore=shutil.ignore_patterns(".build", ".swiftpm"))
    (checkout / ".local").mkdir()
    host, port = ENDPOINT
    (checkout / ".local/env").write_text(
        f"export DATABASE_URL='{database_url}'\n"
        f"export PATH='{os.path.dirname(os.environ['TRACKER_BINARY'])}':\"$PATH\"\n"
        f"export TRACKER_INGEST_KEY='{keys['TRACKER_INGEST_KEY']}'\n"
        f"export TRACKER_REPORT_KEY='{keys['TRACKER_REPORT_KEY']}'\n"
        f"export TRACKER_URL='http://{host}:{port}'\n")
    return checkout


def session_script(steps, outputs):
    """One bash script of the run and file blocks; each run block's stdout also goes to a file."""
    script = ["set -euo pipefail",
              'trap \'echo "quick-start: docs/CLIENT.md line $qs_line: exit $? at: $BASH_COMMAND" >&2\' ERR']
    for n, (line, kind, argument, text) in enumerate(steps):
        script.append(f"qs_line={line}")
        if kind == "run":
            script += [f'echo "\\$ (docs/CLIENT.md line {line})" >&2',
                       "{", text.rstrip("\n"), f"}} > >(tee {outputs}/{n}.out)",
                       "wait $!"]
        elif kind == "file":
            end = "QUICKSTART_FILE_END"
            if end in text:
                fail(f"docs/CLIENT.md:{line}: the block contains {end}")
            script += [f"cat >'{argument}' <<'{end}'", text.rstrip("\n"), end]
    return "\n".join(script) + "\n"


def matches(promised, printed):
    """Every promised line is a printed line, in order; a date stands for any date."""
    normal = lambda line: DATE.sub("YYYY-MM-DD", line.rstrip())
    printed = [normal(line) for line in printed.splitlines()]
    at = 0
    for line in (normal(line) for line in promised.splitlines() if line.strip()):
        while at < len(printed) and printed[at] != line:
            at += 1
        if at == len(printed):
            return line
        at += 1
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: quickstart.py DOCUMENT")
    document = pathlib.Path(sys.argv[1]).resolve()
    steps = blocks(document)
    check_run_script(next(text for _, kind, _, text in steps if kind == "server"))
    work = pathlib.Path(tempfile.mkdtemp(prefix="tracker-quickstart."))
    outputs = work / "outputs"
    outputs.mkdir()
    server, keys, database_url, (admin, database) = start_tracker(work)
    try:
        checkout = reader_checkout(work, keys, database_url)
        script = work / "session.sh"
        script.write_text(session_script(steps, outputs))
        env = {name: os.environ[name] for name in ("HOME", "PATH") if name in os.environ}
        env["LANG"] = "C.UTF-8"
        started = time.monotonic()
        result = subprocess.run(["bash", str(script)], cwd=checkout, env=env, timeout=900)
        if result.returncode != 0:
            fail(f"the session stopped (exit {result.returncode}); the tracker's log:\n{(work / 'tracker.log').read_text()}")
        checked = 0
        for n, (line, kind, _, text) in enumerate(steps):
            if kind != "output":
                continue
            printed = (outputs / f"{n - 1}.out").read_text()
            missing = matches(text, printed)
            if missing is not None:
                fail(f"docs/CLIENT.md:{line} promises the line {missing!r}; the block before printed:\n{printed}")
            checked += 1
        runs = sum(1 for step in steps if step[1] == "run")
        print(f"quick-start: {runs} run blocks, {sum(1 for s in steps if s[1] == 'file')} file, "
              f"{checked} promised outputs as written, in {time.monotonic() - started:.0f} s")
    finally:
        server.terminate()
        server.wait(timeout=30)
        subprocess.run(["psql", admin, "-qc", f"DROP DATABASE IF EXISTS {database}"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
