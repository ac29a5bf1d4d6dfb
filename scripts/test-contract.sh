#!/usr/bin/env bash
# Usage: scripts/test-contract.sh [pytest arguments…]
# Checks the HTTP contract: docs/openapi.yaml is valid OpenAPI 3.1 (openapi-spec-validator),
# real responses of every endpoint and status validate against it, and schemathesis finds no
# response outside it and no 500 (TRACKER_SCHEMATHESIS_EXAMPLES per operation, default 25);
# then /metrics (test_metrics.py) and deploy/monitoring/'s rules and dashboard against it, and the
# default invalid-traffic rule set as scripts/ivt/default-rule-set.sh activates it.
# scripts/test.sh runs it after swift test; alone, it builds the debug binary and starts its
# own PostgreSQL. Logs and reports: test-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/python-tests.sh
# prometheus: promtool, which checks and tests deploy/monitoring/'s rules (test_monitoring.py).
python_tests_setup libjs-chart.js prometheus
require_commands promtool=prometheus
run_pytest test_contract.py test_metrics.py test_monitoring.py test_default_rule_set.py "$@"
