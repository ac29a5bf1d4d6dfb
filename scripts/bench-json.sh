#!/usr/bin/env bash
# Usage: scripts/bench-json.sh
# The three JSON bodies the server writes by hand (the ingest receipt, the error body, a
# report) against JSONEncoder writing the same values, in one run: time per body, median of
# 7 alternating rounds, and the ratio (Sources/TrackerJSONBench; docs/PERFORMANCE.md, "JSON
# bodies"). No database: it links the server's own body builders and runs them in process.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/packages.sh
command -v swift >/dev/null || { echo "swift is not on PATH: install the Swift 6 toolchain first" >&2; exit 1; }
# What building the server links (libpq, zlib, found through pkg-config).
need_packages libpq-dev zlib1g-dev pkg-config
swift build -c release --product TrackerJSONBench >/dev/null
"$(swift build -c release --show-bin-path)/TrackerJSONBench"
