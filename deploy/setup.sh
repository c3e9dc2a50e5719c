#!/usr/bin/env bash
# setup.sh [--test] — installs the Debian/Ubuntu packages LCT builds and runs with; --test adds those its tests need.
set -euo pipefail
# Build and run: compiler and CMake, lctd's and liblct's libraries (libsodium: the challenge-response), the
# benchmarks' zstd, the Python binding.
pkgs=(build-essential cmake pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler libnanomsg-dev
      libsodium-dev libzstd-dev python3 python3-numpy)
case "${1:-}" in
  "") ;;
  # Criterion for the C tests, systemd-analyze to verify the units, promtool to check /metrics,
  # redis-server for the service benchmark's comparison, clang and its libFuzzer for the fuzz smoke run,
  # torch (CPU) for lct.torch's tests, PyYAML to check the Kubernetes manifests.
  --test) pkgs+=(libcriterion-dev systemd prometheus redis-server clang libclang-rt-dev python3-torch python3-yaml) ;;
  *) echo "usage: deploy/setup.sh [--test]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
