#!/usr/bin/env bash
# Configures and builds memstep into ${BUILD_DIR:-build} (RelWithDebInfo).
# Extra arguments are passed to cmake's configure step. BUILD_QUIET=1 hides
# the per-file progress lines (compiler warnings and errors still show).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
if [ "${BUILD_QUIET:-0}" = 1 ]; then
  echo "memstep: building into $build ..." >&2
  cmake --build "$build" -j "$(nproc)" -- --quiet
else
  cmake --build "$build" -j "$(nproc)"
fi
