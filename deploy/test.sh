#!/usr/bin/env bash
# test.sh — from a fresh checkout: install the build and test dependencies, build (CUDA sources too when nvcc
# is present), run every test, then run them again under AddressSanitizer + UBSan, then each fuzz target for
# seconds from its seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
deploy/setup.sh --test
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure
cmake -S . -B build-asan -DLCT_SANITIZE=ON -DLCT_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure
tests/fuzz/smoke.sh build-fuzz
echo "all tests passed"
