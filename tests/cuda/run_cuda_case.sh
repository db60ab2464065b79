#!/bin/sh
# Runs one tests/cuda program and checks what it planted.
# usage: run_cuda_case.sh MODE VIA WORK CHECK DRVDIR MEMSTEP APP [PRELOAD]
#   MODE     plain            the program alone: its own checks, then its facts
#                             against the fakes' log (tests the fakes)
#            memstep          under `memstep run`: the program's checks, then its
#                             facts against the fakes' log and the trace
#            nodriver-plain   no libcuda.so.1 anywhere: the program records every
#                             result (it checks they are all 35)
#            nodriver-memstep the same under memstep: results identical to a
#                             plain run, no device records in the trace
#            report-gate      under memstep, then `memstep report --fail-on
#                             'device_peak > X'` at and below the planted peak
#            report-share     under memstep (app_share), then the pool events and
#                             multicast objects of `memstep report`, text and JSON
#            mutate           like memstep with app_dyn, then each mutation of
#                             its facts or of the log must make cuda_check fail
#                             with the matching message (the checker can fail)
#            realrt-fakedrv   the REAL libcudart with the fake driver: the real
#                             runtime's ~440 cuGetProcAddress lookups, then its
#                             failure at cuGetExportTable (801); under memstep
#                             every result and every lookup the driver sees
#                             must be the same as in a plain run
#   VIA      FAKECUDA_RT_VIA_DRIVER (0 or 1)
#   DRVDIR   directory holding the fake libcuda.so.1 (- for none)
#   MEMSTEP  the memstep CLI (- in the plain modes)
#   PRELOAD  an extra LD_PRELOAD library (the second interposer), optional
# Exit status: 0 pass, 1 fail (the nodriver modes fail where a libcuda.so.1 is
# installed; CMakeLists.txt does not register them there).
set -u
export MEMSTEP_SEED="${MEMSTEP_SEED:-1}"  # samples from a fixed seed, never from the clock
MODE=$1; VIA=$2; WORK=$3; CHECK=$4; DRV=$5; CLI=$6; APP=$7; shift 7
PRE=${1:-}
rm -rf "$WORK"; mkdir -p "$WORK/facts"
fail() { echo "FAIL: $*"; exit 1; }

# A clean environment: nothing inherited that changes how the program loads.
unset LD_PRELOAD LD_LIBRARY_PATH MEMSTEP_OUT MEMSTEP_DIR MEMSTEP_LIB MEMSTEP_DISABLE \
      MEMSTEP_SAMPLE_INTERVAL NVTX_INJECTION64_PATH FAKECUDA_MEM_LIMIT FAKECUDA_FAIL_CALL \
      FAKECUDA_FAIL_ERR FAKECUDA_DEVICES
export FAKECUDA_LOG="$WORK/fake.log" FAKECUDA_RT_VIA_DRIVER="$VIA"
# The planted-fact checks want every device allocation's stack: each one is
# sampled (docs/gpu.md "Sampling"; sampling itself: cuda.sampling).
export MEMSTEP_DEVICE_SAMPLE_INTERVAL="${CUDA_CASE_DEVICE_INTERVAL:-1}"
[ "$DRV" != - ] && export LD_LIBRARY_PATH="$DRV"

# run ARGS...: with a deadline and PRELOAD; output in $WORK/out, exit status
# in $rc. PRELOAD is set only here: cuda_check may be sanitized, and ASan
# insists on coming first in the library list; the memstep CLI (sanitized
# too in those builds) passes LD_PRELOAD on to the program, so it is told that
# this order is fine (the extra library does not interpose malloc).
run() {
  if [ -n "$PRE" ]; then
    LD_PRELOAD="$PRE" ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}verify_asan_link_order=0" \
      timeout 60 "$@" >"$WORK/out" 2>&1
  else
    timeout 60 "$@" >"$WORK/out" 2>&1
  fi
  rc=$?
  tail -c 3000 "$WORK/out"
  [ $rc -eq 124 ] && fail "timeout (deadlock?)"
}

