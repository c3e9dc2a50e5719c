#!/usr/bin/env bash
# run.sh — from a fresh checkout: install the build and run dependencies (no test packages: tests that
# need them are left out of the build), build, then start lctd with its
# embedded defaults (cpu backend when no GPU) and run the demo against it.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target lctd lct >/dev/null
exec deploy/demo.sh build
