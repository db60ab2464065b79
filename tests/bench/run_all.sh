#!/usr/bin/env bash
# Runs every benchmark bare, under memstep (LD_PRELOAD, default settings) and
# under heaptrack, and prints one table: wall time, ratio vs bare, trace size
# and heaptrack's trace size over memstep's, plus the per-benchmark figures of
# merit. heaptrack is too slow for the full malloc_free and storm counts, so it
# runs smaller ones; those smaller counts also run bare and under memstep
# (rows "bare@ht", "memstep@ht"), and trace sizes and heaptrack's slowdown are
# only ever compared between runs with identical arguments.
#
#   tests/bench/run_all.sh BUILD_DIR [--quick]
#
# --quick uses tiny iteration counts (the ctest smoke test); numbers from it
# mean nothing. Works with whatever is built: without libmemstep.so or
# heaptrack their rows are left out (and a note says so). Exits 1 when any
# run fails (a crash under memstep fails the smoke test), after the table.
# Environment: MEMSTEP_BENCH_TMP (scratch directory, default $TMPDIR or /tmp).
set -u -o pipefail

BUILD=${1:?usage: run_all.sh BUILD_DIR [--quick]}
QUICK=0
[[ "${2:-}" == "--quick" ]] && QUICK=1
BIN="$BUILD/bin"
LIB="$BUILD/lib/libmemstep.so"
TMP=$(mktemp -d "${MEMSTEP_BENCH_TMP:-${TMPDIR:-/tmp}}/memstep_bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

FAILED=0
HAVE_MEMSTEP=0; [[ -f "$LIB" ]] && HAVE_MEMSTEP=1
HAVE_HEAPTRACK=0; command -v heaptrack >/dev/null 2>&1 && HAVE_HEAPTRACK=1

if (( QUICK )); then
  MF_PAIRS=200000; MF_HT_PAIRS=20000; MF_REPEAT=1
  STORM_N=500000; STORM_HT_N=20000; STORM_REPEAT=1
  REAL_STEPS=3; REAL_REPEAT=1
else
  MF_PAIRS=20000000; MF_HT_PAIRS=2000000; MF_REPEAT=5
  STORM_N=50000000; STORM_HT_N=1000000; STORM_REPEAT=3
  REAL_STEPS=100; REAL_REPEAT=4
fi

now_ns() { date +%s%N; }

# run MODE NAME ARGS... : runs one configuration, sets WALL (s), OUT (stdout),
# SIZE (trace bytes or "-"), RC.
run() {
  local mode=$1 name=$2; shift 2
  local dir t0 t1
  RUN_ID=$(( ${RUN_ID:-0} + 1 ))
  dir="$TMP/$name.$mode.$RUN_ID"
  mkdir -p "$dir"
  t0=$(now_ns)
  case $mode in
    bare) OUT=$("$@" 2>"$dir/stderr") ;;
    memstep) OUT=$(env LD_PRELOAD="$LIB" MEMSTEP_DIR="$dir" "$@" 2>"$dir/stderr") ;;
    unsampled) OUT=$(env LD_PRELOAD="$LIB" MEMSTEP_DIR="$dir" \
                     MEMSTEP_SAMPLE_INTERVAL=1000000000000 "$@" 2>"$dir/stderr") ;;
    heaptrack) OUT=$(heaptrack -o "$dir/ht" "$@" 2>"$dir/stderr" | grep '^RESULT') ;;
  esac
  RC=$?
  t1=$(now_ns)
  WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
  case $mode in
    memstep|unsampled) SIZE=$(find "$dir" -name '*.trace' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }') ;;
    heaptrack) SIZE=$(find "$dir" -name 'ht*' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }') ;;
    *) SIZE=- ;;
  esac
  if (( RC != 0 )); then
    FAILED=1
    echo "error: $name ($mode) exited $RC: $(tail -3 "$dir/stderr" | tr '\n' ' ')" >&2
  fi
}

