#!/usr/bin/env bash
# Usage: scripts/pg.sh start|stop|status|url DIR PORT
# Manages a private PostgreSQL 15 cluster in DIR (created on first start) listening on
# 127.0.0.1:PORT with trust authentication for local connections only. The server runs
# as the 'postgres' user when invoked as root (PostgreSQL refuses to run as root).
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 start|stop|status|url DIR PORT" >&2; exit 2; }
cmd=$1; dir=$2; port=$3
bindir=$(pg_config --bindir 2>/dev/null || true)
[ -x "$bindir/pg_ctl" ] || bindir=/usr/lib/postgresql/15/bin
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
data="$dir/data"
case "$cmd" in
  start)
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
    if [ ! -f "$data/PG_VERSION" ]; then
      as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
      # max_connections: make test runs dozens of trackers in process at once, each with its
      # pools, its log sessions and its projector's presence connection.
      cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 400
shared_buffers = 512MB
wal_buffers = 16MB
max_wal_size = 4GB
checkpoint_timeout = 15min
synchronous_commit = on
fsync = on
wal_level = replica
max_wal_senders = 4
CONF
      # PG_EXTRA_CONF: more settings for a new cluster, e.g. shared_preload_libraries = 'citus'.
      [ -n "${PG_EXTRA_CONF:-}" ] && printf '%s\n' "$PG_EXTRA_CONF" >>"$data/postgresql.conf"
      echo "host replication all 127.0.0.1/32 trust" >>"$data/pg_hba.conf"
    fi
    if as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then exit 0; fi
    # The server outlives this script: it must not keep the caller's descriptors open (a
    # caller that waits for this script's end by its pipes or sockets would wait forever).
    ( for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null; done
      as_pg "$bindir/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 -o "-p $port" start >/dev/null ) \
      || { tail -20 "$dir/server.log" >&2; exit 1; }
    ;;
  stop)
    [ -f "$data/PG_VERSION" ] || exit 0
    as_pg "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  status)
    as_pg "$bindir/pg_ctl" -D "$data" status
    ;;
  url)
    echo "postgresql://postgres@127.0.0.1:$port/postgres"
    ;;
  *) echo "usage: $0 start|stop|status|url DIR PORT" >&2; exit 2 ;;
esac
