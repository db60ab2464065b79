#!/usr/bin/env bash
# Runs every benchmark bare, under memstep (LD_PRELOAD, default settings) and
# under heaptrack, and prints one table: wall time, ratio vs bare, trace size
# and heaptrack's trace size over memstep's, plus the per-benchmark figures of
# merit. heaptrack is too slow for the full malloc_free and storm counts, so it
# runs smaller ones; those smaller counts also run bare and under memstep
# (rows "bare@ht", "memstep@ht"), and trace sizes and heaptrack's slowdown are
# only ever compared between runs with identical arguments.
#
#   tests/bench/run_all.sh BUILD_DIR [--quick] [--soak-minutes M]
#
# The output starts with a header (exact command, machine, compiler, glibc,
# commit, load average before and after), then the table, then one line per
# project goal, "PASS name: measured X (goal <= Y)" or "FAIL ...", and last
# "N passed, M failed" alone on a line. scripts/bench_doc.py turns saved
# outputs of full runs into docs/benchmarks.md.
#
# --quick uses tiny iteration counts (the ctest smoke test); numbers from it
# mean nothing, so its goal lines read "SKIP (quick) ..." and never fail.
# Works with whatever is built: without libmemstep.so or heaptrack their rows
# are left out (and a note says so); in a full run the goals they measure then
# FAIL as "measured nothing". Exits 1 when any run fails (a crash under memstep
# fails the smoke test) or, in a full run, when any goal FAILs, after the
# table and the goal lines.
# It also runs the dlopen/dlclose soak (tests/bench/soak.sh: no deadlock, the
# program's result identical, memstep's counters consistent) for 20 s (5 s
# with --quick), or M minutes with --soak-minutes M, and counts its three
# goals with the others (--quick: SKIP lines, but a soak that fails still
# makes the driver exit 1). The 10-minute soak's own output is
# tests/bench/soak_last_run.txt (soak.sh BUILD --minutes 10).
# Environment: MEMSTEP_BENCH_TMP (scratch directory, default $TMPDIR or /tmp).
set -u -o pipefail

COMMAND=$(printf '%q ' "$0" "$@"); COMMAND=${COMMAND% }
START_DIR=$PWD
LOAD_BEFORE=$(cat /proc/loadavg 2>/dev/null || echo unknown)
START_UTC=$(date -u +%Y-%m-%dT%H:%M:%SZ)
START_S=$SECONDS

BUILD=${1:?usage: run_all.sh BUILD_DIR [--quick] [--soak-minutes M]}
shift
QUICK=0
SOAK_S=""
while (( $# )); do
  case $1 in
    --quick) QUICK=1; shift ;;
    --soak-minutes) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "run_all.sh: --soak-minutes takes whole minutes" >&2; exit 2; }
                    SOAK_S=$(( $2 * 60 )); shift 2 ;;
    *) echo "usage: run_all.sh BUILD_DIR [--quick] [--soak-minutes M]" >&2; exit 2 ;;
  esac
done
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
  SOAK_S=${SOAK_S:-5}
else
  MF_PAIRS=20000000; MF_HT_PAIRS=2000000; MF_REPEAT=5
  STORM_N=50000000; STORM_HT_N=1000000; STORM_REPEAT=3
  REAL_STEPS=100; REAL_REPEAT=4
  SOAK_S=${SOAK_S:-20}
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

# better KEY A B: whether figure A is better than B (allocs_per_s: higher;
# the times: lower); an empty B (no run yet, or none parsed) loses.
better() {
  awk -v k="$1" -v a="$2" -v b="$3" 'BEGIN {
    if (b == "") exit 0; if (a == "") exit 1;
    if (k == "allocs_per_s") exit !(a + 0 > b + 0); exit !(a + 0 < b + 0) }'
}

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
    s_per_step) out+=" step_x=$(ratio "$v" "$b")" ;;
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
  # best of each kept, so slow drift on a shared machine hits all alike.
  # "Best" is by the run's figure of merit (the goals are judged on it), not
  # by its wall time: a run can start fast and be slowed by a neighbour in
  # its measured rounds, and was then kept with a slow figure.
  local -A w o z m
  local i mode
  for (( i = 0; i < repeat; i++ )); do
    for mode in "${modes[@]}"; do
      run "$mode" "$name" "${args[@]}"
      local merit; merit=$(field "$key")
      if [[ -z ${w[$mode]:-} ]] || better "$key" "$merit" "${m[$mode]}"; then
        w[$mode]=$WALL; o[$mode]=$OUT; z[$mode]=$SIZE; m[$mode]=$merit
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
    OUT=${o[$mode]}; MET[$name/$mode]=$(field "$key"); SZ[$name/$mode]=${z[$mode]}
  done
  (( HAVE_HEAPTRACK && same )) && SZ[$name/heaptrack]=$ht_size
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

