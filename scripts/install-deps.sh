#!/usr/bin/env bash
# Installs the Debian 12 packages memstep needs to build, test and benchmark
# (xz-utils: the MiniDebugInfo test of tests/symbolize compresses a
# .gnu_debugdata section; python3-dev: the CPython 3.11 headers the Python-frames layout test checks;
# libpython3.11-testsuite, python3-numpy, python3-pytest, python3-hypothesis:
# the outside test suites of tests/suites/; clang-14, libclang-rt-14-dev: the
# libFuzzer targets scripts/fuzz.sh builds and runs).
# Idempotent: does nothing (no network) when everything is already installed.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config binutils xz-utils
  libunwind-dev libabsl-dev libzstd-dev libdw-dev libelf-dev
  libgtest-dev libgmock-dev libbenchmark-dev libjemalloc-dev
  heaptrack python3 python3-torch python3-dev
  libpython3.11-testsuite python3-numpy python3-pytest python3-hypothesis
  clang-14 libclang-rt-14-dev
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "memstep: installing Debian packages: ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
