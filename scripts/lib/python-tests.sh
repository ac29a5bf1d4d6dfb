# Sourced by scripts/test-contract.sh and scripts/test-dashboard.sh (not run alone): what the
# Python tests under Tests/Python need, installed by the project itself.
#
#   python_tests_setup DEBIAN_PACKAGE...  installs the packages (python3-venv and the caller's),
#                        the venv .local/test-venv with Tests/Python/requirements.txt (again when
#                        that file changes), the tracker's debug binary (TRACKER_BINARY, else
#                        'swift build'), and a PostgreSQL cluster (TRACKER_TEST_DATABASE_URL from
#                        scripts/test.sh, else a private one removed on exit)
#   run_pytest ARGS...   pytest in Tests/Python with the venv's Python

# shellcheck source=scripts/lib/packages.sh
. scripts/lib/packages.sh

test_venv=.local/test-venv

python_tests_setup() {
  need_packages "$@"
  require_commands psql=postgresql-client-15
  ensure_venv "$test_venv" Tests/Python/requirements.txt
  if [ -z "${TRACKER_BINARY:-}" ]; then
    swift build --product tracker
    TRACKER_BINARY="$(swift build --show-bin-path)/tracker"
    export TRACKER_BINARY
  fi
  if [ -z "${TRACKER_TEST_DATABASE_URL:-}" ]; then
    python_tests_pg=$(mktemp -d /tmp/tracker-pytest-pg.XXXXXX)
    chmod 755 "$python_tests_pg"
    python_tests_pg_port=$((20000 + RANDOM % 20000))
    trap 'scripts/pg.sh stop "$python_tests_pg" "$python_tests_pg_port" || true; rm -rf "$python_tests_pg"' EXIT
    scripts/pg.sh start "$python_tests_pg" "$python_tests_pg_port"
    export TRACKER_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$python_tests_pg_port/postgres"
  fi
}

run_pytest() {
  # Bounded: a hung browser or server fails the run instead of holding CI.
  (cd Tests/Python && timeout 1200 "../../$test_venv/bin/python" -m pytest -p no:cacheprovider "$@")
}
