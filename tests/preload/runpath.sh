#!/bin/sh
# An interposed dlopen must keep the caller's RUNPATH (issue 10, item 2):
# runpath_main (runpath_main.c) alone, then under libmemstep.so (every
# allocation sampled, so the hooks record inside the loader), must print
# "runpath ok". The trace must hold a MAPPING of libms_depd.so, which the
# program loads and unloads at once: with a 60 s flush period no writer cycle
# sees it, only the refresh made before the dlclose.
# usage: runpath.sh LIB PROG TRACE_CHECK LIBDIR WORKDIR
set -u
export MEMSTEP_SEED="${MEMSTEP_SEED:-1}"  # samples from a fixed seed, never from the clock
LIB=$1; PROG=$2; CHECK=$3; DIR=$4; WORK=$5
rm -rf "$WORK"; mkdir -p "$WORK"
unset LD_PRELOAD LD_LIBRARY_PATH MEMSTEP_DISABLE
fail() { echo "FAIL: $*"; exit 1; }
run() {  # NAME PRELOAD
  timeout 60 env LD_PRELOAD="$2" "$PROG" "$DIR/libms_rpa.so" "$DIR/libms_rpb.so" \
    >"$WORK/$1.out" 2>"$WORK/$1.err"
  rc=$?
  tail -c 2000 "$WORK/$1.err" >&2
  [ $rc -eq 124 ] && fail "$1: timeout (deadlock?)"
  [ $rc -eq 0 ] || fail "$1: exit status $rc"
  grep -q "runpath ok" "$WORK/$1.out" || fail "$1: no 'runpath ok'"
  echo "ok: $1"
}
run plain ""
MEMSTEP_DIR="$WORK/out" MEMSTEP_FLUSH_MS=60000 MEMSTEP_SAMPLE_INTERVAL=1 run memstep "$LIB"
trace=$(ls "$WORK"/out/memstep.*.trace 2>/dev/null | head -1)
[ -n "$trace" ] || fail "no trace written"
"$CHECK" "$trace" --expect-trailer --min-allocs 4 --min-mappings 3 || fail "trace check"
"$CHECK" "$trace" --dump | grep -q '^MAPPING .*/libms_depd\.so$' \
  || fail "no MAPPING record of libms_depd.so (loaded and unloaded between writer cycles)"
