#!/usr/bin/env bash
# profile-gpu.sh — on a GPU machine, from a carried build: Nsight Compute on the codec's encode
# and decode kernels (one launch each, after the benchmark's warm-ups), and what limits each:
# instructions per element, warp stall reasons, the instructions that stall most
# (tests/bench/ncu_summary.py). The method behind "This round" in tests/bench/RESULTS.md.
#
#   tests/bench/profile-gpu.sh [BUILD_DIR] [DATA_DIR] [SPEC...]
#
# DATA_DIR as for run-gpu.sh (default .gpu/tensors if present, else tests/data).
# SPEC is KERNEL:DTYPE:MIB, KERNEL one of encode, decode (default: both, bf16 and f32, 64 MiB),
# or KERNEL:batch for the batch of 200 bf16 GPT tensors in one call (lct-bench gpu --batch-only).
# Reports go to $OUT (default ./gpu-profile): NAME.ncu-rep, NAME.details.txt, NAME.source.csv.
# Nsight Compute locks the clocks to base (1.5 GHz on an H200): durations run longer than
# lct-bench's.
set -uo pipefail
build=$(cd "${1:-build}" && pwd) || exit 1
data=${2:-}
[[ -z $data && -d .gpu/tensors ]] && data=.gpu/tensors
data=${data:-tests/data}
shift $(($# < 2 ? $# : 2))
specs=("$@")
[[ ${#specs[@]} -eq 0 ]] && specs=(decode:bf16:64 encode:bf16:64 decode:f32:64 encode:f32:64)
out=${OUT:-gpu-profile}
mkdir -p "$out"
export LD_LIBRARY_PATH=$build/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[[ -x $ncu ]] || { echo "Nsight Compute (ncu) not found"; exit 1; }

rc=0
for spec in "${specs[@]}"; do
  IFS=: read -r kernel dtype mib <<<"$spec"
  case $kernel in
    decode) regex=decode_chunk ;;
    encode) regex=encode_kernel ;;
    *) echo "unknown kernel '$kernel' in $spec"; rc=1; continue ;;
  esac
  case $dtype in
    f32) width=4 ;; bf16 | f16 | batch) width=2 ;; f8e4m3 | f8e5m2) width=1 ;;
    *) echo "unknown dtype '$dtype' in $spec"; rc=1; continue ;;
  esac
  args=(--sizes "$mib" --dtypes "$dtype" --reps 3)
  [[ $dtype == batch ]] && args=(--batch-only --reps 3)
  name=$kernel-$dtype${mib:+-$mib}
  "$ncu" -k "regex:$regex" --launch-skip 2 -c 1 --set full --import-source no -f -o "$out/$name" \
    "$build/bin/lct-bench" gpu --data "$data" "${args[@]}" >"$out/$name.log" 2>&1 || rc=1
  # the batch's size, from its line in the benchmark's output
  [[ $dtype == batch ]] && mib=$(grep -aoE 'tensors, [0-9.]+ MiB' "$out/$name.log" | grep -oE '[0-9.]+' | head -1)
  "$ncu" --import "$out/$name.ncu-rep" --page details >"$out/$name.details.txt" 2>&1 || rc=1
  "$ncu" --import "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.source.csv" 2>&1 || rc=1
  echo "=== $name"
  grep -E ' Duration |Registers Per Thread|Warp Cycles Per Issued Instruction|Achieved Active Warps' \
    "$out/$name.details.txt" | tr -s ' '
  python3 "$(dirname "$0")/ncu_summary.py" "$out/$name.source.csv" \
    --elements "$(awk -v m="${mib:-0}" -v w="$width" 'BEGIN { printf "%d", m * 1048576 / w }')" --top 10 || rc=1
done
exit $rc
