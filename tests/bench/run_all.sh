#!/usr/bin/env bash
# Runs every benchmark bare, under memstep (LD_PRELOAD, default settings) and
# under heaptrack, and prints one table: wall time, ratio vs bare, trace size
# and size ratio vs heaptrack, plus the per-benchmark figures of merit.
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
  MF_PAIRS=200000; MF_HT_PAIRS=20000
  STORM_N=500000; STORM_HT_N=20000; STORM_REPEAT=1
  REAL_STEPS=3; REAL_REPEAT=1
else
  MF_PAIRS=20000000; MF_HT_PAIRS=2000000
  STORM_N=50000000; STORM_HT_N=1000000; STORM_REPEAT=2
  REAL_STEPS=60; REAL_REPEAT=3
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
NOTES=()
row() { ROWS+=("$(printf '%-12s %-10s %9s %8s %12s %10s  %s' "$@")"); }

bench() {  # bench NAME METRIC_KEY REPEAT HT_ARGS... -- ARGS...
  local name=$1 key=$2 repeat=$3; shift 3
  local ht_args=() args=()
  while [[ $1 != -- ]]; do ht_args+=("$1"); shift; done; shift
  args=("$@")
  local bare_wall bare_metric ht_size="-" mode
  run_best "$repeat" bare "$name" "${args[@]}"
  bare_wall=$WALL; bare_metric=$(field "$key")
  row "$name" bare "$bare_wall" 1.00 - - "$key=$bare_metric"
  local modes=()
  (( HAVE_MEMSTEP )) && modes+=(memstep)
  [[ $name == malloc_free && $HAVE_MEMSTEP == 1 ]] && modes+=(unsampled)
  local ht_wall ht_metric
  if (( HAVE_HEAPTRACK )); then
    run heaptrack "$name" "${ht_args[@]}"
    ht_wall=$WALL; ht_metric=$(field "$key"); ht_size=$SIZE
  fi
  for mode in "${modes[@]}"; do
    run_best "$repeat" "$mode" "$name" "${args[@]}"
    local metric extra
    metric=$(field "$key")
    extra="$key=$metric"
    case $key in
      ns_per_pair) extra+=" added_ns=$(awk -v a="$metric" -v b="$bare_metric" 'BEGIN { printf "%.2f", a - b }')" ;;
      allocs_per_s) extra+=" slowdown=$(ratio "$bare_metric" "$metric")x" ;;
    esac
    row "$name" "$mode" "$WALL" "$(ratio "$WALL" "$bare_wall")" "$SIZE" "$(ratio "$SIZE" "$ht_size")" "$extra"
  done
  if (( HAVE_HEAPTRACK )); then
    local extra="$key=$ht_metric"
    case $key in
      ns_per_pair) extra+=" added_ns=$(awk -v a="$ht_metric" -v b="$bare_metric" 'BEGIN { printf "%.2f", a - b }')" ;;
      allocs_per_s) extra+=" slowdown=$(ratio "$bare_metric" "$ht_metric")x" ;;
    esac
    local wall_ratio
    if [[ "${ht_args[*]}" == "${args[*]}" ]]; then
      wall_ratio=$(ratio "$ht_wall" "$bare_wall")
    else
      wall_ratio="(*)"
    fi
    row "$name" heaptrack "$ht_wall" "$wall_ratio" "$ht_size" 1.00 "$extra"
  fi
}

MF=("$BIN/malloc_free_bench")
ST=("$BIN/storm_bench")
RE=("$BIN/realistic_bench")
for b in "${MF[0]}" "${ST[0]}" "${RE[0]}"; do
  [[ -x $b ]] || { echo "missing $b: build the benchmarks first" >&2; exit 1; }
done

bench malloc_free ns_per_pair 1 "${MF[@]}" --pairs "$MF_HT_PAIRS" -- "${MF[@]}" --pairs "$MF_PAIRS"
bench storm allocs_per_s "$STORM_REPEAT" "${ST[@]}" --allocs-per-thread "$STORM_HT_N" -- \
  "${ST[@]}" --allocs-per-thread "$STORM_N"
bench realistic s_per_step "$REAL_REPEAT" "${RE[@]}" --steps "$REAL_STEPS" -- "${RE[@]}" --steps "$REAL_STEPS"

echo "memstep benchmarks ($(nproc) cores$( (( QUICK )) && echo ', --quick: numbers are meaningless'))"
(( HAVE_MEMSTEP )) || echo "note: $LIB not found: memstep rows skipped"
(( HAVE_HEAPTRACK )) || echo "note: heaptrack not installed: heaptrack rows skipped"
printf '%-12s %-10s %9s %8s %12s %10s  %s\n' workload mode wall_s x_bare trace_bytes x_heaptrk metric
for r in "${ROWS[@]}"; do echo "$r"; done
echo "(*) heaptrack runs malloc_free with $MF_HT_PAIRS pairs and storm with $STORM_HT_N allocs/thread"
echo "    (it is too slow for the full counts): compare ns_per_pair and allocs_per_s, not wall time."
echo "malloc_free and storm report their best in-process round (storm: best of $STORM_REPEAT runs too); realistic the best of $REAL_REPEAT runs."
echo "unsampled = MEMSTEP_SAMPLE_INTERVAL=1000000000000 (nothing sampled, exact counters only)."
echo "realistic goal: memstep wall <= 1.02x bare; storm goal: slowdown <= 1.5x (aim 1.25x)."
exit "$FAILED"
