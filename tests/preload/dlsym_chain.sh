#!/bin/sh
# memstep's dlsym/dlvsym overrides must honour another interposer of the same
# function (issue 10, item 1): dlsym_chain (dlsym_chain.c) runs with the
# interposer (dlsym_interposer.c) alone, after memstep and before it, once
# for dlsym and once for dlvsym; each run must print "dlsym chain ok".
# With BEHAVIOR (preload_behavior.cc), its exec case runs with the dlsym
# interposer before memstep: memstep's exec/_exit hooks must find the real
# functions, not themselves (that hung).
# usage: dlsym_chain.sh LIB PROG DLSYM_INTERPOSER DLVSYM_INTERPOSER WORKDIR [BEHAVIOR]
set -u
export MEMSTEP_SEED="${MEMSTEP_SEED:-1}"  # samples from a fixed seed, never from the clock
LIB=$1; PROG=$2; DLSYM=$3; DLVSYM=$4; WORK=$5; BEHAVIOR=${6:-}
rm -rf "$WORK"; mkdir -p "$WORK"
unset LD_PRELOAD MEMSTEP_DISABLE
export MEMSTEP_DIR="$WORK/out" MEMSTEP_FLUSH_MS=20
status=0
one() {  # NAME MODE PRELOAD
  timeout 60 env LD_PRELOAD="$3" "$PROG" "$2" >"$WORK/$1.out" 2>"$WORK/$1.err"
  rc=$?
  if [ $rc -eq 0 ] && grep -q "dlsym chain ok" "$WORK/$1.out"; then
    echo "ok: $1"
  else
    echo "FAIL: $1 (exit $rc)"; tail -c 2000 "$WORK/$1.err"; status=1
  fi
}
for mode in dlsym dlvsym; do
  if [ $mode = dlsym ]; then I=$DLSYM; else I=$DLVSYM; fi
  one "$mode.alone" $mode "$I"
  one "$mode.memstep-first" $mode "$LIB:$I"
  one "$mode.interposer-first" $mode "$I:$LIB"
done
if [ -n "$BEHAVIOR" ]; then
  timeout -k 5 60 env LD_PRELOAD="$DLSYM:$LIB" "$BEHAVIOR" exec >"$WORK/exec.out" 2>"$WORK/exec.err"
  rc=$?
  if [ $rc -eq 0 ] && grep -q "basic ok" "$WORK/exec.out"; then
    echo "ok: exec.interposer-first"
  else
    echo "FAIL: exec.interposer-first (exit $rc)"; tail -c 2000 "$WORK/exec.err"; status=1
  fi
fi
exit $status
