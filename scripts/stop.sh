#!/usr/bin/env bash
# Usage: scripts/stop.sh
# Stops what `make run` left running: the PostgreSQL cluster in .local/pg (on TRACKER_PG_PORT,
# 54329 by default), and a `tracker serve` it started if one still runs. Its data stays for
# the next `make run`.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${TRACKER_PG_PORT:-54329}
pkill -f "$(swift build -c release --show-bin-path 2>/dev/null)/tracker serve" 2>/dev/null || true
if [ -f .local/pg/data/postmaster.pid ]; then
  scripts/pg.sh stop "$PWD/.local/pg" "$port"
  echo "stopped PostgreSQL in .local/pg"
else
  echo "no PostgreSQL of make run is running (.local/pg)"
fi
