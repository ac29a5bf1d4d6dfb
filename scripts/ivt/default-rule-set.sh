#!/usr/bin/env bash
# Usage: scripts/ivt/default-rule-set.sh TRACKER_BINARY
# Activates the default invalid-traffic rule set on $DATABASE_URL when the database still has
# only the empty one (version 0): the user-agent patterns of the crawler-user-agents list
# (PyPI, installed into .local/ivt-venv; its version goes into the rule set's name). No IP
# ranges and no rate limits: those depend on the deployment (docs/OPERATIONS.md, "Invalid
# traffic"). A database that has a rule set already keeps it.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$1
. scripts/lib/packages.sh
"$bin" ivt show | grep -q '^rule set 0' || exit 0
ensure_venv .local/ivt-venv scripts/ivt/requirements.txt
python=.local/ivt-venv/bin/python
list=$("$python" -c 'import crawleruseragents, os; print(os.path.join(os.path.dirname(crawleruseragents.__file__), "crawler-user-agents.json"))')
version=$("$python" -c 'import importlib.metadata as m; print(m.version("crawler-user-agents"))')
mkdir -p .local/ivt
cat >.local/ivt/default.json <<JSON
{"name": "crawler-user-agents $version (make run's default)", "userAgentLists": ["$list"]}
JSON
"$bin" ivt activate .local/ivt/default.json
