#!/usr/bin/env bash
# run-gpu.sh — on a GPU machine, from a carried build: GPU tests (ctest), compute-sanitizer memcheck,
# lct-bench gpu, lctd's integration suite on the cuda backend, the device path (lct_put_device /
# lct_get_device), a lost GPU (lctd-faults), the Python binding with CUDA tensors (lct.torch's codec,
# activations, weights and CompressedAdamW among them), the optimizer step alone, the trainer offload
# measurement, lct.torch in the training loop (train_compressed.py) and lct-bench soak (plain and --chaos)
# on the cuda backend.
#
#   tests/bench/run-gpu.sh [BUILD_DIR] [DATA_DIR]
#
# BUILD_DIR (default build) was built elsewhere and bundled with
# shared/tools/bundle-libs, so BUILD_DIR/rt holds its shared libraries.
# DATA_DIR (default .gpu/tensors if present, else tests/data) holds the
# *.bf16.bin / *.f32.bin tensors the benchmark tiles. Logs and results go to
# $OUT (default ./gpu-results); the summary is printed last. LCT_PY_TIMEOUT bounds the
# Python tests (default 540 s: the torchrun ones start several trainers), LCT_TEST_TIMEOUT,
# LCT_BENCH_TIMEOUT and LCT_SAN_TIMEOUT (seconds, per test) bound each step;
# LCT_SAN_TESTS names the tests run under memcheck (default: the list in step 3)
# and LCT_RACE_TESTS those under racecheck; LCT_SOAK_SECONDS
# is each soak's length (default 120; 0 skips them).
set -uo pipefail
build=$(cd "${1:-build}" && pwd) || exit 1 # absolute, however it was given
data=${2:-}
[[ -z $data && -d .gpu/tensors ]] && data=.gpu/tensors
data=${data:-tests/data}
out=${OUT:-gpu-results}
mkdir -p "$out"
export LD_LIBRARY_PATH=$build/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LCT_TEST_DATA=$PWD/tests/data

# ctest and the test binary carry the absolute paths of the machine that
# configured the build: make them resolve here too.
recorded=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null)
if [[ -n $recorded && $recorded != "$PWD" && ! -e $recorded ]]; then
  mkdir -p "$(dirname "$recorded")" && ln -s "$PWD" "$recorded"
fi

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version 2>/dev/null | tail -2
  uname -r
  pwd
} >"$out/env.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)

# 1. GPU tests through ctest.
ctest --test-dir "$build" -L gpu -E '^(test_device|test_faults_gpu)$' --output-on-failure --timeout "${LCT_TEST_TIMEOUT:-240}" >"$out/ctest.log" 2>&1
ctest_rc=$?
ctest_line=$(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)
synth=$(grep -ao 'Synthesis:.*' "$out/ctest.log" | tail -1)

# 2. The benchmark.
timeout "${LCT_BENCH_TIMEOUT:-300}" "$build/bin/lct-bench" gpu --data "$data" --out "$out/bench.json" \
  >"$out/bench.txt" 2>&1
bench_rc=$?

# 3. compute-sanitizer memcheck on the test binary, one test per process (the
#    multi-MiB test is left to the plain run above: memcheck slows it most),
#    then racecheck on LCT_RACE_TESTS.
san_rc=skipped
# sanitize TOOL TEST...: compute-sanitizer's TOOL on each test of test_cuda_codec, one per process.
sanitize() {
  local tool=$1 t rc
  shift
  for t in "$@"; do
    echo "== $tool $t" >>"$out/sanitizer.log"
    timeout "${LCT_SAN_TIMEOUT:-120}" compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 3 \
      "$build/bin/test_cuda_codec" --jobs=1 --filter="cuda_codec/$t" >>"$out/sanitizer.log" 2>&1
    rc=$?
    echo "== $tool $t rc=$rc" >>"$out/sanitizer.log"
    [[ $rc -ne 0 ]] && san_rc=$rc
  done
}
if command -v compute-sanitizer >/dev/null; then
  san_rc=0
  : >"$out/sanitizer.log"
  sanitize memcheck ${LCT_SAN_TESTS:-every_dtype_kind_and_size unaligned_input_and_output stale_codebook \
    shared_tensor_slices golden_blobs histogram_matches_cpu batch_equals_single argument_errors truncated_blobs_rejected \
    bit_flips_rejected random_garbage_never_faults wrong_expectations_rejected empty_blob_with_trailing_bytes_rejected \
    full_batch_with_small_blobs}
  # the decoder's shared-memory rings and joins, and the encoder's
  sanitize racecheck ${LCT_RACE_TESTS:-golden_blobs every_dtype_kind_and_size stale_codebook full_batch_with_small_blobs}
  san_errors=$(grep -cE '(ERROR|RACECHECK) SUMMARY: [1-9]' "$out/sanitizer.log")
  san_summary=$(grep -aoE '(ERROR|RACECHECK) SUMMARY: [0-9]+ [a-z]+' "$out/sanitizer.log" | sort | uniq -c | tr -s ' ' | paste -sd';')