# run_best N MODE NAME ARGS... : `run` N times, keeping the fastest (least
# wall time): filters interference from other work on a shared machine.
run_best() {
  local n=$1; shift
  local best_wall="" best_out="" best_size="" i
  for (( i = 0; i < n; i++ )); do
    run "$@"
    if [[ -z $best_wall ]] || awk -v a="$WALL" -v b="$best_wall" 'BEGIN { exit !(a < b) }'; then
      best_wall=$WALL; best_out=$OUT; best_size=$SIZE
    fi
  done
  WALL=$best_wall; OUT=$best_out; SIZE=$best_size
}

# field KEY: value of KEY=... in $OUT's RESULT line.
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$OUT" | head -1; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a != "-") printf "%.2f", a / b; else print "-" }'; }

ROWS=()
row() { ROWS+=("$(printf '%-12s %-12s %9s %8s %12s %8s  %s' "$@")"); }

# metric_extra KEY VALUE BARE_VALUE: the metric column of one row (reads $OUT
# for allocs_per_s when KEY is another figure).
metric_extra() {
  local key=$1 v=$2 b=$3 out="$1=$2" rate
  case $key in
    ns_per_pair) out+=" added_ns=$(awk -v a="$v" -v b="$b" 'BEGIN { printf "%.2f", a - b }')" ;;
    allocs_per_s) out+=" slowdown=$(ratio "$b" "$v")x" ;;
    median_step_s) out+=" step_x=$(ratio "$v" "$b") allocs_per_s=$(field allocs_per_s)" ;;
  esac
  echo "$out"
}

# bench NAME METRIC_KEY REPEAT HT_ARGS... -- ARGS...
# Runs ARGS bare, under memstep (and unsampled for malloc_free), and HT_ARGS
# under heaptrack. When HT_ARGS differ from ARGS (heaptrack is too slow for
# the full counts), HT_ARGS also run bare and under memstep (rows "@ht"), so
# trace sizes and heaptrack's wall ratio are only compared on the same run.
bench() {
  local name=$1 key=$2 repeat=$3; shift 3
  local ht_args=() args=()
  while [[ $1 != -- ]]; do ht_args+=("$1"); shift; done; shift
  args=("$@")
  local same=0
  [[ "${ht_args[*]}" == "${args[*]}" ]] && same=1
  local modes=(bare)
  (( HAVE_MEMSTEP )) && modes+=(memstep)
  [[ $name == malloc_free && $HAVE_MEMSTEP == 1 ]] && modes+=(unsampled)
  # The modes run interleaved (bare, memstep, ..., bare, memstep, ...), the
  # fastest of each kept, so slow drift on a shared machine hits all alike.
  local -A w o z
  local i mode
  for (( i = 0; i < repeat; i++ )); do
    for mode in "${modes[@]}"; do
      run "$mode" "$name" "${args[@]}"
      if [[ -z ${w[$mode]:-} ]] || awk -v a="$WALL" -v b="${w[$mode]}" 'BEGIN { exit !(a < b) }'; then
        w[$mode]=$WALL; o[$mode]=$OUT; z[$mode]=$SIZE
      fi
    done
  done
  local ht_wall ht_metric ht_size="-" ht_out
  if (( HAVE_HEAPTRACK )); then
    run heaptrack "$name" "${ht_args[@]}"
    ht_wall=$WALL; ht_metric=$(field "$key"); ht_size=$SIZE; ht_out=$OUT
  fi
  local bare_wall=${w[bare]} bare_metric
  OUT=${o[bare]}; bare_metric=$(field "$key")
  for mode in "${modes[@]}"; do
    local size_x="-" size=${z[$mode]}
    [[ $mode != bare && $same == 1 ]] && size_x=$(ratio "$ht_size" "$size")
    [[ $mode == bare ]] && size=-
    OUT=${o[$mode]}
    row "$name" "$mode" "${w[$mode]}" "$(ratio "${w[$mode]}" "$bare_wall")" "$size" "$size_x" \
      "$(metric_extra "$key" "$(field "$key")" "$bare_metric")"
  done
  (( HAVE_HEAPTRACK )) || return 0
  local ht_bare_wall=$bare_wall ht_bare_metric=$bare_metric
  if (( ! same )); then
    run_best "$repeat" bare "$name" "${ht_args[@]}"
    ht_bare_wall=$WALL; ht_bare_metric=$(field "$key")
    row "$name" bare@ht "$WALL" 1.00 - - "$(metric_extra "$key" "$ht_bare_metric" "$ht_bare_metric")"
    if (( HAVE_MEMSTEP )); then
      run_best "$repeat" memstep "$name" "${ht_args[@]}"
      row "$name" memstep@ht "$WALL" "$(ratio "$WALL" "$ht_bare_wall")" "$SIZE" \
        "$(ratio "$ht_size" "$SIZE")" "$(metric_extra "$key" "$(field "$key")" "$ht_bare_metric")"
    fi
  fi
  OUT=$ht_out
  row "$name" "heaptrack$( (( same )) || echo @ht)" "$ht_wall" "$(ratio "$ht_wall" "$ht_bare_wall")" \
    "$ht_size" 1.00 "$(metric_extra "$key" "$ht_metric" "$ht_bare_metric")"
}

