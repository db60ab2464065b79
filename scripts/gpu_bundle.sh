#!/usr/bin/env bash
# Builds the dependency bundle for tests/gpu/real_gpu_check.sh: the Debian 12
# -dev packages memstep builds against (and their runtime libraries, pkgconf
# and ninja), downloaded with `apt-get download` and unpacked with `dpkg -x`
# into PREFIX. Copy PREFIX (any path) to a GPU machine that has cmake, a C++
# compiler, CUDA and PyTorch but none of these packages and no network, and
# run `tests/gpu/real_gpu_check.sh PREFIX` there.
#
# usage: scripts/gpu_bundle.sh PREFIX
# Needs: apt-get (with network, or the packages in its cache) and dpkg.
# PREFIX/MANIFEST lists the packages and versions; PREFIX/debs keeps the .debs.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
prefix=$1
command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  { echo "gpu_bundle: needs apt-get and dpkg (Debian/Ubuntu)" >&2; exit 1; }
# What cmake/MemstepDeps.cmake finds (tests and benchmarks are not built on
# the GPU machine, so no GoogleTest or Google Benchmark), the shared
# libraries those link to, pkg-config (pkgconf) and ninja.
pkgs=(
  libunwind-dev libunwind8 liblzma-dev liblzma5
  libabsl-dev libabsl20220623
  libzstd-dev libzstd1
  libdw-dev libdw1 libelf-dev libelf1 zlib1g-dev zlib1g libbz2-1.0
  pkgconf pkgconf-bin libpkgconf3
  ninja-build
)
mkdir -p "$prefix/debs"
prefix=$(cd "$prefix" && pwd)
(cd "$prefix/debs" && apt-get download "${pkgs[@]}" 2>&1 >/dev/null | { grep -v "^W: Download is performed unsandboxed" >&2 || true; }; exit "${PIPESTATUS[0]}") ||
  { echo "gpu_bundle: apt-get download failed (run apt-get update?)" >&2; exit 1; }
: >"$prefix/MANIFEST"
for deb in "$prefix"/debs/*.deb; do
  dpkg -x "$deb" "$prefix"
  dpkg-deb -f "$deb" Package Version Architecture | paste -sd' ' >>"$prefix/MANIFEST"
done
# The .pc files name /usr; real_gpu_check.sh points them at wherever the
# bundle lies (it rewrites their prefix= line), so the bundle can move.
n=$(wc -l <"$prefix/MANIFEST")
[ "$n" -eq "${#pkgs[@]}" ] || { echo "gpu_bundle: $n of ${#pkgs[@]} packages unpacked" >&2; exit 1; }
for f in usr/include/x86_64-linux-gnu/libunwind.h usr/include/zstd.h usr/include/elfutils/libdw.h \
         usr/lib/x86_64-linux-gnu/cmake/absl/abslConfig.cmake usr/bin/pkgconf usr/bin/ninja; do
  [ -e "$prefix/$f" ] || { echo "gpu_bundle: $f missing from the bundle" >&2; exit 1; }
done
echo "gpu_bundle: $n packages in $prefix ($(du -sh "$prefix" | cut -f1))"