else
  echo "compute-sanitizer not found" >"$out/sanitizer.log"
fi

# 4. lctd's whole integration suite with the cuda backend.
LCT_TEST_BACKEND=cuda timeout "${LCT_TEST_TIMEOUT:-240}" "$build/bin/test_client" --jobs=1 >"$out/client_cuda.log" 2>&1
client_rc=$?
client_synth=$(grep -ao 'Synthesis:.*' "$out/client_cuda.log" | tail -1)

# 4b. The device path: device-to-device puts and gets through CUDA IPC on the
#     cuda backend, the counted host-path fallback on the cpu one.
timeout "${LCT_TEST_TIMEOUT:-240}" "$build/bin/test_device" --jobs=1 >"$out/device.log" 2>&1
device_rc=$?
device_synth=$(grep -ao 'Synthesis:.*' "$out/device.log" | tail -1)

# 4c. A lost GPU: lctd-faults meets a real illegal address at its third codec call, refuses every
#     request, answers /healthz 503 and exits 3 without a final save; a restart restores the last snapshot.
timeout "${LCT_TEST_TIMEOUT:-240}" "$build/bin/test_faults" --jobs=1 --filter='faults/*' >"$out/faults.log" 2>&1
faults_rc=$?
faults_synth=$(grep -ao 'Synthesis:.*' "$out/faults.log" | tail -1)

# 5. The Python binding and the offloaded AdamW with the machine's torch (CUDA tensors where it sees a GPU).
LCT_LIBRARY=$build/lib/liblct.so LCT_CODEC_LIBRARY=$build/lib/liblct_codec.so LCT_LCTD=$build/bin/lctd LCT_CLI=$build/bin/lct \
  PYTHONUNBUFFERED=1 \
  timeout "${LCT_PY_TIMEOUT:-540}" python3 -m unittest discover -s client/python/tests -v >"$out/python.log" 2>&1
py_rc=$?
py_line=$(grep -aE '^(OK|FAILED)' "$out/python.log" | tail -1)

# 6. lctd's device puts and gets alone (tests/bench/device_put.py; LCT_PUT_BASE: another lctd
#    binary to compare with, in the same run), the optimizer step alone
#    (tests/bench/optim_step.py) and the trainer offload measurement
#    (tests/bench/train_offload.py), unless LCT_SKIP_TRAIN is set; under CUDA MPS where the
#    machine has it (deploy/README.md, "Sharing the GPU with trainers"), unless LCT_MPS=0:
#    without it the trainer's and lctd's kernels take turns on the GPU.
train_rc=skipped step_rc=skipped put_rc=skipped compressed_rc=skipped mps=off
if [[ -z ${LCT_SKIP_TRAIN:-} ]]; then
  if [[ ${LCT_MPS:-1} != 0 ]] && command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/lct-mps-$$ CUDA_MPS_LOG_DIRECTORY=/tmp/lct-mps-$$ # short: a socket path
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" && nvidia-cuda-mps-control -d && mps=on
  fi
  LCT_LIBRARY=$build/lib/liblct.so PYTHONUNBUFFERED=1 timeout "${LCT_TRAIN_TIMEOUT:-480}" \
    python3 tests/bench/device_put.py --lctd "$build/bin/lctd" ${LCT_PUT_BASE:+--lctd "$LCT_PUT_BASE"} \
    --out "$out/put" >"$out/put.log" 2>&1
  put_rc=$?
  LCT_LIBRARY=$build/lib/liblct.so PYTHONUNBUFFERED=1 timeout "${LCT_TRAIN_TIMEOUT:-480}" \
    python3 tests/bench/optim_step.py --lctd "$build/bin/lctd" --out "$out/step" >"$out/step.log" 2>&1
  step_rc=$?
  LCT_LIBRARY=$build/lib/liblct.so PYTHONUNBUFFERED=1 timeout "${LCT_TRAIN_TIMEOUT:-480}" \
    python3 tests/bench/train_offload.py --lctd "$build/bin/lctd" --out "$out/train" >"$out/train.log" 2>&1
  train_rc=$?
  # lct.torch in the training loop (no lctd): the 162M GPT, and the Qwen3-4B-shaped model with its context search.
  LCT_LIBRARY=$build/lib/liblct.so LCT_CODEC_LIBRARY=$build/lib/liblct_codec.so PYTHONUNBUFFERED=1 \
    timeout "${LCT_TRAIN_TIMEOUT:-480}" python3 tests/bench/train_compressed.py --out "$out/compressed" \
    >"$out/compressed.log" 2>&1
  compressed_rc=$?
  [[ $mps == on ]] && echo quit | nvidia-cuda-mps-control
