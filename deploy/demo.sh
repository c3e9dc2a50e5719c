#!/usr/bin/env bash
# demo.sh [BUILD_DIR] — start lctd with its defaults, put real tensors, get them back,
# verify them byte for byte, show sizes, ratios and the server's counters, stop lctd.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
bin=$build/bin
data=$top/tests/data
for b in lctd lct; do
  [ -x "$bin/$b" ] || { echo "demo: $bin/$b not found: build first (cmake -S . -B build && cmake --build build)" >&2; exit 1; }
done

export LCT_ENDPOINT=${LCT_ENDPOINT:-ipc:///tmp/lctd.sock}
if "$bin/lct" ping >/dev/null 2>&1; then
  echo "demo: an lctd already answers at $LCT_ENDPOINT; stop it or set LCT_ENDPOINT" >&2
  exit 1
fi
work=$(mktemp -d)
log=$work/lctd.log
"$bin/lctd" >"$log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 50); do "$bin/lct" ping >/dev/null 2>&1 && break; sleep 0.1; done
echo "== lctd (defaults: ipc:///tmp/lctd.sock, tcp://127.0.0.1:7878, cpu backend when no GPU)"
"$bin/lct" ping

echo
echo "== put real training tensors (tests/data: weights, gradients, Adam m and v, activations)"
files=(A_s400_w.bf16.bin A_s400_g.bf16.bin A_s400_m.f32.bin A_s400_v.bf16.bin A_s400_act.bf16.bin A_s400_g.f32.bin)
for f in "${files[@]}"; do
  "$bin/lct" put "demo/${f%.bin}" "$data/$f"
done

echo
echo "== get them back (over tcp) and compare byte for byte"
for f in "${files[@]}"; do
  "$bin/lct" --endpoint tcp://127.0.0.1:7878 get "demo/${f%.bin}" "$work/$f" >/dev/null
  cmp "$data/$f" "$work/$f"
  echo "identical: $f"
done

echo
echo "== stored size and ratio"
echo "dtype  shape                         raw       stored  ratio version  key"
"$bin/lct" ls demo/
"$bin/lct" ls demo/ | awk '{raw += $3; st += $4} END {printf "total: %d raw bytes stored as %d (ratio %.3f)\n", raw, st, raw / st}'

echo
echo "== lct stats"
"$bin/lct" stats
