#!/bin/sh
# Runs one preload behaviour case under LD_PRELOAD and validates the traces.
# usage: run_case.sh CASE LIB BEHAVIOR_BIN TRACE_CHECK WORKDIR [extra...]
set -u
CASE=$1; LIB=$2; BIN=$3; CHECK=$4; WORK=$5; shift 5
rm -rf "$WORK"; mkdir -p "$WORK"
OUT="$WORK/out"
export MEMSTEP_DIR="$OUT"
export MEMSTEP_FLUSH_MS=20
export MEMSTEP_SEED="${MEMSTEP_SEED:-1}"  # samples from a fixed seed, never from the clock
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run with a deadlock timeout; stdout to $WORK/stdout, stderr to $WORK/stderr
  timeout -k 5 "${TIMEOUT:-120}" env LD_PRELOAD="$LIB" ${EXTRA_ENV:-} "$@" >"$WORK/stdout" 2>"$WORK/stderr"
  rc=$?
  cat "$WORK/stdout"; tail -c 4000 "$WORK/stderr" >&2
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && fail "timeout (deadlock?), status $rc"
  [ $rc -eq 0 ] || fail "exit status $rc"
}
one_trace() { ls "$OUT"/memstep.*.trace 2>/dev/null | head -1; }
bare() {  # the same program without memstep must pass first (the case is sound)
  timeout -k 5 "${TIMEOUT:-120}" "$@" >"$WORK/bare.stdout" 2>"$WORK/bare.stderr" \
    || { cat "$WORK/bare.stderr" >&2; fail "fails without memstep too"; }
}
quiet() {  # memstep said nothing: it never stopped recording
  ! grep '^memstep: ' "$WORK/stderr" || fail "memstep wrote to stderr"
}
all_traces() {  # every trace reads back; $1 of them in all, $2 with a clean trailer
  n=0
  complete=0
  for t in "$OUT"/memstep.*.trace; do
    [ -e "$t" ] || break
    "$CHECK" "$t" >/dev/null || fail "check $t"
    n=$((n + 1))
    "$CHECK" "$t" --expect-trailer >/dev/null 2>&1 && complete=$((complete + 1))
  done
  [ "$n" -eq "$1" ] || fail "expected $1 traces, got $n"
  [ "$complete" -eq "${2:-$1}" ] || fail "expected ${2:-$1} complete traces, got $complete"
}
case "$CASE" in
  basic)
    run "$BIN" basic
    # Stacks from libunwind.so.8, or glibc's backtrace() where it is missing.
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 100 --min-stacks 100 --min-mmaps 2 \
      --min-mappings 3 --min-frees 50 || fail "trace check"
    ;;
  basic-backtrace)  # glibc's backtrace() instead of libunwind (what runs where it is missing)
    MEMSTEP_UNWINDER=backtrace run "$BIN" basic
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 100 --min-stacks 100 --min-mmaps 2 \
      --min-mappings 3 --min-frees 50 || fail "trace check"
    ;;
  basic-every)  # MEMSTEP_SAMPLE_INTERVAL=1: every allocation goes through the region
    MEMSTEP_SAMPLE_INTERVAL=1 run "$BIN" basic
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 9000 --min-frees 9000 || fail "trace check"
    ;;
  basic-no-libunwind)  # no usable libunwind.so.8 ($1: a directory with one lacking unw_backtrace)
    EXTRA_ENV="LD_LIBRARY_PATH=$1" run "$BIN" basic
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 100 --min-stacks 100 --min-notices 1 \
      || fail "trace check"
    n=$(grep -c "^memstep: no usable libunwind.so.8 .*glibc's backtrace()" "$WORK/stderr")
    [ "$n" = 1 ] || fail "the fallback said $n times on stderr, want 1"
    ;;
  basic-nounwind)  # libunwind unavailable: stack id 0, everything else works
    MEMSTEP_NO_UNWIND=1 MEMSTEP_NO_ZSTD=1 run "$BIN" basic
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 100 || fail "trace check"
    ;;
  disabled)
    MEMSTEP_DISABLE=1 run "$BIN" basic
    [ -z "$(one_trace)" ] || fail "trace written although MEMSTEP_DISABLE=1"
    ;;
  threads)
    MEMSTEP_SAMPLE_INTERVAL=4096 run "$BIN" threads
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 1000 --min-steps 2 \
      --expect-stage threads || fail "trace check"
    ;;
  peakrace)  # new stacks and new run peaks in every writer cycle (1 ms)
    # Without the fix (the run-peak snapshot taken after the dictionary copy) a
    # run failed 7 times in 10 here: four runs miss it about 1 time in 100.
    for i in 1 2 3 4; do
      rm -rf "$OUT"
      MEMSTEP_SAMPLE_INTERVAL=1 MEMSTEP_FLUSH_MS=1 MEMSTEP_SNAPSHOT_MIN_BYTES=1 \
        MEMSTEP_SNAPSHOT_RUN_RATIO_PCT=0 run "$BIN" peakrace
      "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 30000 --min-stacks 20000 \
        || fail "trace check (run $i)"
    done
    ;;
  dlopen)
    MEMSTEP_SAMPLE_INTERVAL=2048 run "$BIN" dlopen "$1"
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 100 || fail "trace check"
    ;;
  dlstress)  # 16 threads dlopen/dlclose beside an allocation storm, 30 s: no deadlock
    TIMEOUT=150 run "$BIN" dlstress "$1" 30
    grep -q '^dlstress ok$' "$WORK/stdout" || fail "no ok"
    quiet
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 100 || fail "trace check"
    ;;
  signal)
    MEMSTEP_SAMPLE_INTERVAL=1 run "$BIN" signal
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 1000 || fail "trace check"
    ;;
  stall)  # the writer stalled: rings overflow; step, stage, epoch, counter records all kept
    # MEMSTEP_TEST_WRITER_STALL_MS: the writer thread flushes nothing for that long (here the
    # whole run), so only the final flush at exit drains the rings, as when a loaded machine
    # starves the writer (python_pymem lost steps 18-23 that way in CI).
    MEMSTEP_SAMPLE_INTERVAL=4096 MEMSTEP_TEST_WRITER_STALL_MS=600000 run "$BIN" stall
    grep -q '^stall ok$' "$WORK/stdout" || fail "no ok"
    quiet
    "$CHECK" "$(one_trace)" --expect-trailer || fail "trace check"
    "$CHECK" "$(one_trace)" --dump > "$WORK/dump" || fail "trace dump"
    awk '
      $1 == "STEP" { split($2, a, "="); split($3, b, "="); n[a[2] "/" b[2]]++; steps++ }
      $1 == "STAGE" && $2 == "churn" { stages++ }
      $1 == "EPOCH" { epochs++ }
      $1 == "COUNTER" && $2 ~ /^stall\.step=/ { split($2, c, "="); cnt[c[2]]++; counters++ }
      $1 == "LOST" { split($2, r, "="); split($4, k, "="); lost[k[2]] += r[2] }
      END {
        bad = 0
        for (s = 0; s < 150; ++s) for (ph = 0; ph < 2; ++ph)
          if (n[s "/" ph] != 1) { printf "step %d phase %d: %d records\n", s, ph, n[s "/" ph]; bad = 1 }
        for (s = 0; s < 150; ++s) if (cnt[s] != 1) { printf "counter %d: %d records\n", s, cnt[s]; bad = 1 }
        printf "steps=%d stages=%d epochs=%d counters=%d lost_samples=%d lost_kept=%d\n",
               steps, stages, epochs, counters, lost[1], lost[3]
        if (steps != 300 || stages != 300 || epochs != 3 || counters != 150) bad = 1
        # The premise: the stalled writer made the rings drop sample records (else the test
        # proves nothing); and none of the records that must be kept was lost.
        if (lost[1] < 1000) { print "premise: fewer than 1000 sample records lost"; bad = 1 }
        if (lost[3] != 0) { print "records that must be kept were lost"; bad = 1 }
        exit bad
      }' "$WORK/dump" || fail "control records lost under a stalled writer"
    ;;
  api)
    run "$BIN" api
    "$CHECK" "$(one_trace)" --expect-trailer --min-steps 12 --expect-stage forward \
      --expect-stage inner --expect-stage backward || fail "trace check"
    # Planted facts (exact counters): forward holds 4 MiB + a 2 MiB temporary,
    # backward frees the 4 MiB. Peaks are exact up to threads x 1 MiB.
    "$CHECK" "$(one_trace)" --dump | awk '
      /^STAGE forward .*phase=1/  { n++; split($6,a,"="); if (a[2] < 6291456 || a[2] > 7340032) bad=1 }
      /^STAGE backward .*phase=1/ { n++; split($6,a,"="); if (a[2] < 4194304 || a[2] >= 6291456) bad=1 }
      /^STEP step=[0-4] phase=1/  { n++; split($5,a,"="); if (a[2] < 6291456) bad=1 }
      END { if (bad || n != 15) { print "planted peaks wrong (n=" n ")"; exit 1 } }' \
      || fail "stage/step peaks"
    ;;
  fork)
    run "$BIN" fork
    child=$(sed -n 's/^child \([0-9]*\)$/\1/p' "$WORK/stdout")
    [ -n "$child" ] || fail "no child pid"
    ct=$(ls "$OUT"/memstep.*."$child".trace 2>/dev/null | head -1)
    [ -n "$ct" ] || fail "no trace for child $child"
    head -c 8 "$ct" | grep -q MEMSTEP1 || fail "child trace lacks the magic"
    "$CHECK" "$ct" --expect-trailer --expect-fork-child --min-allocs 1 --min-frees 1 --min-mappings 3 \
      || fail "child trace check"
    [ "$(ls "$OUT"/memstep.*.trace | wc -l)" -eq 2 ] || fail "expected 2 traces"
    for t in "$OUT"/memstep.*.trace; do "$CHECK" "$t" --expect-trailer || fail "check $t"; done
    ;;
  exitrace)
    MEMSTEP_SAMPLE_INTERVAL=4096 run "$BIN" exitrace
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 10 || fail "trace check"
    ;;
  forkstorm)
    MEMSTEP_SAMPLE_INTERVAL=8192 run "$BIN" forkstorm
    n=$(ls "$OUT"/memstep.*.trace | wc -l)
    [ "$n" -eq 41 ] || fail "expected 41 traces, got $n"
    children=0
    for t in "$OUT"/memstep.*.trace; do
      out=$("$CHECK" "$t" --expect-trailer --min-allocs 1) || fail "check $t: $out"
      case "$out" in *fork_child=1*) children=$((children + 1)) ;; esac
    done
    [ "$children" -eq 40 ] || fail "expected 40 fork-child traces, got $children"
    ;;
  exec)
    run "$BIN" exec
    grep -q "basic ok" "$WORK/stdout" || fail "exec'd program did not run"
    n=$(ls "$OUT"/memstep.*.trace | wc -l)
    [ "$n" -eq 2 ] || fail "expected 2 traces (before and after exec), got $n"
    # The pre-exec image has no trailer (exec runs no destructors) but whatever
    # it flushed is valid; the exec'd image's trace is complete.
    for t in "$OUT"/memstep.*.trace; do "$CHECK" "$t" || fail "check $t"; done
    ;;
  unwritable)
    export MEMSTEP_DIR=/proc/memstep-cannot-exist/x
    run "$BIN" basic
    lines=$(grep -c '^memstep: ' "$WORK/stderr")
    [ "$lines" -eq 1 ] || fail "expected exactly one memstep line on stderr, got $lines"
    grep -q 'recording stopped, the program continues' "$WORK/stderr" || fail "message text"
    ;;
  write-error)  # a 16 KiB file-size limit: one line, rc 0, and no SIGXFSZ for the program
    ulimit -f 32
    MEMSTEP_SAMPLE_INTERVAL=1 run "$BIN" basic
    lines=$(grep -c '^memstep: ' "$WORK/stderr")
    [ "$lines" -eq 1 ] || fail "expected exactly one memstep line on stderr, got $lines"
    grep -q 'cannot write' "$WORK/stderr" || fail "message text"
    "$CHECK" "$(one_trace)" >/dev/null 2>&1  # truncated tail is allowed; must not crash
    ;;
  kill9)  # every chunk written before a kill -9 reads back
    mkfifo "$WORK/fifo"
    MEMSTEP_SAMPLE_INTERVAL=4096 LD_PRELOAD="$LIB" "$BIN" spin >"$WORK/fifo" 2>"$WORK/stderr" &
    pid=$!
    read -r line <"$WORK/fifo"
    [ "$line" = ready ] || { kill -9 $pid; fail "no ready line"; }
    kill -9 $pid
    wait $pid 2>/dev/null
    "$CHECK" "$(one_trace)" --allow-truncated-tail --min-allocs 10 --min-steps 1 \
      --min-mappings 3 || fail "trace check after kill -9"
    ;;
  throw)
    EXTRA_ENV=LD_DEBUG=bindings run "$1" "$2"
    grep -q "caught 2000" "$WORK/stdout" || fail "exceptions not caught"
    # libstdc++'s reference must bind to libgcc_s, never to libunwind.
    b=$(grep '_Unwind_RaiseException' "$WORK/stderr" | grep 'binding file [^ ]*libstdc++')
    [ -n "$b" ] || fail "no binding of libstdc++'s _Unwind_RaiseException seen"
    echo "$b" | grep -q 'to [^ ]*libunwind' && fail "_Unwind_RaiseException bound to libunwind"
    echo "$b" | grep -q 'to [^ ]*libgcc_s' || fail "not bound to libgcc_s"
    ;;
  epochs)
    run "$BIN" epochs
    "$CHECK" "$(one_trace)" --expect-trailer --min-epochs 2 --min-steps 12 || fail "trace check"
    "$CHECK" "$(one_trace)" --dump | grep '^EPOCH' | tr '\n' ' ' | grep -q 'epoch=0 EPOCH epoch=1' \
      || fail "epoch records"
    ;;
  alert-growth)  # 2 MiB/step kept, threshold 1 MiB/step: exactly one alert, command runs
    MEMSTEP_WARMUP=5 MEMSTEP_ALERT_GROWTH=1MiB ALERT_FILE="$WORK/alert.out" \
      MEMSTEP_ALERT_COMMAND='echo "command out $MEMSTEP_ALERT_STEP"; echo "command err $MEMSTEP_ALERT_STEP" >&2; echo "$MEMSTEP_ALERT_RULE $MEMSTEP_ALERT_STEP $MEMSTEP_ALERT_THRESHOLD" > "$ALERT_FILE.tmp" && mv "$ALERT_FILE.tmp" "$ALERT_FILE"' \
      run "$BIN" alert-growth
    # The command writes to the program's standard output and error (spawned
    # from the writer thread, which has a descriptor table of its own).
    grep -qx 'command out 14' "$WORK/stdout" || fail "the command's output is not the program's"
    grep -qx 'command err 14' "$WORK/stderr" || fail "the command's errors are not the program's"
    n=$(grep -c '^memstep: ALERT' "$WORK/stderr")
    [ "$n" -eq 1 ] || fail "expected one alert line, got $n"
    grep -Eq '^memstep: ALERT growth: [0-9.]+ MiB/step > 1\.00 MiB/step at step 14 \(top growing site: stack [0-9]+\)$' \
      "$WORK/stderr" || fail "alert line format"
    [ "$(cat "$WORK/alert.out")" = "growth 14 1048576" ] || fail "alert command output: $(cat "$WORK/alert.out")"
    "$CHECK" "$(one_trace)" --expect-trailer --expect-alerts 1 || fail "trace check"
    "$CHECK" "$(one_trace)" --dump | grep -Eq '^ALERT step=14 rule=1 value=[0-9]+ threshold=1048576 stage=- site=[1-9]' \
      || fail "alert record"
    ;;
  alert-peak)  # once per crossing: peak at steps 15 and 25, forward at 10 and 20
    MEMSTEP_WARMUP=2 MEMSTEP_ALERT_PEAK=12MiB MEMSTEP_ALERT_STAGE_PEAK='forward=6MiB,never=1GiB' \
      run "$BIN" alert-peak
    grep '^memstep: ALERT' "$WORK/stderr" | sed 's/ (top.*//' | sed 's/: [0-9.]* MiB >/: X >/' >"$WORK/lines"
    printf '%s\n' 'memstep: ALERT stage-peak forward: X > 6.00 MiB at step 10' \
      'memstep: ALERT peak: X > 12.00 MiB at step 15' \
      'memstep: ALERT stage-peak forward: X > 6.00 MiB at step 20' \
      'memstep: ALERT peak: X > 12.00 MiB at step 25' | cmp -s - "$WORK/lines" \
      || { cat "$WORK/lines"; fail "alert lines"; }
    grep -Eq '^memstep: ALERT peak: 16\.[0-9]{2} MiB > 12\.00 MiB at step 15' "$WORK/stderr" \
      || fail "peak value"
    "$CHECK" "$(one_trace)" --expect-trailer --expect-alerts 4 || fail "trace check"
    "$CHECK" "$(one_trace)" --dump | grep -q '^ALERT step=10 rule=3 .* threshold=6291456 stage=forward' \
      || fail "stage alert record"
    ;;
  alert-abort)
    MEMSTEP_WARMUP=5 MEMSTEP_ALERT_GROWTH=1MiB MEMSTEP_ALERT_ABORT=1 \
      timeout 120 env LD_PRELOAD="$LIB" "$BIN" alert-growth >"$WORK/stdout" 2>"$WORK/stderr"
    rc=$?
    cat "$WORK/stderr" >&2
    [ $rc -eq 134 ] || fail "expected SIGABRT (134), got $rc"
    grep -q '^memstep: ALERT growth: .* at step 14' "$WORK/stderr" || fail "alert line"
    grep -q '^memstep: aborting the process because of the alert above' "$WORK/stderr" || fail "abort line"
    grep -q 'alert-growth ok' "$WORK/stdout" && fail "the program went on"
    "$CHECK" "$(one_trace)" --expect-alerts 1 || fail "trace check"
    ;;
  snapshot)  # the forward peaks' top site is the planted 12345-byte allocation
    MEMSTEP_SAMPLE_INTERVAL=65536 run "$BIN" snapshot
    "$CHECK" "$(one_trace)" --expect-trailer --min-snapshots 6 --expect-planted-top forward 12345 \
      || fail "trace check"
    "$CHECK" "$(one_trace)" --dump | grep -q '^SNAPSHOT .*cause=1 ' || fail "no run-peak snapshot"
    ;;
  snapshot-usable)  # every block recorded: the planted site's tally is its usable bytes
    # (glibc: a request of 12345 B is a 12360-byte block; docs/preload.md "Peak composition")
    MEMSTEP_SAMPLE_INTERVAL=1 run "$BIN" snapshot
    "$CHECK" "$(one_trace)" --expect-trailer --min-snapshots 6 \
      --expect-planted-usable 12345 12360 || fail "trace check"
    ;;
  windows)  # 50 ms windows until the program marks steps; then a notice
    MEMSTEP_WINDOW=0.05 run "$BIN" windows
    "$CHECK" "$(one_trace)" --expect-trailer --min-steps 12 --min-notices 1 || fail "trace check"
    "$CHECK" "$(one_trace)" --dump >"$WORK/dump"
    grep -q '^NOTICE code=0 time windows stopped' "$WORK/dump" || fail "notice"
    grep -q '^STEP step=2 phase=1' "$WORK/dump" || fail "window steps"
    grep -q '^STEP step=102 phase=1' "$WORK/dump" || fail "program steps"
    ;;
  nvtx)  # NVTX ranges become stages; "train_step N" ranges become steps
    NVTX_INJECTION64_PATH="$LIB" run "$BIN"
    "$CHECK" "$(one_trace)" --expect-trailer --min-steps 8 --expect-stage forward \
      --expect-stage backward --expect-stage optimizer --expect-stage data || fail "trace check"
    "$CHECK" "$(one_trace)" --dump | grep -q '^STEP step=3 phase=1' || fail "step numbers"
    ;;
  run-options)  # BIN is the memstep binary; $1 the step-features program
    M="$BIN"; P=$1
    "$M" run --out "$WORK/r" --warmup 2 --alert-peak 12MiB --alert-stage-peak forward=6MiB \
      --alert-stage-peak never=1G --alert-command 'true' --window 0.5 --step-range '^foo' \
      --no-python-hooks -- sh -c 'echo "$MEMSTEP_WARMUP|$MEMSTEP_ALERT_PEAK|$MEMSTEP_ALERT_STAGE_PEAK|$MEMSTEP_ALERT_COMMAND|$MEMSTEP_WINDOW|$MEMSTEP_STEP_RANGE|$MEMSTEP_PYTHON_HOOKS|${MEMSTEP_ALERT_ABORT:-unset}"' \
      >"$WORK/env" 2>/dev/null || fail "run with step options"
    [ "$(cat "$WORK/env")" = "2|12582912|forward=6291456,never=1073741824|true|0.5|^foo|0|unset" ] \
      || fail "child environment: $(cat "$WORK/env")"
    NVTX_INJECTION64_PATH=/user/own.so "$M" run --out "$WORK/r" -- sh -c 'echo "$NVTX_INJECTION64_PATH"' \
      >"$WORK/nvtx" 2>/dev/null
    [ "$(cat "$WORK/nvtx")" = /user/own.so ] || fail "NVTX_INJECTION64_PATH overwritten"
    env -u NVTX_INJECTION64_PATH "$M" run --out "$WORK/r" -- sh -c 'echo "$NVTX_INJECTION64_PATH"' \
      >"$WORK/nvtx" 2>/dev/null
    case "$(cat "$WORK/nvtx")" in */libmemstep.so) ;; *) fail "NVTX_INJECTION64_PATH not set" ;; esac
    mkdir -p "$WORK/py/startup"
    MEMSTEP_PYTHON_DIR="$WORK/py" PYTHONPATH=/old "$M" run --out "$WORK/r" -- \
      sh -c 'echo "$PYTHONPATH $MEMSTEP_PYTHON_HOOKS"' >"$WORK/py.out" 2>/dev/null
    [ "$(cat "$WORK/py.out")" = "$WORK/py/startup:$WORK/py:/old 1" ] || fail "python hooks: $(cat "$WORK/py.out")"
    for bad in "--window abc" "--alert-peak 12Q" "--alert-stage-peak forward" "--step-range (" \
               "--warmup x"; do
      # shellcheck disable=SC2086
      "$M" run --out "$WORK/r" $bad -- true 2>/dev/null
      [ $? -eq 1 ] || fail "'$bad' is not a usage error"
    done
    "$M" run --help | grep -q -- '--alert-stage-peak STAGE=BYTES' || fail "help text"
    # End to end: options -> library -> alerts.
    rm -rf "$WORK/r2"
    "$M" run --out "$WORK/r2" --warmup 2 --alert-peak 12MiB --alert-stage-peak forward=6MiB -- \
      "$P" alert-peak >/dev/null 2>"$WORK/stderr" || fail "alert-peak under memstep run"
    n=$(grep -c '^memstep: ALERT' "$WORK/stderr")
    [ "$n" -eq 4 ] || fail "expected 4 alerts under memstep run, got $n"
    ;;
  # Issue 12, items 1-3: programs memstep must not harm (BIN is harm_cases).
  pthread-exit)  # main calls pthread_exit: the process ends when its worker does
    TIMEOUT=30 bare "$BIN" pthread-exit
    TIMEOUT=30 run "$BIN" pthread-exit
    grep -q '^ok$' "$WORK/stdout" || fail "the worker did not finish (or its output was lost)"
    grep -q '^atexit ok$' "$WORK/stdout" || fail "the exit handler did not run with the program's descriptors"
    quiet
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 10 || fail "trace check"
    ;;
  scoped)  # memstep::ScopedStep/ScopedStage: no-ops bare; balanced records, exceptions too
    bare "$BIN"
    grep -qx 'scoped ok' "$WORK/bare.stdout" || fail "bare run"
    run "$BIN"
    grep -qx 'scoped ok' "$WORK/stdout" || fail "no ok"
    quiet
    "$CHECK" "$(one_trace)" --dump >"$WORK/dump" || fail "trace check"
    b=$(grep -c '^STAGE .*phase=0' "$WORK/dump"); e=$(grep -c '^STAGE .*phase=1' "$WORK/dump")
    [ "$b" -eq 5 ] && [ "$e" -eq 5 ] || fail "stages: $b begins, $e ends (want 5 and 5)"
    s=$(grep -c '^STEP .*phase=1' "$WORK/dump")
    [ "$s" -eq 2 ] || fail "steps ended: $s (want 2)"
    ;;
  spawn)  # vfork (+exec, +_exit) and posix_spawn(p) while threads allocate
    TIMEOUT=120 bare "$BIN" spawn
    TIMEOUT=120 run "$BIN" spawn
    grep -q '^ok$' "$WORK/stdout" || fail "no ok"
    quiet
    "$CHECK" "$(ls "$OUT"/memstep.*.trace | head -1)" >/dev/null || fail "trace check"
    ;;
  longjmp)  # longjmp / siglongjmp out of code that allocates
    TIMEOUT=60 bare "$BIN" longjmp
    TIMEOUT=60 run "$BIN" longjmp
    grep -q '^ok$' "$WORK/stdout" || fail "no ok"
    quiet
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 100 || fail "trace check"
    ;;
  thread-storm)  # 4,000 threads come and go; 8 threads fork
    TIMEOUT=120 bare "$BIN" thread-storm
    TIMEOUT=120 run "$BIN" thread-storm
    grep -q '^ok$' "$WORK/stdout" || fail "no ok"
    quiet
    all_traces 9  # the process and its 8 fork children (each ends with _exit: no trailer)
    ;;
  signals)  # every signal's disposition as without memstep; SIGUSR1/2 still end a child
    bare "$BIN" signals
    run "$BIN" signals
    grep -q '^ok$' "$WORK/stdout" || fail "no ok"
    cmp -s "$WORK/bare.stdout" "$WORK/stdout" \
      || fail "signals differ from the run without memstep: $(diff "$WORK/bare.stdout" "$WORK/stdout" | grep '^[<>]' | head -4 | tr '\n' ' ')"
    quiet
    ;;
  fork-thread)  # a thread forks, the child's thread returns: the child ends
    TIMEOUT=60 bare "$BIN" fork-thread
    TIMEOUT=60 run "$BIN" fork-thread
    quiet
    all_traces 2
    ;;
  fds)  # the program sees no memstep descriptor at all, and none is inherited
    bare "$BIN" fds
    MEMSTEP_SAMPLE_INTERVAL=4096 run "$BIN" fds
    grep -q '^child ok$' "$WORK/stdout" || fail "exec'd child check"
    quiet
    all_traces 4 2  # the two images before exec (no trailer), parent and child
    ;;
  closeall)  # close every descriptor, then open a file on the freed numbers
    bare "$BIN" closeall "$WORK/file"
    MEMSTEP_SAMPLE_INTERVAL=1 run "$BIN" closeall "$WORK/file"
    quiet
    # 5,000 allocations before the close, 50,000 after: recording went on.
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 50000 || fail "trace check"
    ;;
  closeall-exec)  # subprocess's close_fds: fork, close everything, exec
    bare "$BIN" closeall-exec
    MEMSTEP_SAMPLE_INTERVAL=4096 run "$BIN" closeall-exec
    quiet
    all_traces 3 2  # the parent, /bin/true, and the fork child (exec'd: no trailer)
    ;;
  dup2over)  # the program's file dup2'd over every memstep descriptor
    bare "$BIN" dup2over "$WORK/file"
    MEMSTEP_SAMPLE_INTERVAL=1 run "$BIN" dup2over "$WORK/file"
    quiet
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 50000 || fail "trace check"
    ;;
  refused-unshare)  # a seccomp filter refuses close_range and unshare (core/fds.h's fallback)
    # The writer shares the program's table (its files moved above 512);
    # the program is unharmed and recorded. $1: refuse_syscalls. Only the
    # program is preloaded, not the filter's own process.
    R=$1; L=$LIB; LIB=
    TIMEOUT=30 run "$R" close_range,unshare env LD_PRELOAD="$L" "$BIN" pthread-exit
    grep -q '^ok$' "$WORK/stdout" || fail "pthread-exit: the worker's output was lost"
    grep -q '^atexit ok$' "$WORK/stdout" || fail "pthread-exit: the exit handler"
    quiet
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 10 || fail "trace check"
    rm -rf "$OUT"
    MEMSTEP_SAMPLE_INTERVAL=4096 run "$R" close_range,unshare env LD_PRELOAD="$L" "$BIN" fds
    grep -q '^child ok$' "$WORK/stdout" || fail "fds: exec'd child check"
    quiet
    all_traces 4 2
    ;;
  refused-pidfd)  # a seccomp filter refuses pidfd_open and pidfd_getfd, and the trace
    # cannot grow past 16 KiB: exactly one line on the program's stderr,
    # whichever thread writes it (the writer queues it for a program thread).
    ulimit -f 32
    R=$1; L=$LIB; LIB=
    MEMSTEP_SAMPLE_INTERVAL=1 run "$R" pidfd_open,pidfd_getfd env LD_PRELOAD="$L" "$BIN" basic
    lines=$(grep -c '^memstep: ' "$WORK/stderr")
    [ "$lines" -eq 1 ] || fail "expected exactly one memstep line on stderr, got $lines"
    grep -q 'cannot write' "$WORK/stderr" || fail "message text"
    ;;
  fdrace)  # the writer's opens never take a number the program closed
    bare "$BIN" fdrace "$WORK/file"
    run "$BIN" fdrace "$WORK/file"
    quiet
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 1 || fail "trace check"
    ;;
  fdrace-fork)  # the same in a fork child, whose writer thread memstep starts
    bare "$BIN" fdrace-fork "$WORK/file"
    run "$BIN" fdrace-fork "$WORK/file"
    quiet
    all_traces 2
    ;;
  # Issue 12, item 8 (BIN is preload_behavior).
  bad-env)  # bad values: one line each, the defaults, the program unharmed
    MEMSTEP_SAMPLE_INTERVAL=lots MEMSTEP_FLUSH_MS=0 MEMSTEP_WINDOW=soon \
      MEMSTEP_ALERT_STAGE_PEAK=forward=big run "$BIN" basic
    for v in MEMSTEP_SAMPLE_INTERVAL MEMSTEP_FLUSH_MS MEMSTEP_WINDOW MEMSTEP_ALERT_STAGE_PEAK; do
      n=$(grep -c "^memstep: $v=" "$WORK/stderr")
      [ "$n" -eq 1 ] || fail "expected one line about $v, got $n"
    done
    [ "$(grep -c '^memstep: ' "$WORK/stderr")" -eq 4 ] || fail "unexpected memstep lines"
    "$CHECK" "$(one_trace)" --expect-trailer --min-allocs 10 --expect-interval 524288 \
      || fail "trace check (default interval)"
    ;;
  modes)  # a directory memstep creates is 0700, its traces 0600
    export MEMSTEP_DIR="$WORK/made/by/memstep"
    run "$BIN" basic
    [ "$(stat -c %a "$WORK/made/by/memstep")" = 700 ] || fail "directory mode"
    [ "$(stat -c %a "$WORK/made/by")" = 700 ] || fail "parent directory mode"
    for t in "$MEMSTEP_DIR"/memstep.*.trace; do
      [ "$(stat -c %a "$t")" = 600 ] || fail "trace mode of $t"
    done
    # O_EXCL|O_NOFOLLOW: links planted at the exact trace name the process
    # will use (memstep.HOST.RANK.PID.trace; `exec` keeps the shell's PID),
    # one to an existing file and one dangling, are never followed: the
    # file stays as it was, the dangling target is never created, and the
    # trace goes to the next free name.
    export MEMSTEP_DIR="$WORK/shared"
    mkdir -p "$MEMSTEP_DIR"
    echo victim >"$WORK/victim"
    for target in "$WORK/victim" "$WORK/created-through-link"; do
      rm -f "$MEMSTEP_DIR"/memstep.*
      timeout -k 5 60 env -u RANK sh -c \
        'ln -s "$1" "$MEMSTEP_DIR/memstep.$(hostname).na.$$.trace" &&
         exec env LD_PRELOAD="$3" "$2" basic' \
        sh "$target" "$BIN" "$LIB" >"$WORK/stdout" 2>"$WORK/stderr" || fail "run with a planted link"
      links=$(find "$MEMSTEP_DIR" -type l | wc -l)
      [ "$links" -eq 1 ] || fail "the planted link is gone or was never made ($links links)"
      trace=$(find "$MEMSTEP_DIR" -type f -name 'memstep.*.1.trace')
      [ -n "$trace" ] || fail "no trace at the next free name: $(ls "$MEMSTEP_DIR")"
      [ "$(stat -c %a "$trace")" = 600 ] || fail "trace mode of $trace"
      "$CHECK" "$trace" --expect-trailer --min-allocs 10 || fail "trace check ($trace)"
    done
    [ "$(cat "$WORK/victim")" = victim ] || fail "a trace was written through a planted link"
    [ ! -e "$WORK/created-through-link" ] || fail "a dangling planted link was followed"
    ;;
  secure)  # a setgid program is never profiled, even with the library loaded
    [ "$(id -u)" -eq 0 ] || fail "needs root (to make a setgid program)"
    cp /usr/bin/id "$WORK/id"; chgrp nogroup "$WORK/id"; chmod g+s "$WORK/id"
    [ "$("$WORK/id" -g)" != 0 ] || fail "setgid has no effect here (nosuid mount?)"
    cp "$BIN" "$WORK/prog"; chgrp nogroup "$WORK/prog"; chmod g+s "$WORK/prog"
    # glibc preloads in secure mode only set-user-ID libraries from the trusted
    # directories, by bare name: install one there for this test.
    libdir=$(dirname "$(ldconfig -p | sed -n 's/.*libc.so.6 (libc6,x86-64) => //p' | head -1)")
    name="libmemstep-secure-test-$$.so"
    cp "$LIB" "$libdir/$name"; chmod u+s "$libdir/$name"
    trap 'rm -f "$libdir/$name"' EXIT
    timeout -k 5 60 env LD_PRELOAD="$name" "$WORK/prog" basic >"$WORK/stdout" 2>"$WORK/stderr"
    rc=$?
    [ $rc -eq 0 ] || fail "setgid program failed ($rc)"
    grep -q "basic ok" "$WORK/stdout" || fail "setgid program output"
    [ -z "$(one_trace)" ] || fail "a secure-execution process was profiled"
    # The same library, by the same name, does profile an ordinary program.
    timeout -k 5 60 env LD_PRELOAD="$name" "$BIN" basic >/dev/null 2>&1 || fail "plain run"
    [ -n "$(one_trace)" ] || fail "the installed test library did not load at all"
    ;;
  disk-full)  # a 128 KiB filesystem fills up; $1 is the memstep CLI (issue 12, item 4)
    [ "$(id -u)" -eq 0 ] || fail "needs root (to mount a small tmpfs)"
    bare "$BIN" basic
    mkdir -p "$WORK/small"
    # A private mount namespace: the tmpfs disappears with it, so the traces
    # are copied out first.
    unshare -m sh -c "mount -t tmpfs -o size=128k tmpfs '$WORK/small' || exit 99
      MEMSTEP_DIR='$WORK/small/out' MEMSTEP_SAMPLE_INTERVAL=1 MEMSTEP_NO_ZSTD=1 \
        timeout -k 5 60 env LD_PRELOAD='$LIB' '$BIN' basic >'$WORK/stdout' 2>'$WORK/stderr'
      echo \$? >'$WORK/rc'
      cp -r '$WORK/small/out' '$OUT'"
    [ $? -ne 99 ] || fail "cannot mount a tmpfs"
    [ "$(cat "$WORK/rc")" = 0 ] || fail "the program's exit status changed: $(cat "$WORK/rc")"
    cmp -s "$WORK/stdout" "$WORK/bare.stdout" || fail "the program's output changed"
    [ "$(grep -c '^memstep: ' "$WORK/stderr")" -eq 1 ] || fail "expected one memstep line"
    grep -q 'No space left on device; recording stopped' "$WORK/stderr" || fail "message"
    t=$(one_trace)
    "$CHECK" "$t" --min-allocs 100 --min-notices 1 || fail "the trace before the failure"
    "$1" report "$OUT" >"$WORK/report" 2>&1 || fail "report exit $?"
    grep -q 'INCOMPLETE: memstep stopped recording' "$WORK/report" || fail "report: incomplete"
    grep -q 'No space left on device' "$WORK/report" || fail "report: why"
    ;;
  *) fail "unknown case $CASE" ;;
esac
echo "PASS: $CASE"
