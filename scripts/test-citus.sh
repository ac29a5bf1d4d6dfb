#!/usr/bin/env bash
# Usage: scripts/test-citus.sh   (make test-citus)
# The tracker on Citus: starts a coordinator and two workers on loopback and runs
# scripts/suites/citus.py against them (the ingest contract, reports against the reference
# computation and a single-node tracker, a rebuild, retries through kill -9 of the tracker and a
# restart of a worker, only 200 or 503 answered while a worker restarts in the middle of appends,
# exactly-once counting, retention, least-privilege roles). Results go to
# suite-results/citus.json. Not part of make test: Debian's archive has no Citus, and this needs
# the citus extension for PostgreSQL 15 installed as a user would install it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/packages.sh
trap 'explain_exit_127 $? "$BASH_COMMAND" $LINENO' ERR
scripts/setup.sh
# python3 runs the suite (standard library only); runuser (util-linux) runs PostgreSQL as the
# postgres user; ps (procps) finds its processes; git names the commit in the results.
need_packages python3 util-linux procps git
require_commands python3=python3 ps=procps git=git runuser=util-linux

pkglibdir=$(/usr/lib/postgresql/15/bin/pg_config --pkglibdir 2>/dev/null || echo /usr/lib/postgresql/15/lib)
if [ ! -f "$pkglibdir/citus.so" ] || [ ! -f /usr/share/postgresql/15/extension/citus.control ]; then
  cat >&2 <<MSG
make test-citus needs the citus extension for PostgreSQL 15 ($pkglibdir/citus.so), which
Debian's own archive does not carry. Citus publishes Debian packages; as root:

  curl -fsSL https://install.citusdata.com/community/deb.sh | bash
  apt-get install -y postgresql-15-citus-13.2

(or build a 13.x release of github.com/citusdata/citus against postgresql-server-dev-15 and
'make install' it). Then run make test-citus again.
MSG
  exit 1
fi

if [ -z "${TRACKER_BINARY:-}" ]; then
  swift build --product tracker
  export TRACKER_BINARY="$(swift build --show-bin-path)/tracker"
fi
export SUITE_MODE=${SUITE_MODE:-short}
/usr/bin/python3 scripts/suites/citus.py
