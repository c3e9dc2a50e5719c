#!/usr/bin/env bash
# compare-gpu.sh — on a GPU machine: the GPU codec of several builds side by side, in one invocation.
# Each build's test_cuda_codec first (its blobs against the CPU codec's bytes), then lct-bench gpu of
# each build in turn, ROUNDS times over, and per build the median share of the same invocation's
# memcpy for each dtype and size, and the batch's times. A change to the kernels is measured this
# way against the build before it: both on one machine, interleaved, so that neither gets the
# better clocks.
#
#   tests/bench/compare-gpu.sh DATA_DIR NAME=BIN_DIR [NAME=BIN_DIR ...]
#
# BIN_DIR holds a build's lct-bench and test_cuda_codec (the codec is linked in; the shared
# libraries come from LD_LIBRARY_PATH, BUILD/rt as bundled for run-gpu.sh). DATA_DIR as for
# run-gpu.sh. LCT_COMPARE_SIZES (MiB, default 64,256), LCT_COMPARE_DTYPES (default bf16,f32),
# LCT_COMPARE_ROUNDS (default 3). Logs and each run's JSON go to $OUT (default ./gpu-compare).
set -uo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 DATA_DIR NAME=BIN_DIR [NAME=BIN_DIR ...]"; exit 2; }
data=$1
shift
out=${OUT:-gpu-compare}
mkdir -p "$out"
export LCT_TEST_DATA=${LCT_TEST_DATA:-$PWD/tests/data}
sizes=${LCT_COMPARE_SIZES:-64,256}
dtypes=${LCT_COMPARE_DTYPES:-bf16,f32}
rounds=${LCT_COMPARE_ROUNDS:-3}

names=()
declare -A dirs
for spec in "$@"; do
  name=${spec%%=*} dir=${spec#*=}
  [[ $name != "$spec" && -x $dir/lct-bench && -x $dir/test_cuda_codec ]] ||
    { echo "$spec: not NAME=BIN_DIR with lct-bench and test_cuda_codec"; exit 2; }
  names+=("$name")
  dirs[$name]=$dir
done

rc=0
for name in "${names[@]}"; do
  "${dirs[$name]}/test_cuda_codec" --jobs=1 >"$out/$name.test.log" 2>&1 || rc=1
  echo "$name: test_cuda_codec $(grep -ao 'Synthesis:.*' "$out/$name.test.log" | tail -1)"
done
for ((r = 1; r <= rounds; r++)); do
  for name in "${names[@]}"; do
    "${dirs[$name]}/lct-bench" gpu --data "$data" --sizes "$sizes" --dtypes "$dtypes" --reps 9 \
      --out "$out/$name.$r.json" >"$out/$name.$r.log" 2>&1 || { echo "$name round $r: lct-bench failed"; rc=1; }
  done
done

python3 - "$out" "$rounds" "${names[@]}" <<'EOF' || rc=1
import json, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {n: [json.load(open(f"{out}/{n}.{r}.json")) for r in range(1, rounds + 1)] for n in names}
def med(xs):
    return statistics.median(xs) if xs else float("nan")
print(f"median of {rounds} rounds; enc%/dec%: the same run's device-to-device memcpy time / codec time")
print(f"{'build':12} {'dtype':6} {'MiB':>5} {'enc GB/s':>9} {'enc%':>6} {'dec GB/s':>9} {'dec%':>6}")
first = runs[names[0]][0]
for i, row in enumerate(first["sizes"]):
    for n in names:
        rs = [run["sizes"][i] for run in runs[n]]
        print(f"{n:12} {row['dtype']:6} {row['raw_bytes'] >> 20:5d} {med([x['encode_gbs'] for x in rs]):9.1f} "
              f"{100 * med([x['encode_of_memcpy'] for x in rs]):5.1f}% {med([x['decode_gbs'] for x in rs]):9.1f} "
              f"{100 * med([x['decode_of_memcpy'] for x in rs]):5.1f}%")
print(f"\n{'build':12} {'batch enc ms':>12} {'batch dec ms':>12} {'one enc ms':>11} {'one dec ms':>11}")
for n in names:
    b = [run["batch"] for run in runs[n]]
    print(f"{n:12} {med([x['encode_batch_ms'] for x in b]):12.3f} {med([x['decode_batch_ms'] for x in b]):12.3f} "
          f"{med([x['encode_one_tensor_ms'] for x in b]):11.3f} {med([x['decode_one_tensor_ms'] for x in b]):11.3f}")
EOF
exit $rc
