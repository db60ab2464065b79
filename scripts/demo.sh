#!/usr/bin/env bash
# Quick start, part 1: install dependencies, build, profile the bundled example
# training program (examples/train_loop.cc, with a planted leak) and print the report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD_QUIET=1 scripts/build.sh
out=$(mktemp -d /tmp/memstep-demo.XXXXXX)
build/bin/memstep run --out "$out" -- build/bin/memstep_example_train
build/bin/memstep report "$out"
