#!/usr/bin/env bash
# setup.sh — installs the Debian/Ubuntu packages LCT builds and tests with (skips what is present).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler libnanomsg-dev
      libcriterion-dev libzstd-dev python3 python3-numpy redis-server
      systemd prometheus) # systemd-analyze verifies the unit; promtool checks /metrics
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