# Figures the goals read, per "workload/mode": the metric (MET) and the trace
# bytes (SZ) of the full-count rows.
declare -A MET SZ

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
# The same loop with a planted 10 KiB/step leak of 512 B blocks: memstep's leak
# hunt samples densely while it runs, so the mean step (not the median) is
# what it costs. heaptrack is not run again for it.
SAVED_HAVE_HEAPTRACK=$HAVE_HEAPTRACK; HAVE_HEAPTRACK=0
bench realistic_leak s_per_step "$REAL_REPEAT" "${RE[@]}" --steps "$REAL_STEPS" --leak 10240 -- \
  "${RE[@]}" --steps "$REAL_STEPS" --leak 10240
HAVE_HEAPTRACK=$SAVED_HAVE_HEAPTRACK

# The dlopen/dlclose soak (soak.sh checks its own goals; needs libmemstep.so).
SOAK_GOALS=()
if (( HAVE_MEMSTEP )); then
  SOAK_OUT=$("$(dirname "$0")/soak.sh" "$BUILD" --seconds "$SOAK_S")
  SOAK_RC=$?
  while read -r r rc wall rounds sum errors allocs dlopens; do
    [[ ($r == bare || $r == memstep) && $rc =~ ^[0-9]+$ ]] || continue  # the table's rows
    row dlsoak "$r" "$wall" - - - "status=$rc rounds=$rounds checksum=$sum errors=$errors allocs=$allocs dlopens=$dlopens"
  done <<<"$SOAK_OUT"
  while IFS= read -r line; do
    case $line in
      "PASS soak-"*|"FAIL soak-"*) SOAK_GOALS+=("$line") ;;
      "inconsistent: "*|"report: "*) echo "soak $line" >&2 ;;
    esac
  done <<<"$SOAK_OUT"
  if (( SOAK_RC != 0 )); then
    FAILED=1
    echo "error: the soak failed: $(grep -E '^(FAIL|inconsistent)' <<<"$SOAK_OUT" | tr '\n' ' ')" >&2
  fi
fi

LOAD_AFTER=$(cat /proc/loadavg 2>/dev/null || echo unknown)
ELAPSED=$(( SECONDS - START_S ))

# ---- header: what ran, where, on what -------------------------------------
first_line() { "$@" 2>/dev/null | head -1; }
cache_var() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" 2>/dev/null | head -1; }
CXX_PATH=$(cache_var CMAKE_CXX_COMPILER)
CXX_VERSION=$( [[ -n $CXX_PATH ]] && first_line "$CXX_PATH" --version)
GLIBC=$(getconf GNU_LIBC_VERSION 2>/dev/null); GLIBC=${GLIBC#glibc }
GLIBC_PKG=$(dpkg-query -W -f='${Version}' libc6 2>/dev/null || true)
SRC_DIR=$(cd "$(dirname "$0")" && pwd)
# Read-only git: the commit, and whether the tree built differs from it.
if COMMIT=$(git -C "$SRC_DIR" log -1 --format='%h %s' 2>/dev/null); then
  git -C "$SRC_DIR" diff-index --quiet HEAD -- 2>/dev/null || COMMIT+=" (plus uncommitted changes)"
else
  COMMIT=unknown
fi
OS=$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null | head -1)
VIRT=$(systemd-detect-virt 2>/dev/null || true)

