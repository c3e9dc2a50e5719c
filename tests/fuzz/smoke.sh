#!/usr/bin/env bash
# smoke.sh — builds the libFuzzer targets with clang (LCT_FUZZ=ON) in BUILD_DIR and runs each for a few seconds from
# its committed seeds: a crash, a sanitizer report, a leak or a timeout fails it.
#
#   tests/fuzz/smoke.sh [BUILD_DIR]      (default build-fuzz; LCT_FUZZ_SECONDS per target, default 10)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-fuzz}
seconds=${LCT_FUZZ_SECONDS:-10}
targets=(fuzz_decode fuzz_wire fuzz_snapshot fuzz_http)
CC=clang cmake -S . -B "$build" -DLCT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/$t
  [ "$t" = fuzz_decode ] && seeds=tests/data/golden
  found=$(mktemp -d) # what the run adds to the corpus: the seeds stay as committed
  log="$build/$t.log"
  echo "== $t: ${seconds}s from $seeds"
  if ! "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$build/$t-" "$found" "$seeds" >"$log" 2>&1; then
    rm -rf "$found"
    tail -n 40 "$log" >&2
    echo "$t failed: its log is $log, the input $build/$t-*" >&2
    exit 1
  fi
  rm -rf "$found"
  grep -E '^(Done|stat::number_of_executed_units)' "$log"
done
echo "fuzz smoke: every target ran ${seconds}s without a finding"