fi

# 7. lct-bench soak on the cuda backend, device ops included: verified load, then SIGKILLs and restarts.
soak_rc=skipped chaos_rc=skipped soak_s=${LCT_SOAK_SECONDS:-120}
if [[ $soak_s != 0 ]]; then
  timeout $((soak_s + 300)) "$build/bin/lct-bench" soak --backend cuda --seconds "$soak_s" --out "$out/soak.json" \
    >"$out/soak.txt" 2>&1
  soak_rc=$?
  timeout $((soak_s + 300)) "$build/bin/lct-bench" soak --backend cuda --seconds "$soak_s" --chaos \
    --out "$out/soak_chaos.json" >"$out/soak_chaos.txt" 2>&1
  chaos_rc=$?
fi

echo "=== GPU: ${gpu:-unknown}"
cat "$out/bench.txt"
echo
grep -aE '\[FAIL\]|\[----\].*(Assertion|Fail|fail|differ|status)|CRASH|signal|Timeout' "$out/ctest.log" | head -40
grep -aE '^========= (Invalid|Error|Program hit)|rc=[1-9]' "$out/sanitizer.log" 2>/dev/null | head -20
echo "=== summary"
printf '%-18s %s\n' "ctest -L gpu" "rc=$ctest_rc ${ctest_line} ${synth}"
printf '%-18s %s\n' "compute-sanitizer" "rc=$san_rc ${san_errors:+tests with errors: $san_errors} ${san_summary:-}"
printf '%-18s %s\n' "lct-bench gpu" "rc=$bench_rc (data: $data)"
printf '%-18s %s\n' "lctd on cuda" "rc=$client_rc ${client_synth}"
printf '%-18s %s\n' "device path" "rc=$device_rc ${device_synth}"
printf '%-18s %s\n' "lost GPU" "rc=$faults_rc ${faults_synth}"
printf '%-18s %s\n' "python + torch" "rc=$py_rc ${py_line}"
printf '%-18s %s\n' "device put/get" "rc=$put_rc mps=$mps"
[[ -f $out/put.log ]] && tail -n +2 "$out/put.log" | sed 's/^/    /'
printf '%-18s %s\n' "optimizer step" "rc=$step_rc mps=$mps"
grep -a -A4 '^ *torch AdamW' "$out/step.log" 2>/dev/null | sed 's/^/    /'
printf '%-18s %s\n' "train offload" "rc=$train_rc mps=$mps"
grep -a -E '^ *(torch AdamW|step ms \(median, interleaved|step time vs)' "$out/train.log" 2>/dev/null | sed 's/^/    /'
printf '%-18s %s\n' "lct.torch training" "rc=$compressed_rc"
grep -a -E '^(gpt162m|qwen3-4b|baseline|lct|longest)' "$out/compressed.log" 2>/dev/null | sed 's/^/    /'
printf '%-18s %s\n' "soak" "rc=$soak_rc"
grep -a -E '^(op |put|get|stat|list|delete|save|verified|lctd)' "$out/soak.txt" 2>/dev/null | sed 's/^/    /'
printf '%-18s %s\n' "soak --chaos" "rc=$chaos_rc"
grep -a -E '^(restarts|verified|lctd stop)' "$out/soak_chaos.txt" 2>/dev/null | sed 's/^/    /'
printf '%-18s %s\n' "results" "$out: $(cd "$out" && ls | paste -sd' ')"
[[ $ctest_rc -eq 0 && $bench_rc -eq 0 && $client_rc -eq 0 && $device_rc -eq 0 && $faults_rc -eq 0 && $py_rc -eq 0 \
   && ( $san_rc == 0 || $san_rc == skipped ) \
   && ( $train_rc == 0 || $train_rc == skipped ) && ( $step_rc == 0 || $step_rc == skipped ) \
   && ( $put_rc == 0 || $put_rc == skipped ) && ( $soak_rc == 0 || $soak_rc == skipped ) \
   && ( $compressed_rc == 0 || $compressed_rc == skipped ) \
   && ( $chaos_rc == 0 || $chaos_rc == skipped ) ]]
