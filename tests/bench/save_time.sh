#!/usr/bin/env bash
# save_time.sh — how long an lctd save to persist_dir takes (cpu backend): a full save of COPIES copies of
# every tensor file in DATA_DIR, a save after one tensor changed, and a save with nothing changed.
#
#   tests/bench/save_time.sh [BUILD_DIR] [DATA_DIR] [COPIES]
#
# Defaults: build, tests/data, 40. persist_dir is a new directory under $TMPDIR (default /tmp), so
# the figures are that file system's; periodic saves are off so that only the timed saves write.
set -euo pipefail
build=${1:-build}
data=${2:-tests/data}
copies=${3:-40}
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait; rm -rf "$tmp"' EXIT
ep="ipc://$tmp/lctd.sock"
"$build/bin/lctd" --backend cpu --listen "$ep" --persist-dir "$tmp/state" --save-interval 0 --log-level warn &
pid=$!
lct() { "$build/bin/lct" --endpoint "$ep" "$@"; }
until lct ping >/dev/null 2>&1; do sleep 0.1; done

files=("$data"/*.bin)
raw=0
for i in $(seq 1 "$copies"); do
  for f in "${files[@]}"; do
    lct put "c$i/$(basename "$f")" "$f" >/dev/null
    raw=$((raw + $(stat -c %s "$f")))
  done
done
now_ms() { echo $(($(date +%s%N) / 1000000)); }
timed_save() {
  local t0 t1
  t0=$(now_ms)
  lct save >/dev/null
  t1=$(now_ms)
  echo $((t1 - t0))
}

full=$(timed_save)
stored=$(du -sb "$tmp/state" | cut -f1)
lct put "c1/$(basename "${files[0]}")" "${files[0]}" >/dev/null
one=$(timed_save)
none=$(timed_save)
n=$((copies * ${#files[@]}))
echo "tensors $n, raw $((raw >> 20)) MiB, files $((stored >> 20)) MiB"
echo "full save: $full ms ($(((stored >> 20) * 1000 / (full > 0 ? full : 1))) MiB/s of files)"
echo "one tensor changed: $one ms"
echo "nothing changed: $none ms"
