#!/usr/bin/env bash
# Quick start, part 2: install dependencies, check the formatting, build, and run the whole test suite
# (unit, preload, end-to-end, benchmark smoke), the libFuzzer targets for a
# bounded time (scripts/fuzz.sh), then the offline side's unit,
# end-to-end and preload-driving tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer (the injected library itself is never sanitized).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Every C and C++ file is formatted by .clang-format (fails fast, before the build).
scripts/check_format.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 300
# The libFuzzer targets (reader, parsers) for a bounded time over real traces.
scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
if [ "${MEMSTEP_SKIP_SANITIZERS:-0}" != 1 ]; then
  BUILD_DIR=build-asan scripts/build.sh -DMEMSTEP_SANITIZE=address,undefined -DMEMSTEP_BUILD_BENCH=OFF
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)" --timeout 300 -L 'unit|e2e|preload'
fi
