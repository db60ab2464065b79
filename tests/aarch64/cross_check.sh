#!/bin/bash
# Cross-builds libmemstep.so and its tests for aarch64 (GH200's Grace) on a
# Debian x86-64 host and runs them under qemu-user. Local, not CI: it installs
# packages (root) and takes minutes. Prints PASS, FAIL or SKIP per check and
# exits 1 if any check failed.
#
# usage: tests/aarch64/cross_check.sh [BUILD_DIR]   (default build-aarch64)
#   X86_BUILD=build   the x86-64 build whose trace checker reads the traces
#                     the aarch64 library writes (built here if missing)
#   NO_INSTALL=1      do not apt-get anything
set -u
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=${1:-build-aarch64}
X86_BUILD=${X86_BUILD:-build}
SYSROOT=/usr/aarch64-linux-gnu
export QEMU_LD_PREFIX=$SYSROOT
status=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; status=1; }
skip() { echo "SKIP: $*"; }

# ---- packages: the cross compiler, qemu-user and the arm64 -dev packages
# (multiarch; all of them co-install with the amd64 ones on Debian 12) ----
PKGS="g++-aarch64-linux-gnu qemu-user libunwind-dev:arm64 libzstd-dev:arm64 libdw-dev:arm64
      libabsl-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  if [ "${NO_INSTALL:-0}" = 1 ]; then echo "missing packages:$missing"; exit 2; fi
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing \
    >/dev/null || { echo "cannot install:$missing"; exit 2; }
fi

# ---- build ----
TARGETS="memstep_preload memstep_preload_units_test memstep_addr_map_test
         memstep_pylinetable_test memstep_preload_behavior memstep_test_dso
         memstep_runpath_main memstep_dlsym_chain memstep_dlsym_interposer
         memstep_dlvsym_interposer"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" -DMEMSTEP_BUILD_BENCH=OFF \
  >/dev/null || { fail "configure"; exit 1; }
# shellcheck disable=SC2086
if cmake --build "$BUILD" -j "$(nproc)" --target $TARGETS -- --quiet; then
  pass "cross build: $TARGETS"
else
  fail "cross build"; exit 1
fi
if [ ! -x "$X86_BUILD/bin/memstep_trace_check" ]; then
  BUILD_DIR=$X86_BUILD BUILD_QUIET=1 scripts/build.sh || { fail "x86-64 build"; exit 1; }
fi
LIB=$ROOT/$BUILD/lib/libmemstep.so
CHECK=$ROOT/$X86_BUILD/bin/memstep_trace_check
WORK=$ROOT/$BUILD/cross-work
rm -rf "$WORK"; mkdir -p "$WORK/bin" "$WORK/nm"

# Programs the scripts start as `env LD_PRELOAD=LIB PROG` run through
# qemu_exec (tests/aarch64/qemu_exec.c): PROG is the static host wrapper,
# PROG.aarch64 the program.
gcc -static -O2 -o "$WORK/qemu_exec" tests/aarch64/qemu_exec.c || { fail "qemu_exec"; exit 1; }
for p in memstep_preload_behavior memstep_runpath_main memstep_dlsym_chain; do
  cp "$BUILD/bin/$p" "$WORK/bin/$p.aarch64"; cp "$WORK/qemu_exec" "$WORK/bin/$p"
done
# Every run is killed after T seconds (qemu does not always pass SIGTERM on).
run_q() {  # SECONDS PROG ARGS...
  local t=$1; shift
  timeout -s KILL "$t" "$@"
}

# ---- the library's exports and imports (tests/preload/check_symbols.sh with
# the cross nm) ----
ln -sf "$(command -v aarch64-linux-gnu-nm)" "$WORK/nm/nm"
if PATH="$WORK/nm:$PATH" sh tests/preload/check_symbols.sh "$LIB" >"$WORK/symbols.log" 2>&1; then
  pass "symbols: exports, DT_NEEDED, no C++ runtime (check_symbols.sh)"
else
  fail "symbols"; cat "$WORK/symbols.log"
fi
if aarch64-linux-gnu-objdump -d "$LIB" | grep -q '<dlopen>:' &&
   aarch64-linux-gnu-nm -D "$LIB" | grep -Eq ' T (dlsym|dlvsym)$'; then
  pass "trampolines: dlopen, dlsym, dlvsym defined"
else
  fail "trampolines missing"
fi

