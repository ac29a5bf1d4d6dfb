#!/usr/bin/env bash
# Usage: scripts/bench-cardinality.sh [CLICKS=100000]
# What distinct ad units and asset keys cost (docs/SCALING.md, "Cardinality"): the release
# `tracker serve`, on a fresh database each time, takes CLICKS clicks in batches of 500 twice,
# once on one ad unit and one asset key, once on 0.4 x CLICKS ad units and CLICKS asset keys,
# with the dimension budget off so that every click is stored; then the second set again
# against the default settings, whose budget refuses what passes its limits. For each: the
# database's size and its biggest tables, the tracker's peak RSS (VmHWM) once every accepted
# click is projected and again after one summary report, the seconds until then; and the peak
# RSS of `tracker rebuild` of the second. It is scripts/suites/cardinality.py in its long form (bounded: 15 minutes), whose
# short form `make test` runs with 10 000 clicks and the debug build.
# BENCH_BIN=path runs that tracker binary instead of building this tree's release build;
# BENCH_BUDGET=off skips the third run (a binary without the budget). Results:
# bench-results/cardinality.json (figures, with the commit) and on standard output.
set -euo pipefail
cd "$(dirname "$0")/.."
clicks=${1:-100000}
case "$clicks" in ''|*[!0-9]*) echo "usage: $0 [CLICKS]" >&2; exit 2 ;; esac
scripts/setup.sh
. scripts/lib/packages.sh
# python3 runs the suite (standard library only); procps and git as for the suites.
need_packages python3 procps git util-linux
require_commands python3=python3 git=git ps=procps runuser=util-linux
if [ -n "${BENCH_BIN:-}" ]; then
  bin=$BENCH_BIN
else
  swift build -c release --product tracker >/dev/null
  bin="$(swift build -c release --show-bin-path)/tracker"
fi
echo "cardinality benchmark: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources tracker-client sql || echo '+changes'), $clicks clicks, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
SUITE_MODE=long TRACKER_BINARY="$bin" CARDINALITY_EVENTS="$clicks" CARDINALITY_BUDGET_RUN="${BENCH_BUDGET:-on}" \
  timeout 900 /usr/bin/python3 scripts/suites/cardinality.py || status=$?
mkdir -p bench-results
# The suite's figures, when it got as far as writing them.
[ -f suite-results/cardinality.json ] && cp suite-results/cardinality.json bench-results/cardinality.json

exit "$status"
