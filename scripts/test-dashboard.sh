#!/usr/bin/env bash
# Usage: scripts/test-dashboard.sh [pytest arguments…]
# The dashboard in a real headless Chromium (Debian's chromium, driven by Playwright for
# Python): known events in through the API, the numbers on the page equal the reports API's,
# a filter changes them. Screenshots: test-results/dashboard*.png. scripts/test.sh runs it
# after swift test; alone, it builds the debug binary and starts its own PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/python-tests.sh
need_packages chromium fonts-dejavu-core || {
  echo "error: Debian's chromium package could not be installed; the dashboard test needs a real browser and fails without one" >&2
  exit 1
}
require_commands chromium=chromium
python_tests_setup libjs-chart.js
run_pytest test_dashboard.py "$@"
