#!/usr/bin/env bash
# Quick start, part 2: install dependencies, build, and run the whole test suite
# (unit, preload, end-to-end, benchmark smoke), then the offline side's unit,
# end-to-end and preload-driving tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer (the injected library itself is never sanitized).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 300
if [ "${MEMSTEP_SKIP_SANITIZERS:-0}" != 1 ]; then
  BUILD_DIR=build-asan scripts/build.sh -DMEMSTEP_SANITIZE=address,undefined -DMEMSTEP_BUILD_BENCH=OFF
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)" --timeout 300 -L 'unit|e2e|preload'
fi
