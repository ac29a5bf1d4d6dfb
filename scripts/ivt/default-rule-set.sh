#!/usr/bin/env bash
# Usage: scripts/ivt/default-rule-set.sh TRACKER_BINARY
# Activates the default invalid-traffic rule set on $DATABASE_URL when the database still has
# only the empty one (version 0): the user-agent patterns of the crawler-user-agents list
# (PyPI, installed into .local/ivt-venv; its version goes into the rule set's name), with the
# list's patterns that match the default user agent of an HTTP client apps send events with
# (okhttp, curl, python-requests, Go-http-client, …) exempted for app events: beacons are still
# judged by them (scripts/ivt/default_rule_set.py decides which, and says why in each). No IP
# ranges and no rate limits: those depend on the deployment (docs/OPERATIONS.md, "Invalid
# traffic"). A database that has a rule set already keeps it.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || { echo "usage: $0 TRACKER_BINARY" >&2; exit 2; }
bin=$1
. scripts/lib/packages.sh
"$bin" ivt show | grep -q '^rule set 0' || exit 0
ensure_venv .local/ivt-venv scripts/ivt/requirements.txt
mkdir -p .local/ivt
.local/ivt-venv/bin/python scripts/ivt/default_rule_set.py .local/ivt/default.json
"$bin" ivt activate .local/ivt/default.json
