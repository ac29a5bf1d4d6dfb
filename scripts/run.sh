#!/usr/bin/env bash
# Usage: scripts/run.sh
# Sets everything up and serves the tracker on 127.0.0.1:8080 (TRACKER_PORT to change):
# installs missing packages, builds the release binary, starts a PostgreSQL cluster in
# .local/pg (unless DATABASE_URL is set), applies migrations, creates a development
# ingest key and report key (once; kept in .local/dev-keys.env, mode 0600), writes
# .local/env (DATABASE_URL, PATH with the tracker, the keys) for a shell to source, prints a
# curl example, then serves until Ctrl-C. Running it again reuses all of that; `make stop`
# stops the PostgreSQL cluster it started.
# On its own cluster the server connects as the least-privilege roles (tracker_ingest,
# tracker_projector, tracker_report; passwords generated once into .local/roles.env, mode
# 0600); with your DATABASE_URL it connects as that role, and says so if it is too strong.
set -euo pipefail
cd "$(dirname "$0")/.."
host=${TRACKER_HOST:-127.0.0.1}
port=${TRACKER_PORT:-8080}
# Something already answers there (most often the tracker of an earlier `make run`): say so
# in one line now, not after the build, the migrations and the banner, when the server fails to bind.
if (: <>"/dev/tcp/$host/$port") 2>/dev/null; then
  echo "error: $host:$port is in use, most likely by the tracker of an earlier 'make run' (Ctrl-C it, or 'make stop'); or serve on another port: TRACKER_PORT=8081 make run" >&2
  exit 1
fi
scripts/setup.sh
# A dependency (swift-distributed-tracing) has a file its own manifest does not declare;
# SwiftPM warns about it three times on every build. It is not ours to fix: keep it out of
# the first screen a new user reads, and everything else in.
set +e
swift build -c release --product tracker 2>&1 | grep -v "^warning: 'swift-distributed-tracing': found 1 file(s) which are unhandled"
built=${PIPESTATUS[0]}
set -e
[ "$built" -eq 0 ] || exit "$built"
bin="$(swift build -c release --show-bin-path)/tracker"
mkdir -p .local
if [ -z "${DATABASE_URL:-}" ]; then
  port=${TRACKER_PG_PORT:-54329}
  scripts/pg.sh start "$PWD/.local/pg" "$port"
  admin="postgresql://postgres@127.0.0.1:$port/postgres"
  psql "$admin" -qAtc "SELECT 1 FROM pg_database WHERE datname = 'tracker'" | grep -q 1 \
    || psql "$admin" -qc "CREATE DATABASE tracker"
  export DATABASE_URL="postgresql://postgres@127.0.0.1:$port/tracker"
  own_cluster=1
fi
"$bin" migrate
# A first run labels crawler traffic at once (the default rule set; later runs keep whatever is active).
scripts/ivt/default-rule-set.sh "$bin"
roles=.local/roles.env
if [ "${own_cluster:-0}" = 1 ] && [ ! -f "$roles" ]; then
  "$bin" roles passwords --env-file "$roles"
fi
keys=.local/dev-keys.env
if [ -f "$keys" ]; then
  # shellcheck disable=SC1090
  . "$keys"
  "$bin" keys list | grep -q "^dev-ingest-" || rm -f "$keys"
fi
if [ ! -f "$keys" ]; then
  suffix=$(date +%s)
  ingest=$("$bin" keys create --name "dev-ingest-$suffix" --scope ingest | tail -n 1)
  report=$("$bin" keys create --name "dev-report-$suffix" --scope report | tail -n 1)
  (umask 077; printf 'TRACKER_INGEST_KEY=%s\nTRACKER_REPORT_KEY=%s\n' "$ingest" "$report" >"$keys")
fi
chmod 600 "$keys"
# shellcheck disable=SC1090
. "$keys"
# Everything a shell needs to use the command line against this tracker: `. .local/env`.
(umask 077; cat >.local/env <<ENV
export DATABASE_URL='$DATABASE_URL'
export PATH='$(dirname "$bin")':"\$PATH"
export TRACKER_INGEST_KEY='$TRACKER_INGEST_KEY'
export TRACKER_REPORT_KEY='$TRACKER_REPORT_KEY'
export TRACKER_URL='http://$host:$port'
ENV
)
now=$(date -u +%Y-%m-%dT%H:%M:%S.000Z)
cat <<MSG

Tracker on http://$host:$port  (database: ${DATABASE_URL%%\?*}${own_cluster:+, as the roles in $roles})
  ingest key: $TRACKER_INGEST_KEY
  report key: $TRACKER_REPORT_KEY
  (both kept in $keys)

In another shell, '. .local/env' puts 'tracker' on PATH with DATABASE_URL and the keys set
(e.g. 'tracker report summary --from $(date -u +%Y-%m-%d) --to $(date -u +%Y-%m-%d)').
Ctrl-C stops the server; 'make stop' stops its PostgreSQL.

Try (as an Android app's HTTP client: the default rule set labels curl's own user agent a declared bot):
  curl -s -A 'okhttp/4.12.0' http://$host:$port/v1/events \\
    -H "Authorization: Bearer $TRACKER_INGEST_KEY" -H 'Content-Type: application/json' \\
    -d '{"events":[{"id":"$(cat /proc/sys/kernel/random/uuid)","type":"impression","requestId":"req-1","adUnit":"/1234/home/native","formatId":"10063170","occurredAt":"$now"}]}'
  curl -s "http://$host:$port/v1/reports/summary?from=$(date -u +%Y-%m-%d)&to=$(date -u +%Y-%m-%d)" \\
    -H "Authorization: Bearer $TRACKER_REPORT_KEY"

MSG
if [ "${own_cluster:-0}" = 1 ]; then
  # shellcheck disable=SC1090
  set -a; . "$roles"; set +a
fi
exec "$bin" serve --host "$host" --port "$port"
