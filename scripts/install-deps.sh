#!/usr/bin/env bash
# Installs the Debian 12 packages memstep needs to build, test and benchmark
# (xz-utils: the MiniDebugInfo test of tests/symbolize compresses a
# .gnu_debugdata section; python3-dev: the CPython 3.11 headers the Python-frames layout test checks;
# libpython3.11-testsuite, python3-numpy, python3-pytest, python3-hypothesis:
# the outside test suites of tests/suites/; clang-14, libclang-rt-14-dev: the
# libFuzzer targets scripts/fuzz.sh builds and runs; clang-format-14:
# scripts/check_format.sh; golang-go: `go tool pprof`
# reads the pprof export in tests/unit/export_cli_test.py; chromium: headless,
# opens the HTML report in tests/unit/html_browser_test.py; tmux: the real
# terminal `memstep top` is tested in, tests/e2e/live_test.py; prometheus:
# its promtool checks the alerting rules of docs/monitoring.md and a real
# --metrics-file output, tests/e2e/promtool_test.py).
# Idempotent: does nothing (no network) when everything is already installed.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config binutils xz-utils
  libunwind-dev libabsl-dev libzstd-dev libdw-dev libelf-dev
  libgtest-dev libgmock-dev libbenchmark-dev libjemalloc-dev
  heaptrack python3 python3-torch python3-dev
  libpython3.11-testsuite python3-numpy python3-pytest python3-hypothesis
  clang-14 libclang-rt-14-dev clang-format-14 golang-go chromium tmux prometheus
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  echo "memstep: installing Debian packages: ${missing[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
  else
    SUDO=
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The pip torch (2.x, CPU) for the `python3` on PATH: the torch.compile tests
# (tests/python/torch_compile_test.py); Debian's python3-torch is 1.13, which
# has no torch.compile. Never into Debian's own python3.
pip_python=$(command -v python3)
if [ "$pip_python" != /usr/bin/python3 ] &&
   ! "$pip_python" -c 'import torch, sys; sys.exit(not hasattr(torch, "compile"))' 2>/dev/null; then
  echo "memstep: installing the pip torch (CPU) for $pip_python" >&2
  # Exactly 2.13.0: these machines keep that CPU wheel locally; a range
  # could pull a newer release with gigabytes of CUDA packages.
  "$pip_python" -m pip install --quiet "torch==2.13.0"
fi
