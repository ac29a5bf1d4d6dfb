#!/usr/bin/env bash
# Usage: scripts/setup.sh
# Installs what a fresh Debian machine lacks to build, test and run the tracker: libpq
# (headers and pkg-config file), zlib headers, the PostgreSQL 15 server (with pgbench and
# pg_basebackup), the commands the tests start (curl, haproxy, script, gzip), and Chart.js
# (libjs-chart.js), which the dashboard at / loads from the server.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/packages.sh
need_packages libpq-dev zlib1g-dev pkg-config postgresql-15 postgresql-client-15 curl haproxy bsdutils gzip procps libjs-chart.js
require_commands pg_ctl=postgresql-15 initdb=postgresql-15 pg_basebackup=postgresql-client-15 psql=postgresql-client-15 \
  curl=curl haproxy=haproxy script=bsdutils gzip=gzip runuser=util-linux
command -v swift >/dev/null || { echo "swift is not on PATH: install the Swift 6 toolchain first" >&2; exit 1; }
