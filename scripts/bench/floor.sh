# Sourced by the benchmark scripts after scripts/bench/common.sh's bench_setup (not run alone):
# the HTTP floor that the tracker's single events are measured against, on this machine, under
# the same load. Each server listens on a free port of 127.0.0.1, runs as the current user and
# is stopped by floor_cleanup (call it from the script's EXIT trap).
#
#   floor_prepare          installs nginx (Debian package) and builds the bare SwiftNIO server
#                          (Sources/TrackerHTTPFloor, release); sets nginx_bin and floor_bin
#   free_port              a TCP port of 127.0.0.1 on which nothing listens
#   start_nginx PORT       nginx (worker_processes auto, one access-log line per request in
#                          $dir/nginx/access.log) answering POST /v1/events with 200 and the
#                          receipt of one accepted event; sets nginx_pid
#   start_bare PORT        the bare SwiftNIO server (one event loop per core); sets bare_pid
#   wait_listening PORT    waits until something answers on PORT (at most 60 s)
#   tree_cpu PID           CPU seconds (user + system) of PID and its live children
#   wrk_requests FILE      the requests wrk completed, from its output in FILE
#   floor_cleanup          stops the servers started here

floor_receipt='{"accepted":1,"duplicates":0,"rejected":[]}'
nginx_pid=""
bare_pid=""

floor_prepare() {
  . scripts/lib/packages.sh
  need_packages nginx
  require_commands nginx=nginx
  # Outside root's PATH for other users.
  nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
  swift build -c release --product TrackerHTTPFloor >/dev/null
  floor_bin="$(swift build -c release --show-bin-path)/TrackerHTTPFloor"
}

free_port() {
  local candidate
  for _ in $(seq 200); do
    candidate=$((20000 + RANDOM % 40000))
    # A refused connection means nothing listens there.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then echo "$candidate"; return 0; fi
  done
  echo "no free port found on 127.0.0.1" >&2
  return 1
}

# nginx as a pixel tracker would run it: the request is logged and answered, its body read and
# dropped. A prefix and a port of its own, so the system's nginx configuration and logs are
# neither read nor written (installing the Debian package starts the system's service on port
# 80 where an init system runs it; the benchmark leaves it as it is). As root its workers run
# as root too (not nobody), so the three servers run as the same user.
start_nginx() {
  local port=$1 prefix="$dir/nginx" user=""
  mkdir -p "$prefix"
  [ "$(id -u)" -eq 0 ] && user="user $(id -un) $(id -gn);"
  cat >"$prefix/nginx.conf" <<CONF
$user
worker_processes auto;
pid $prefix/nginx.pid;
error_log $prefix/error.log warn;
events { worker_connections 1024; }
http {
  access_log $prefix/access.log;
  client_body_temp_path $prefix/client-body;
  proxy_temp_path $prefix/proxy;
  fastcgi_temp_path $prefix/fastcgi;
  uwsgi_temp_path $prefix/uwsgi;
  scgi_temp_path $prefix/scgi;
  # The tracker keeps a connection open for as many requests as come on it.
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$port;
    location = /v1/events {
      default_type application/json;
      return 200 '$floor_receipt';
    }
  }
}
CONF
  "$nginx_bin" -p "$prefix" -c "$prefix/nginx.conf" -g 'daemon off;' 2>>"$prefix/error.log" &
  nginx_pid=$!
}

start_bare() {
  "$floor_bin" "$1" >"$dir/bare.log" 2>&1 &
  bare_pid=$!
}

wait_listening() {
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1 after 60 s" >&2
  return 1
}

tree_cpu() {
  { awk '{print $14 + $15}' "/proc/$1/stat"
    for c in $(pgrep -P "$1"); do awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || true; done
  } | awk -v t="$(getconf CLK_TCK)" '{s += $1} END {printf "%.2f", s / t}'
}

wrk_requests() { awk '/requests in/ {print $1}' "$1"; }

# Runs from an EXIT trap: nothing here may fail the trap before the rest of the cleanup.
floor_cleanup() {
  local pid
  for pid in "$nginx_pid" "$bare_pid"; do
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  nginx_pid=""; bare_pid=""
}