MF=("$BIN/malloc_free_bench")
ST=("$BIN/storm_bench")
RE=("$BIN/realistic_bench")
for b in "${MF[0]}" "${ST[0]}" "${RE[0]}"; do
  [[ -x $b ]] || { echo "missing $b: build the benchmarks first" >&2; exit 1; }
done

bench malloc_free ns_per_pair "$MF_REPEAT" "${MF[@]}" --pairs "$MF_HT_PAIRS" -- "${MF[@]}" --pairs "$MF_PAIRS"
bench storm allocs_per_s "$STORM_REPEAT" "${ST[@]}" --allocs-per-thread "$STORM_HT_N" --rounds 1 -- \
  "${ST[@]}" --allocs-per-thread "$STORM_N"
bench realistic median_step_s "$REAL_REPEAT" "${RE[@]}" --steps "$REAL_STEPS" -- "${RE[@]}" --steps "$REAL_STEPS"

echo "memstep benchmarks ($(nproc) cores$( (( QUICK )) && echo ', --quick: numbers are meaningless'))"
(( HAVE_MEMSTEP )) || echo "note: $LIB not found: memstep rows skipped"
(( HAVE_HEAPTRACK )) || echo "note: heaptrack not installed: heaptrack rows skipped"
printf '%-12s %-12s %9s %8s %12s %8s  %s\n' workload mode wall_s x_bare trace_bytes ht/trace metric
for r in "${ROWS[@]}"; do echo "$r"; done
cat <<EOF
x_bare: wall time / the bare run with the same arguments.
ht/trace: heaptrack's trace bytes / this row's trace bytes, always on the SAME
  arguments ("-": heaptrack did not run these arguments; see the @ht rows).
@ht rows run heaptrack's smaller counts (heaptrack is too slow for the full ones):
  malloc_free --pairs $MF_HT_PAIRS, storm --allocs-per-thread $STORM_HT_N --rounds 1. realistic runs
  the same arguments (--steps $REAL_STEPS) in every mode, so it has no @ht rows.
malloc_free and storm report their best in-process round, realistic its median step
  (step_x: over bare's); bare/memstep/unsampled run interleaved, best wall of
  $MF_REPEAT (malloc_free) / $STORM_REPEAT (storm) / $REAL_REPEAT (realistic) rounds (@ht rows: best of as many runs).
unsampled = MEMSTEP_SAMPLE_INTERVAL=1000000000000 (nothing sampled, exact counters only).
goals: malloc_free added_ns <= 8 (unsampled); storm slowdown <= 1.5x (aim 1.25x);
  realistic memstep step_x (and x_bare) <= 1.02; ht/trace >= 20.
EOF
exit "$FAILED"
