#!/usr/bin/env bash
# Prepares what the lent GPU machine needs for tests/gpu/real_gpu_check.sh and
# checks it here: the machine has Python 3.12, torch 2.11 with CUDA 13, nvcc
# and CMake, but no network and no Debian -dev packages, so these travel as
# .deb files unpacked into a prefix inside the repository, under a git-ignored
# path, which the device tool carries (`carry`, 64 MiB at most in all).
#
# usage: tests/gpu/prepare_carry.sh [--no-build]
#   1. scripts/gpu_bundle.sh build-gpu-bundle (apt-get download + dpkg -x; kept
#      when its MANIFEST is already there);
#   2. checks that the bundle is git-ignored and under the carry limit;
#   3. unless --no-build: tests/gpu/real_gpu_check.sh build-gpu-bundle
#      --build-only here: configures and builds memstep against the bundle
#      alone (only the bundle's .pc files; every library the bundle holds
#      loaded from it), as the GPU machine will;
#   4. prints the device tool calls that run the check there.
# Exit status: 0 ready, 1 a step failed, 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/../.."
bundle=build-gpu-bundle
build=1
case "${1:-}" in
  "") ;;
  --no-build) build=0 ;;
  *) echo "usage: $0 [--no-build]" >&2; exit 2 ;;
esac
if [ ! -f "$bundle/MANIFEST" ]; then
  scripts/gpu_bundle.sh "$bundle" || { echo "prepare_carry: the bundle failed" >&2; exit 1; }
fi
git check-ignore -q "$bundle" || { echo "prepare_carry: $bundle is not git-ignored" >&2; exit 1; }
# All of it travels (the .debs in debs/ too): the carry limit is 64 MiB.
size_kib=$(du -sk "$bundle" | cut -f1)
[ "$size_kib" -lt $((60 * 1024)) ] ||
  { echo "prepare_carry: $bundle is $size_kib KiB, over the carry limit" >&2; exit 1; }
echo "prepare_carry: $bundle ready ($(wc -l <"$bundle/MANIFEST") packages, $size_kib KiB)"
if [ "$build" = 1 ]; then
  BUILD=build-gpu tests/gpu/real_gpu_check.sh "$bundle" --build-only || exit 1
fi
cat <<'CMD'
On the lent GPU machine (device tool `run`, repository root; carry ["build-gpu-bundle"]):
  1. build (kept there while the machine stays warm):
       tests/gpu/real_gpu_check.sh build-gpu-bundle --build-only
  2. the checks (incremental build, then the GPU runs; timeout_s 600):
       tests/gpu/real_gpu_check.sh build-gpu-bundle --python python3 \
         && cp -r build-gpu-check "$OUT/"
     or, to keep the work files even when a check fails:
       tests/gpu/real_gpu_check.sh build-gpu-bundle --python python3; rc=$?; \
         cp -r build-gpu-check "$OUT/" 2>/dev/null; exit $rc
CMD
