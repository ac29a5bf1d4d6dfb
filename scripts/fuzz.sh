#!/usr/bin/env bash
# Usage: scripts/fuzz.sh short|long [TARGET...]
# libFuzzer over the domain's parsers (docs/RELIABILITY.md). Each target is an executable in
# Fuzz/<Target>/ that exports LLVMFuzzerTestOneInput; Package.swift adds it only when
# TRACKER_FUZZ is set, and it is built apart (.build-fuzz, debug: under the sanitizers as fast
# as release, and built in a minute) so normal builds never see it. The committed corpus (Fuzz/corpus/<name>/) and dictionary
# (Fuzz/<name>.dict) seed a copy in a temporary folder: new inputs are not written back.
# short: 30 s per target, 5 s for the small parsers of invalid traffic (docs/PROTOCOL.md 8: RuleSetFuzz, ForwardedForFuzz;
# FUZZ_SECONDS sets all); this is what the test command runs. long: 10 million executions per
# target (at most 2 hours; FUZZ_RUNS). A crash leaves its input in suite-results/fuzz/ and
# fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 short|long [TARGET...]" >&2; exit 2; }
mode=$1; shift
case "$mode" in
  short|long) ;;
  *) echo "usage: $0 short|long [TARGET...]" >&2; exit 2 ;;
esac
# The short form's seconds for a target: the rule-set and forwarded-for targets cost the test
# command seconds, not minutes; their long form is where they are searched.
short_seconds() {
  case "$1" in
    RuleSetFuzz|ForwardedForFuzz|ReconciliationImportFuzz) echo "${FUZZ_SECONDS:-5}" ;;
    *) echo "${FUZZ_SECONDS:-30}" ;;
  esac
}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(BatchDecoderFuzz ReportQueryFuzz RuleSetFuzz ForwardedForFuzz ReconciliationImportFuzz)
command -v swift >/dev/null || { echo "swift is not on PATH: install the Swift 6 toolchain first" >&2; exit 1; }

mkdir -p suite-results/fuzz
status=0
for target in "${targets[@]}"; do
  # BatchDecoderFuzz -> batch-decoder (its corpus folder and dictionary)
  name=$(echo "${target%Fuzz}" | sed -E 's/([a-z0-9])([A-Z])/\1-\2/g' | tr 'A-Z' 'a-z')
  echo "== fuzz $target ($mode): building in .build-fuzz"
  TRACKER_FUZZ=1 swift build --scratch-path .build-fuzz -c debug -Xswiftc -sanitize=fuzzer,address --product "$target" 2>&1 | tail -3
  bin="$(TRACKER_FUZZ=1 swift build --scratch-path .build-fuzz -c debug --show-bin-path)/$target"
  if [ "$mode" = short ]; then
    limits=(-max_total_time="$(short_seconds "$target")")
  else
    limits=(-runs="${FUZZ_RUNS:-10000000}" -max_total_time=7200)
  fi
  work=$(mktemp -d /tmp/tracker-fuzz.XXXXXX)
  log=suite-results/fuzz/$name.log
  set +e
  "$bin" "${limits[@]}" -dict="Fuzz/$name.dict" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="suite-results/fuzz/$name-" "$work" "Fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  speed=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log")
  corpus=$(ls "$work" | wc -l)
  rm -rf "$work"
  if [ "$rc" -eq 0 ]; then
    echo "fuzz $target: ${runs:-?} executions (${speed:-?}/s), 0 crashes, corpus grew to $corpus inputs (log: $log)"
  else
    echo "fuzz $target: FAILED after ${runs:-?} executions (exit $rc); the input is in suite-results/fuzz/$name-*:" >&2
    grep -E "ERROR|Fatal|precondition|SUMMARY|Test unit written" "$log" | head -10 >&2
    status=1
  fi
done
exit $status