# ---- unit tests under qemu-aarch64. Multi-threaded guest programs hang
# under Debian 12's qemu 7.2 on this host (a four-thread atomic counter with
# no memstep code does), so the tests that start threads are listed apart. ----
THREADED='*Concurrent*:*ForkLockProtocol:GlibcChunkTest.MatchesMallocUsableSize'
for t in memstep_preload_units_test memstep_addr_map_test memstep_pylinetable_test; do
  if run_q 180 qemu-aarch64 "$BUILD/bin/$t" --gtest_filter="-$THREADED" >"$WORK/$t.log" 2>&1; then
    pass "$t (qemu-aarch64): $(grep -c '^\[       OK' "$WORK/$t.log") tests"
  else
    fail "$t (qemu-aarch64)"; tail -20 "$WORK/$t.log"
  fi
done
if [ "${THREADED_TESTS:-0}" = 1 ]; then
  for t in memstep_preload_units_test memstep_addr_map_test; do
    if run_q 300 qemu-aarch64 "$BUILD/bin/$t" --gtest_filter="$THREADED" >"$WORK/$t.mt.log" 2>&1
    then pass "$t threaded tests"; else fail "$t threaded tests"; fi
  done
else
  skip "threaded unit tests (THREADED_TESTS=1 runs them; they hang under qemu 7.2 here)"
fi

# ---- the library preloaded into aarch64 programs, forwarding only
# (MEMSTEP_DISABLE=1: no writer thread, single-threaded guests) ----
RP=$ROOT/$BUILD/tests/preload/runpath
if MEMSTEP_DISABLE=1 run_q 120 env LD_PRELOAD="$LIB" "$WORK/bin/memstep_runpath_main" \
     "$RP/libms_rpa.so" "$RP/libms_rpb.so" >"$WORK/runpath.out" 2>&1 &&
   grep -q "runpath ok" "$WORK/runpath.out"; then
  pass "dlopen RUNPATH: bare-name dlopen resolves against the caller's RUNPATH through the aarch64 trampoline (runpath_main.c)"
else
  fail "dlopen RUNPATH"; cat "$WORK/runpath.out"
fi
DS=$ROOT/$BUILD/lib/libmemstep_dlsym_interposer.so
DV=$ROOT/$BUILD/lib/libmemstep_dlvsym_interposer.so
for mode in dlsym dlvsym; do
  if [ $mode = dlsym ]; then I=$DS; else I=$DV; fi
  for order in "$LIB:$I" "$I:$LIB"; do
    if MEMSTEP_DISABLE=1 run_q 120 env LD_PRELOAD="$order" "$WORK/bin/memstep_dlsym_chain" $mode \
         >"$WORK/chain.out" 2>&1 && grep -q "dlsym chain ok" "$WORK/chain.out"; then
      pass "$mode chain, LD_PRELOAD=$(basename "${order%%:*}") first (dlsym_chain.c)"
    else
      fail "$mode chain, LD_PRELOAD=$(basename "${order%%:*}") first"; cat "$WORK/chain.out"
    fi
  done
done
if MEMSTEP_DISABLE=1 run_q 120 env LD_PRELOAD="$LIB" "$WORK/bin/memstep_preload_behavior" basic \
     >"$WORK/basic-disabled.out" 2>&1 && grep -q "basic ok" "$WORK/basic-disabled.out"; then
  pass "hooks forward: preload_behavior basic with MEMSTEP_DISABLE=1 (return values, errno, usable sizes)"
else
  fail "preload_behavior basic, MEMSTEP_DISABLE=1"; tail -5 "$WORK/basic-disabled.out"
fi

# ---- recording: a trace written by the aarch64 library, read back by the
# x86-64 checker (the format is little-endian on both) ----
rm -rf "$WORK/out"
MEMSTEP_DIR=$WORK/out MEMSTEP_FLUSH_MS=50 run_q "${RECORD_SECONDS:-120}" env LD_PRELOAD="$LIB" \
  "$WORK/bin/memstep_preload_behavior" basic >"$WORK/basic.out" 2>&1
rc=$?
trace=$(ls "$WORK"/out/memstep.*.trace 2>/dev/null | head -1)
if [ -n "$trace" ] && "$CHECK" "$trace" >"$WORK/header.log" 2>&1; then
  pass "trace header written on aarch64 reads back on x86-64 (memstep_trace_check)"
else
  fail "trace header"; cat "$WORK/header.log" 2>/dev/null
fi
if [ $rc -eq 0 ] && grep -q "basic ok" "$WORK/basic.out" &&
   "$CHECK" "$trace" --expect-trailer --min-allocs 100 >"$WORK/trace.log" 2>&1; then
  pass "recording: preload_behavior basic, complete trace read back on x86-64 ($(cat "$WORK/trace.log"))"
else
  fail "recording: preload_behavior basic (exit $rc; the writer thread makes it a multi-threaded guest)"
fi

exit $status
