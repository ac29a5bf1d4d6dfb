#!/usr/bin/env bash
# Usage: scripts/setup.sh
# Installs what a fresh Debian machine lacks to build, test and run the tracker:
# libpq (headers and pkg-config file), zlib headers, and the PostgreSQL 15 server.
set -euo pipefail
need=()
for pkg in libpq-dev zlib1g-dev pkg-config postgresql-15 curl haproxy; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v swift >/dev/null || { echo "swift is not on PATH: install the Swift 6 toolchain first" >&2; exit 1; }
