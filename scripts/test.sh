#!/usr/bin/env bash
# Usage: scripts/test.sh [swift test arguments…]
# Runs the whole test suite: unit tests, and integration tests against a real PostgreSQL
# 15 cluster that this script starts in a temporary folder and removes afterwards; then, when
# no arguments narrow the run, the HTTP contract and dashboard tests (Python, Tests/Python).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
tmp=$(mktemp -d /tmp/tracker-test-pg.XXXXXX)
chmod 755 "$tmp"
port=${TRACKER_TEST_PG_PORT:-$((20000 + RANDOM % 20000))}
cleanup() { scripts/pg.sh stop "$tmp" "$port" || true; rm -rf "$tmp"; }
trap cleanup EXIT
scripts/pg.sh start "$tmp" "$port"
swift build --build-tests
# TrackerClient is a package of its own: its tests and TrackerClientProbe build in tracker-client/.
swift build --build-tests --package-path tracker-client
export TRACKER_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
export TRACKER_TEST_PG_DIR="$tmp"
export TRACKER_TEST_PG_PORT="$port"
export TRACKER_TEST_PG_SCRIPT="$PWD/scripts/pg.sh"
export TRACKER_BINARY="$(swift build --show-bin-path)/tracker"
export TRACKER_CLIENT_PROBE="$(swift build --package-path tracker-client --show-bin-path)/TrackerClientProbe"
swift test --skip-build "$@"
swift test --skip-build --package-path tracker-client "$@"
if [ $# -eq 0 ]; then
  # A fresh app that depends on the client package resolves and builds nothing of the server,
  # offline; and docs/CLIENT.md's quick-start, run as written against a tracker.
  scripts/test-client-package.sh
  # The HTTP contract (docs/openapi.yaml against the running server) and the dashboard in a
  # real Chromium, on the same cluster and binary.
  scripts/test-contract.sh
  scripts/test-dashboard.sh
  # Then the fault, hostile-client, fuzz and storage suites in their short form (a few minutes;
  # docs/RELIABILITY.md). TRACKER_SUITES=off skips them.
  if [ "${TRACKER_SUITES:-short}" != "off" ]; then
    scripts/suites.sh short
  fi
else
  echo "arguments given: the contract, dashboard and suites scripts were not run" >&2
fi