case "$MODE" in
  plain)
    run "$APP" "$WORK/facts"
    [ $rc -eq 0 ] || fail "the program failed (exit $rc)"
    "$CHECK" --facts "$WORK/facts" --log "$WORK/fake.log" || fail "facts vs. log"
    ;;
  memstep)
    run "$CLI" run --out "$WORK/run" -- "$APP" "$WORK/facts"
    [ $rc -eq 0 ] || fail "the program failed under memstep (exit $rc)"
    "$CHECK" --facts "$WORK/facts" --log "$WORK/fake.log" --run-dir "$WORK/run" \
      || fail "facts vs. log vs. trace"
    ;;
  nodriver-plain)  # registered only where no libcuda.so.1 is installed (CMakeLists.txt)
    run "$APP" "$WORK/plain.txt"
    [ $rc -eq 77 ] && fail "a libcuda.so.1 is installed: the premise of this test is gone"
    [ $rc -eq 0 ] || fail "the program failed (exit $rc)"
    ;;
  nodriver-memstep)
    run "$APP" "$WORK/plain.txt"
    [ $rc -eq 77 ] && fail "a libcuda.so.1 is installed: the premise of this test is gone"
    [ $rc -eq 0 ] || fail "the program failed (exit $rc)"
    run "$CLI" run --out "$WORK/run" -- "$APP" "$WORK/memstep.txt"
    [ $rc -eq 0 ] || fail "the program failed under memstep (exit $rc)"
    cmp "$WORK/plain.txt" "$WORK/memstep.txt" \
      || { diff "$WORK/plain.txt" "$WORK/memstep.txt"; fail "results differ under memstep"; }
    "$CHECK" --no-device --run-dir "$WORK/run" || fail "device records without a driver"
    ;;
  report-gate)
    # memstep report on a real trace (app_pool: one device, one kind): the
    # device_peak gate at the planted
    # peak (one device, one kind: its `total` line) passes, one byte below
    # fails with exit 3, and the JSON names the kind.
    run "$CLI" run --out "$WORK/run" -- "$APP" "$WORK/facts"
    [ $rc -eq 0 ] || fail "the program failed under memstep (exit $rc)"
    peak=$(sed -n 's/^total kind=device_pool .* peak=\([0-9]*\)$/\1/p' "$WORK"/facts/facts.*)
    [ -n "$peak" ] || fail "no device_pool peak in the facts"
    "$CLI" report "$WORK/run" --fail-on "device_peak > $peak" >"$WORK/pass.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { tail -20 "$WORK/pass.txt"; fail "gate at the peak: exit $rc, want 0"; }
    "$CLI" report "$WORK/run" --fail-on "device_peak > $((peak - 1))" >"$WORK/fail.txt" 2>&1
    rc=$?
    [ $rc -eq 3 ] || { tail -20 "$WORK/fail.txt"; fail "gate below the peak: exit $rc, want 3"; }
    grep -q "device_peak" "$WORK/fail.txt" || fail "the failing gate is not listed"
    "$CLI" report "$WORK/run" --format json >"$WORK/report.json" 2>"$WORK/json.err" \
      || fail "report --format json failed"
    grep -q '"device_pool"' "$WORK/report.json" || fail "no device_pool in the JSON report"
    ;;
  report-share)
    # memstep report on app_share's trace: the release thresholds, the trim
    # and the multicast object it planted (docs/gpu.md "What is counted
    # where"), in the text (its lines) and in the JSON (exact fields).
    run "$CLI" run --out "$WORK/run" -- "$APP" "$WORK/facts"
    [ $rc -eq 0 ] || fail "the program failed under memstep (exit $rc)"
    facts=$(ls "$WORK"/facts/facts.* | head -1)
    pool=$(sed -n 's/^counter name=cuda\.pool:0\.\(0x[0-9a-f]*\)\.trim_to_bytes .*/\1/p' "$facts")
    def=$(sed -n 's/^counter name=cuda\.pool:-1\.\(0x[0-9a-f]*\)\.release_threshold_bytes .*/\1/p' "$facts")
    mc=$(sed -n 's/^counter name=cuda\.multicast:-1\.\(0x[0-9a-f]*\)\.size_bytes value=4194304$/\1/p' "$facts")
    [ -n "$pool" ] && [ -n "$def" ] && [ -n "$mc" ] || fail "no pool, default pool or multicast object in $facts"
    "$CLI" report "$WORK/run" >"$WORK/report.txt" 2>"$WORK/text.err" || fail "memstep report failed"
    want() {  # want REGEX: a line of the text report
      grep -Eq "$1" "$WORK/report.txt" || { sed -n '/^Memory pools/,$p' "$WORK/report.txt" | head -20; fail "no line /$1/ in the text report"; }
    }
    want "^Memory pools \(pid [0-9]+\): 3 release thresholds and trims"
    want "^ +2 +0  $pool +release threshold 8\.00 MiB$"
    want "^ +2 +-  $def +release threshold 1\.00 GiB  \(a pool memstep did not see created\)$"
    want "^ +3 +0  $pool +trimmed to 1\.00 MiB, reserved 2\.00 MiB after$"
    want "^Multicast objects \(pid [0-9]+\): 1 "
    want "^  $mc +4\.00 MiB +1 +1  device 0 4\.00 MiB \(0 B\)$"
    "$CLI" report "$WORK/run" --format json >"$WORK/report.json" 2>"$WORK/json.err" \
      || fail "report --format json failed"
    python3 - "$WORK/report.json" "$pool" "$def" "$mc" <<'PY' || fail "the JSON report's pool events or multicast objects are wrong"
