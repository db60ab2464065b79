#!/bin/sh
# The online device-peak alert (planted facts: tests/preload/cuda_alert.cc):
# through MEMSTEP_ALERT_DEVICE_PEAK and through `memstep run
# --alert-device-peak`, exactly two alerts (steps 3 and 6, 48 MiB > 40 MiB)
# on stderr and as ALERT records; none at a threshold equal to the peak.
# usage: cuda_alert.sh LIB APP MEMSTEP FAKEDRV_DIR WORK
set -u
export MEMSTEP_SEED="${MEMSTEP_SEED:-1}"  # samples from a fixed seed, never from the clock
LIB=$1; APP=$2; CLI=$3; DRV=$4; WORK=$5
rm -rf "$WORK"; mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
unset LD_PRELOAD MEMSTEP_DIR MEMSTEP_OUT MEMSTEP_ALERT_PEAK MEMSTEP_ALERT_GROWTH MEMSTEP_ALERT_STAGE_PEAK
export LD_LIBRARY_PATH="$DRV" MEMSTEP_FLUSH_MS=20 MEMSTEP_LIB="$LIB"

run() {  # NAME CMD...: stdout/stderr in $WORK/NAME.{out,err}
  name=$1; shift
  timeout 60 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  rc=$?
  [ $rc -eq 124 ] && fail "$name: timeout (deadlock?)"
  [ $rc -eq 0 ] || { cat "$WORK/$name.err"; fail "$name: exit status $rc"; }
  grep -q "cuda_alert done" "$WORK/$name.out" || fail "$name: the program did not finish"
}

expect_two() {  # NAME RUN_DIR
  grep 'ALERT' "$WORK/$1.err" >"$WORK/$1.alerts"
  printf '%s\n' 'memstep: ALERT device-peak: 48.00 MiB > 40.00 MiB at step 3' \
    'memstep: ALERT device-peak: 48.00 MiB > 40.00 MiB at step 6' >"$WORK/want"
  cmp -s "$WORK/want" "$WORK/$1.alerts" || { diff "$WORK/want" "$WORK/$1.alerts"; fail "$1: alert lines"; }
  "$CLI" report --format json --no-symbolize "$2" >"$WORK/$1.json" || fail "$1: memstep report"
  for step in 3 6; do
    grep -Eq "\"step\":$step,\"time_s\":[-+.0-9eE]+,\"rule\":\"device_peak\",\"value\":50331648,\"threshold\":41943040" \
      "$WORK/$1.json" || fail "$1: no ALERT record for step $step in the trace"
  done
  n=$(grep -o '"rule":"device_peak"' "$WORK/$1.json" | wc -l)
  [ "$n" -eq 2 ] || fail "$1: $n device_peak ALERT records, want 2"
}

run env env LD_PRELOAD="$LIB" MEMSTEP_DIR="$WORK/env-run" MEMSTEP_WARMUP=1 \
  MEMSTEP_ALERT_DEVICE_PEAK=40MiB "$APP"
expect_two env "$WORK/env-run"

run cli "$CLI" run --out "$WORK/cli-run" --warmup 1 --alert-device-peak 40MiB --no-python-hooks \
  -- "$APP"
expect_two cli "$WORK/cli-run"

# A threshold equal to the peak is not exceeded.
run equal env LD_PRELOAD="$LIB" MEMSTEP_DIR="$WORK/equal-run" MEMSTEP_WARMUP=1 \
  MEMSTEP_ALERT_DEVICE_PEAK=48MiB "$APP"
! grep -q ALERT "$WORK/equal.err" || fail "equal: an alert at a threshold equal to the peak"

# Invalid values are usage errors of memstep run.
"$CLI" run --out "$WORK/bad" --alert-device-peak 12Q -- true 2>"$WORK/bad.err" && fail "12Q accepted"
grep -q -- "--alert-device-peak / MEMSTEP_ALERT_DEVICE_PEAK" "$WORK/bad.err" || fail "bad value message"
echo PASS
