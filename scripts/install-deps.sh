#!/usr/bin/env bash
# Installs the Debian packages hal needs to build and test; does nothing when all are present.
# clang-15 (with libclang-common-15-dev, its libFuzzer, ASan and UBSan runtimes) builds the
# fuzz targets of tests/fuzz; hipcc needs it too. iwyu runs scripts/check-includes.py. chromium
# (headless) renders hal.bench train's HTML report in its test.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libhwloc-dev libboost-dev doctest-dev libtomlplusplus-dev
  libgloo-dev openmpi-bin libopenmpi-dev
  hipcc libamdhip64-dev
  libbenchmark-dev nlohmann-json3-dev
  libssl-dev python3 python3-pip
  iproute2 nftables
  clang-15 iwyu
  chromium
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

"$(dirname "${BASH_SOURCE[0]}")/install-cudnn-frontend.sh"
