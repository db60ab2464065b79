#!/usr/bin/env bash
# The real-GPU check of issue 10 (docs/gpu.md "On a GPU"): on a machine with an
# NVIDIA GPU, CUDA, Python and PyTorch (but none of memstep's Debian -dev
# packages and no network), builds memstep against the bundle that
# scripts/gpu_bundle.sh made, then runs PyTorch CUDA training loops under
# `memstep run` and checks:
#   1. accounting: at every step end, memstep's live device bytes equal
#      torch.cuda.memory_reserved() plus the planted cuMemAlloc_v2 blocks
#      (default allocator: cudaMalloc; expandable segments: cuMemCreate/VMM);
#   2. the planted device leak (4 MiB/step) is named at its Python line as a
#      tensor_block site (tensor-level attribution inside the caching
#      allocator), with its rate, and the per-step allocated (blocks) bytes
#      equal torch.cuda.memory_allocated() at every step end;
#   3. the planted host leak (1 MiB/step) is named at its Python line;
#   4. a planted OOM leaves a memory snapshot (cause torch_oom);
#   5. overhead: the median step of a 6-layer transformer (200 steps) under
#      memstep is at most 1.03x the median without it (single GPU, no NCCL);
#   6. torch.compile works under memstep: same losses as without, no graph
#      break, steps marked;
# and prints tests/bench/torch_blocks_bench.sh's figures (the tensor-block
# capture cost, PyTorch's own side included).
#
# usage: tests/gpu/real_gpu_check.sh BUNDLE [--build-only] [--python PY]
#   BUNDLE        the prefix scripts/gpu_bundle.sh filled (any path)
#   --build-only  stop after the build (runs without a GPU: what CI checks)
#   --python PY   the Python with PyTorch (default: python3)
# Work files go to ${WORK:-build-gpu-check}; the build to ${BUILD:-build-gpu}.
# Exit status: 0 all checks passed, 1 a check failed, 2 bad usage or set-up.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

bundle= build_only=0 py=python3
while [ $# -gt 0 ]; do
  case "$1" in
    --build-only) build_only=1 ;;
    --python) py=${2:?--python needs a value}; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "real_gpu_check: unknown option $1" >&2; exit 2 ;;
    *) [ -z "$bundle" ] || { echo "real_gpu_check: one BUNDLE only" >&2; exit 2; }; bundle=$1 ;;
  esac
  shift