echo "memstep benchmarks ($(nproc) cores$( (( QUICK )) && echo ', --quick: numbers are meaningless'))"
echo "command: $COMMAND"
echo "directory: $START_DIR"
echo "run mode: $( (( QUICK )) && echo quick || echo full)"
echo "started: $START_UTC"
echo "duration_s: $ELAPSED"
echo "commit: $COMMIT"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "nproc: $(nproc)"
echo "memory: $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "kernel: $(uname -srm)"
echo "os: ${OS:-unknown}${VIRT:+ (virtualization: $VIRT)}"
echo "glibc: ${GLIBC:-unknown}${GLIBC_PKG:+ (package $GLIBC_PKG)}"
echo "compiler: ${CXX_PATH:-unknown}${CXX_VERSION:+ ($CXX_VERSION)}, build type $(cache_var CMAKE_BUILD_TYPE)"
echo "heaptrack: $( (( HAVE_HEAPTRACK )) && first_line heaptrack --version || echo 'not installed')"
echo "loadavg before: $LOAD_BEFORE"
echo "loadavg after: $LOAD_AFTER"
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
  (step_x: over bare's); bare/memstep/unsampled run interleaved, the best figure of
  $MF_REPEAT (malloc_free) / $STORM_REPEAT (storm) / $REAL_REPEAT (realistic) runs kept (@ht rows: best wall of as many runs).
unsampled = MEMSTEP_SAMPLE_INTERVAL=1000000000000 (nothing sampled, exact counters only).
goal definitions (memstep rows at the full counts, default settings):
  realistic-step-time: memstep median step / bare median step (step_x) <= 1.02
  storm-alloc-rate: bare allocs/s / memstep allocs/s (slowdown) <= 1.40 (aim 1.25)
  malloc-free-added-ns: memstep ns/pair - bare ns/pair (added_ns) <= 3.00
  realistic-trace-size: heaptrack trace bytes / memstep trace bytes (ht/trace) >= 10
  realistic-leak-step-time: with a 10 KiB/step leak, memstep mean step / bare mean step <= 1.10
    (the leak hunt's default CPU budget, 10 % while it runs)
  soak-*: tests/bench/soak.sh for ${SOAK_S} s (dlsoak rows): no deadlock, the same result as
    bare, memstep's counters consistent
EOF

# ---- goals -----------------------------------------------------------------
# goal NAME VALUE OP LIMIT UNIT DECIMALS [AIM] [WHY]: VALUE is compared after
# rounding to DECIMALS, the precision it is printed with, so a line never
# shows a passing number for a miss. An empty VALUE is "not measured" (WHY).
PASSED=0; GOAL_FAILED=0
meets() { awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN { exit !(op == "<=" ? v + 0 <= l + 0 : v + 0 >= l + 0) }'; }
goal() {
  local name=$1 value=$2 op=$3 limit=$4 unit=$5 dec=$6 aim=${7:-} why=${8:-}
  local shown lim verdict aim_note=""
  lim=$limit
  if [[ -z $value ]]; then
    shown="nothing${why:+ ($why)}"
    verdict=FAIL
  else
    shown=$(awk -v v="$value" -v d="$dec" 'BEGIN { printf "%.*f", d, v }')
    if meets "$shown" "$op" "$lim"; then verdict=PASS; else verdict=FAIL; fi
    if [[ -n $aim ]]; then
      aim_note="; aim $op $aim$unit: $(meets "$shown" "$op" "$aim" && echo reached || echo 'not reached')"
    fi
    shown+=$unit
  fi
  (( QUICK )) && verdict="SKIP (quick)"
  case $verdict in
    PASS) PASSED=$(( PASSED + 1 )) ;;
    FAIL) GOAL_FAILED=$(( GOAL_FAILED + 1 )) ;;
  esac
  echo "$verdict $name: measured $shown (goal $op $lim$unit$aim_note)"
}

# div A B / minus A B: empty when either side is missing (a run failed or its
# mode did not run) or the divisor is not positive.
div() { [[ -n ${1:-} && -n ${2:-} && $1 != - && $2 != - ]] && awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.17g", a / b }'; }
minus() { [[ -n ${1:-} && -n ${2:-} ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.17g", a - b }'; }

WHY="a run failed"
(( HAVE_MEMSTEP )) || WHY="libmemstep.so not built"
WHY_HT=$WHY
(( HAVE_HEAPTRACK )) || WHY_HT="heaptrack not installed"
echo "goals$( (( QUICK )) && echo ' (--quick: not checked)'):"
goal realistic-step-time "$(div "${MET[realistic/memstep]:-}" "${MET[realistic/bare]:-}")" \
  "<=" 1.02 x 3 "" "$WHY"
goal storm-alloc-rate "$(div "${MET[storm/bare]:-}" "${MET[storm/memstep]:-}")" \
  "<=" 1.40 x 3 1.25 "$WHY"
goal malloc-free-added-ns "$(minus "${MET[malloc_free/memstep]:-}" "${MET[malloc_free/bare]:-}")" \
  "<=" 3.00 " ns" 2 "" "$WHY"
goal realistic-trace-size "$(div "${SZ[realistic/heaptrack]:-}" "${SZ[realistic/memstep]:-}")" \
  ">=" 10 x 1 "" "$WHY_HT"
goal realistic-leak-step-time \
  "$(div "${MET[realistic_leak/memstep]:-}" "${MET[realistic_leak/bare]:-}")" "<=" 1.10 x 3 "" "$WHY"
# The soak's goal lines, as soak.sh printed them (missing: memstep not built).
if (( ${#SOAK_GOALS[@]} == 0 )); then
  for name in soak-no-deadlock soak-same-result soak-counters; do
    goal "$name" "" "<=" 0 "" 0 "" "$WHY"
  done
fi
for line in "${SOAK_GOALS[@]}"; do
  if (( QUICK )); then
    echo "SKIP (quick) ${line#* }"
  else
    echo "$line"
    case $line in PASS*) PASSED=$(( PASSED + 1 )) ;; *) GOAL_FAILED=$(( GOAL_FAILED + 1 )) ;; esac
  fi
done
echo "$PASSED passed, $GOAL_FAILED failed"
(( GOAL_FAILED )) && FAILED=1
exit "$FAILED"