import json, sys
report, pool, default, mc = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
procs = [p for p in report["processes"] if p["pool_events"] or p["multicast"]]
assert len(procs) == 1, f"{len(procs)} processes with pool events or multicast objects"
p = procs[0]
want = [
    {"step": 2, "device": 0, "pool": pool, "event": "release_threshold",
     "release_threshold_bytes": 8 << 20, "reserved_bytes_after": None},
    {"step": 2, "device": -1, "pool": default, "event": "release_threshold",
     "release_threshold_bytes": 1 << 30, "reserved_bytes_after": None},
    {"step": 3, "device": 0, "pool": pool, "event": "trim", "trim_to_bytes": 1 << 20,
     "reserved_bytes_after": 2 << 20},
]
assert p["pool_events"] == want, p["pool_events"]
assert p["pool_events_dropped"] == 0 and p["multicast_dropped"] == 0
assert p["multicast"] == [{"object": mc, "size_bytes": 4 << 20, "created_step": 1,
                           "released": True, "released_step": 1,
                           "bound_bytes_max": {"0": 4 << 20}, "bound_bytes_end": {"0": 0}}], p["multicast"]
print("pool events and multicast objects ok")
PY
    ;;
  mutate)
    run "$CLI" run --out "$WORK/run" -- "$APP" "$WORK/facts"
    [ $rc -eq 0 ] || fail "the program failed under memstep (exit $rc)"
    "$CHECK" --facts "$WORK/facts" --log "$WORK/fake.log" --run-dir "$WORK/run" >/dev/null \
      || fail "the unmutated facts do not pass; see cuda.app_dyn.rt.memstep"
    f=$(ls "$WORK"/facts/facts.*)
    cp "$f" "$WORK/facts.orig"
    cp "$WORK/fake.log" "$WORK/log.orig"
    mut() {  # mut FACTS_SED LOG_SED EXPECTED: cuda_check must fail saying EXPECTED
      cp "$WORK/facts.orig" "$f"; sed -i "$1" "$f"
      cp "$WORK/log.orig" "$WORK/fake.log"; sed -i "$2" "$WORK/fake.log"
      cmp -s "$f" "$WORK/facts.orig" && cmp -s "$WORK/fake.log" "$WORK/log.orig" \
        && fail "no-op mutation: '$1' '$2'"
      if "$CHECK" --facts "$WORK/facts" --log "$WORK/fake.log" --run-dir "$WORK/run" \
          >"$WORK/mut.out" 2>&1; then
        fail "cuda_check accepted the mutation '$1' '$2'"
      fi
      grep -q "$3" "$WORK/mut.out" || { cat "$WORK/mut.out"; fail "no '$3' for '$1' '$2'"; }
    }
    mut '0,/^alloc/s/ size=\([0-9]*\) / size=1\1 /' '' 'in the facts, not in the trace: alloc'
    mut '0,/^alloc/s/ func=.*/ func=planted_nonexistent/' '' 'lacks planted_nonexistent'
    mut '0,/^alloc/s/ step=0 / step=1 /' '' 'recorded at step 0'
    mut '0,/^alloc/s/ stage=forward / stage=backward /' '' "planted step 0 stage 'backward'"
    mut '0,/^free/{/^free/d}' '' 'in the trace, not in the facts: free'
    mut '/^fail/s/ err=46 / err=47 /' '' 'in the facts, not in the trace: fail'
    mut 's/^total kind=device count=5 /total kind=device count=6 /' '' 'device: trace has count 5'
    mut 's/^steppeak step=1 kind=device peak=\([0-9]*\)/steppeak step=1 kind=device peak=1\1/' '' \
        'step 1 device: trace peak'
    mut 's/^stagepeak step=0 stage=backward kind=device_pool peak=/&1/' '' \
        'step 0 stage backward device_pool: trace peak'
    mut 's/^devinfo step=0 dev=0 free=/&1/' '' 'DEV_INFO step 0 device 0'
    mut 's/^devinfo step=1 dev=1 /devinfo step=5 dev=1 /' '' 'no DEV_INFO for step 5'
    mut '' '/call=cudaFreeHost ev=free/d' "in the trace, not in the fakes' log: free"
    a=$(sed -n 's/^alloc kind=device api=cudaMalloc dev=0 addr=\(0x[0-9a-f]*\) .*/\1/p' \
        "$WORK/facts.orig" | head -1)
    mut "\$a miss kind=device api=cudaMalloc addr=$a size=1 why=test" '' 'documented miss'
    cp "$WORK/facts.orig" "$f"; cp "$WORK/log.orig" "$WORK/fake.log"
    ;;
  realrt-fakedrv)
    FAKECUDA_LOG="$WORK/plain.log" run "$APP" "$WORK/plain.txt" --record-only
    [ $rc -eq 0 ] || fail "the program failed (exit $rc)"
    FAKECUDA_LOG="$WORK/memstep.log" run "$CLI" run --out "$WORK/run" -- "$APP" \
      "$WORK/memstep.txt" --record-only
    [ $rc -eq 0 ] || fail "the program failed under memstep (exit $rc)"
    cmp "$WORK/plain.txt" "$WORK/memstep.txt" \
      || { diff "$WORK/plain.txt" "$WORK/memstep.txt"; fail "results differ under memstep"; }
    for l in plain memstep; do
      sed -n 's/^pid=[0-9]* tid=[0-9]* //p' "$WORK/$l.log" >"$WORK/$l.calls"
    done
    n=$(grep -c 'call=cuGetProcAddress_v2' "$WORK/plain.calls")
    [ "$n" -gt 100 ] || fail "the real runtime made only $n driver lookups"
    cmp "$WORK/plain.calls" "$WORK/memstep.calls" \
      || { diff "$WORK/plain.calls" "$WORK/memstep.calls" | head -20;
           fail "the driver saw other calls under memstep"; }
    "$CHECK" --no-device --fail-err 801 --run-dir "$WORK/run" || fail "device records"
    ;;
  *) fail "unknown mode $MODE" ;;
esac
echo PASS
