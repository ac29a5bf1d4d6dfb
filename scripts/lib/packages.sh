# Sourced by the scripts that need Debian packages (not run alone). One place decides how a
# missing package is installed, so every script installs what it calls, down to what its
# tools call underneath, on a bare machine.
#
#   need_packages PKG...        installs the packages that are not installed (root; apt-get
#                               update first, since a bare machine has no package lists)
#   require_commands CMD=PKG... fails naming the package when a command is still missing
#   explain_exit_127            an ERR trap: says which command exited 127 (not found)
#   ensure_venv DIR REQUIREMENTS a Python venv in DIR with REQUIREMENTS installed from PyPI,
#                               made again when that file changes

need_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    return 1
  fi
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Another apt may hold the lock on a shared machine: wait for it.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# A command may live outside PATH (podman's helpers in /usr/lib/podman, PostgreSQL's in
# /usr/lib/postgresql/15/bin): those directories are searched too.
require_commands() {
  local pair cmd pkg missing=()
  for pair in "$@"; do
    cmd=${pair%%=*}; pkg=${pair#*=}
    command -v "$cmd" >/dev/null 2>&1 && continue
    [ -x "/usr/lib/podman/$cmd" ] || [ -x "/usr/libexec/podman/$cmd" ] || [ -x "/usr/lib/postgresql/15/bin/$cmd" ] \
      || [ -x "/usr/sbin/$cmd" ] || [ -x "/sbin/$cmd" ] && continue
    missing+=("$cmd (Debian package $pkg)")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  printf 'missing commands: %s\n' "${missing[@]}" >&2
  return 1
}

explain_exit_127() {
  local status=$1 command=$2 line=$3
  [ "$status" -eq 127 ] || return 0
  cat >&2 <<MSG
exit 127 (command not found) at line $line: $command
  Either that command is missing, or a program it runs underneath is (podman runs runc,
  conmon and its network backend netavark, which runs iptables and aardvark-dns). The
  script installs what it knows of; install the missing one and tell us which it was.
MSG
}

ensure_venv() {
  local venv=$1 requirements=$2 stamp
  need_packages python3-venv python3-pip
  stamp="$venv/.requirements-$(sha256sum "$requirements" | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    touch "$stamp"
  fi
}
