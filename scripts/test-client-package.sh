#!/usr/bin/env bash
# Usage: scripts/test-client-package.sh
# The client package (tracker-client/) as an app meets it, in two checks (docs/CLIENT.md):
#  1. A fresh package that depends on it by path alone is resolved and built in a network
#     namespace of its own, where nothing but an unconfigured loopback exists: it must pin no
#     package, check none out and build no module but its own, TrackerClient and TrackerModel.
#     Then the program runs.
#  2. docs/CLIENT.md's quick-start, run exactly as written (scripts/lib/quickstart.py) in such a
#     namespace against the debug tracker on 127.0.0.1:8080 (free there), its outputs compared
#     with the ones the page promises.
# scripts/test.sh runs it after swift test, with what the second check needs: TRACKER_BINARY
# and the test cluster (TRACKER_TEST_PG_DIR, TRACKER_TEST_PG_PORT: its Unix socket, since its
# TCP port is on the other loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/packages.sh
need_packages util-linux iproute2 python3 postgresql-client-15
require_commands unshare=util-linux ip=iproute2 python3=python3 psql=postgresql-client-15
command -v swift >/dev/null || { echo "swift is not on PATH: install the Swift 6 toolchain first" >&2; exit 1; }
: "${TRACKER_BINARY:?set TRACKER_BINARY to a debug tracker (scripts/test.sh does)}"
: "${TRACKER_TEST_PG_DIR:?set TRACKER_TEST_PG_DIR and TRACKER_TEST_PG_PORT to a running test cluster (scripts/test.sh does)}"
: "${TRACKER_TEST_PG_PORT:?set TRACKER_TEST_PG_PORT (scripts/test.sh does)}"

# A new network namespace needs CAP_SYS_ADMIN: root has it, anyone else gets it in a user
# namespace of their own (-r).
offline() {
  if [ "$(id -u)" -eq 0 ]; then unshare --net -- "$@"; else unshare --map-root-user --net -- "$@"; fi
}
offline true 2>/dev/null || {
  echo "unshare --net failed: run as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)" >&2
  exit 1
}
# Git here may read GitHub from local copies (a system-wide insteadOf); without the system
# configuration a fetch could only use the network, which the namespace does not have.
export GIT_CONFIG_NOSYSTEM=1

client="$PWD/tracker-client"
work=$(mktemp -d /tmp/tracker-client-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT
log="$work/consumer.log"
failed() { echo "client package: $1" >&2; tail -40 "$log" >&2 2>/dev/null || true; exit 1; }

echo "== client package: a fresh consumer, resolved and built offline"
started=$SECONDS
consumer="$work/consumer"
mkdir -p "$consumer/Sources/consumer"
cat >"$consumer/Package.swift" <<EOF
// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "consumer",
    platforms: [.macOS(.v15), .iOS(.v16)],
    dependencies: [.package(path: "$client")],
    targets: [
        .executableTarget(name: "consumer", dependencies: [.product(name: "TrackerClient", package: "tracker-client")]),
    ]
)
EOF
cat >"$consumer/Sources/consumer/main.swift" <<'EOF'
import Foundation
import TrackerClient

// Nothing listens on the endpoint: recording needs only the queue's folder.
let tracker = try AdTracker(configuration: .init(
    endpoint: URL(string: "http://127.0.0.1:9")!, ingestKey: "trk_consumer",
    queueDirectory: URL(fileURLWithPath: CommandLine.arguments[1])))
let ad = tracker.adLoaded(requestId: "consumer-1", adUnit: "/1234/consumer/native", format: .custom(formatID: "10063170"))
ad.recordImpression()
print("recorded \(tracker.statistics.recorded) events: \(EventType.adLoaded.rawValue), \(EventType.impression.rawValue)")
EOF
(cd "$consumer" && offline swift package resolve) >"$log" 2>&1 || failed "swift package resolve failed offline"
resolved=$SECONDS
# Nothing to pin, so nothing is written (docs/CLIENT.md says so).
if [ -f "$consumer/Package.resolved" ]; then
  failed "SwiftPM wrote the consumer a Package.resolved: $(tr -d ' \n' <"$consumer/Package.resolved" | head -c 300)"
fi
checkouts=$(ls "$consumer/.build/checkouts" 2>/dev/null || true)
[ -z "$checkouts" ] || failed "packages were checked out for the consumer: $(echo $checkouts)"
(cd "$consumer" && offline swift build --disable-automatic-resolution) >>"$log" 2>&1 || failed "swift build failed offline"
bin=$(cd "$consumer" && swift build --show-bin-path)
# Every Swift module built, and every target's build folder: the client's two and the consumer.
built=$( { ls "$bin/Modules" 2>/dev/null | sed -n 's/\.swiftmodule$//p'; ls -d "$bin"/*.build 2>/dev/null | xargs -r -n1 basename | sed 's/\.build$//'; } | sort -u | xargs)
[ "$built" = "TrackerClient TrackerModel consumer" ] || failed "built more than the client: $built"
output=$("$bin/consumer" "$work/queue") || failed "the consumer did not run"
[ "$output" = "recorded 2 events: ad_loaded, impression" ] || failed "the consumer printed: $output"
echo "client package: resolved nothing in $((resolved - started)) s, built $built in $((SECONDS - resolved)) s, offline; it ran: $output"

echo "== client package: docs/CLIENT.md's quick-start as written"
offline python3 scripts/lib/quickstart.py docs/CLIENT.md