done
[ -n "$bundle" ] || { echo "usage: $0 BUNDLE [--build-only] [--python PY]" >&2; exit 2; }
[ -f "$bundle/MANIFEST" ] || { echo "real_gpu_check: $bundle is no gpu_bundle.sh prefix" >&2; exit 2; }
bundle=$(cd "$bundle" && pwd)
build=${BUILD:-build-gpu}
work=${WORK:-build-gpu-check}
case $build in /*) ;; *) build=$root/$build ;; esac
case $work in /*) ;; *) work=$root/$work ;; esac
failed=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failed=1; }

# ---- the bundle: .pc files point at it, its libraries on the search path
multi=x86_64-linux-gnu
for pc in "$bundle"/usr/lib/$multi/pkgconfig/*.pc "$bundle"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  # Every path the Debian .pc names starts with /usr: make it the bundle's.
  sed -i -E "s#^([A-Za-z_]+)=(/.*)?/usr(/|\$)#\\1=$bundle/usr\\3#" "$pc"
done
# Only the bundle's .pc files (PKG_CONFIG_LIBDIR replaces the default search
# path): a module missing from the bundle fails here as it would on a machine
# without the -dev packages, instead of being found in the system.
export PKG_CONFIG_LIBDIR="$bundle/usr/lib/$multi/pkgconfig:$bundle/usr/share/pkgconfig"
unset PKG_CONFIG_PATH
# No LD_LIBRARY_PATH: the build records the bundle's library directories in
# the binaries (CMake's build tree RPATH for libraries outside the system
# directories) as DT_RPATH (--disable-new-dtags), which, unlike DT_RUNPATH,
# also serves the libraries' own dependencies (absl's libraries need each
# other, libdw needs libelf); so the profiled Python and PyTorch keep the
# system's own zlib, zstd and lzma.
export PATH="$PATH:$bundle/usr/bin"  # pkg-config and ninja where the system has none
# The bundle's pkgconf, here as on the GPU machine (which may have none); it
# needs the bundle's libpkgconf, given to it alone.
mkdir -p "$build"
pkgconf="$build/bundle-pkgconf"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
  "$bundle/usr/lib/$multi" "$bundle/usr/bin/pkgconf" >"$pkgconf"
chmod +x "$pkgconf"
"$pkgconf" --version >/dev/null || { echo "FAIL: the bundle's pkgconf does not run"; exit 1; }
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

# ---- build (no tests, no benchmarks: they need GoogleTest and Benchmark)
echo "real_gpu_check: building into $build against $bundle"
if ! cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMEMSTEP_BUILD_TESTS=OFF -DMEMSTEP_BUILD_BENCH=OFF \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags \
    -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags \
    -DCMAKE_BUILD_RPATH="$bundle/usr/lib/$multi;$bundle/lib/$multi" \
    -DCMAKE_PREFIX_PATH="$bundle/usr" -DPKG_CONFIG_EXECUTABLE="$pkgconf" >"$build/configure.log" 2>&1; then
  tail -20 "$build/configure.log"; echo "FAIL: configure (log: $build/configure.log)"; exit 1
fi
if ! cmake --build "$build" -j "$(nproc)" --target memstep_preload memstep memstep_python \
    >"$build/build.log" 2>&1; then
  tail -30 "$build/build.log"; echo "FAIL: build (log: $build/build.log)"; exit 1
fi
cli="$build/bin/memstep"
lib="$build/lib/libmemstep.so"
[ -x "$cli" ] && [ -f "$lib" ] || { echo "FAIL: $cli or $lib not built"; exit 1; }
# The dependencies must resolve, and every library the bundle holds must come
# from the bundle, dependencies of dependencies included (ldd resolves them
# as the loader does): the GPU machine has none of them, while this one may
# have them all in the system.
for bin in "$cli" "$lib"; do
  if ldd "$bin" | grep -q "not found"; then
    ldd "$bin" | grep "not found"; echo "FAIL: unresolved libraries of $bin"; exit 1
  fi
  for pair in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1 "=" $3}'); do
    soname=${pair%%=*} path=${pair#*=}
    if [ -e "$bundle/usr/lib/$multi/$soname" ] || [ -e "$bundle/lib/$multi/$soname" ]; then
      case $path in
        "$bundle"/*) ;;
        *) echo "FAIL: $bin loads $soname from $path, not from the bundle"; exit 1 ;;
      esac
    fi
  done
done
"$cli" --version >/dev/null || { echo "FAIL: $cli --version"; exit 1; }
pass "build against the bundle ($(wc -l <"$bundle/MANIFEST") packages): $cli"
[ "$build_only" = 1 ] && exit 0

# ---- the GPU checks
command -v nvidia-smi >/dev/null && nvidia-smi -L
"$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' ||
  { echo "real_gpu_check: $py has no CUDA torch, or no GPU is visible" >&2; exit 2; }
rm -rf "$work" && mkdir -p "$work"
train="$root/tests/gpu/gpu_train.py"
check="$root/tests/gpu/gpu_check_report.py"

run_memstep() {  # name mode steps [env...]: memstep run, then the JSON report
  local name=$1 mode=$2 steps=$3; shift 3
  env "$@" "$cli" run --out "$work/$name" -- "$py" "$train" "$mode" "$work/$name.facts.json" \
    "$steps" >"$work/$name.log" 2>&1 || { fail "$name: the program failed (log $work/$name.log)"; return 1; }
  "$cli" report "$work/$name" --format json >"$work/$name.report.json" 2>"$work/$name.report.err" ||
    { fail "$name: memstep report failed"; return 1; }
  "$cli" report "$work/$name" >"$work/$name.report.txt" 2>&1
}

# 1-3: accounting, tensor blocks, host leak; default allocator and VMM.
for variant in default expandable; do
  conf=
  [ "$variant" = expandable ] && conf=expandable_segments:True
  if run_memstep "leak-$variant" leak 60 PYTORCH_CUDA_ALLOC_CONF="$conf"; then
    "$py" "$check" leak "$work/leak-$variant.facts.json" "$work/leak-$variant.report.json" \
      "$variant" || failed=1
  fi
done
# 4: OOM snapshot.
if run_memstep oom oom 1; then
  "$py" "$check" oom "$work/oom.facts.json" "$work/oom.report.json" || failed=1
fi
# 5: overhead, interleaved runs without and with memstep (the median of each).
for i in 1 2 3; do
  "$py" "$train" bench "$work/bench-plain-$i.json" 200 >"$work/bench-plain-$i.log" 2>&1 ||
    fail "bench without memstep (log $work/bench-plain-$i.log)"
  "$cli" run --out "$work/bench-memstep-$i" -- "$py" "$train" bench "$work/bench-memstep-$i.json" \
    200 >"$work/bench-memstep-$i.log" 2>&1 || fail "bench under memstep (log $work/bench-memstep-$i.log)"
done
"$py" "$check" overhead "$work" 1.03 || failed=1
# 6: torch.compile, without and with memstep.
"$py" "$train" compile "$work/compile-plain.json" 20 >"$work/compile-plain.log" 2>&1 ||
  fail "torch.compile without memstep (log $work/compile-plain.log)"
if run_memstep compile compile 20; then
  "$py" "$check" compile "$work/compile-plain.json" "$work/compile.facts.json" \
    "$work/compile.report.json" || failed=1
fi
# The tensor-block capture cost, PyTorch's side included (docs/benchmarks.md
# "Tensor-block capture cost": save it as tests/bench/torch_blocks_last_run.txt).
if sh "$root/tests/bench/torch_blocks_bench.sh" "$build" "$py" >"$work/torch_blocks_bench.txt" \
    2>&1; then
  cat "$work/torch_blocks_bench.txt"
else
  fail "tests/bench/torch_blocks_bench.sh (log $work/torch_blocks_bench.txt)"
fi

if [ "$failed" = 0 ]; then
  echo "real_gpu_check: every check passed (work files in $work)"
else
  echo "real_gpu_check: FAILED (work files in $work)"
fi
exit "$failed"
