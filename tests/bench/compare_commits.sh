#!/usr/bin/env bash
# Before/after overhead of libmemstep.so between two commits, on one machine.
#
#   tests/bench/compare_commits.sh OLD NEW [--rounds N] [--quick]
#
# Exports both commits (git archive) into a scratch directory, builds each one's
# libmemstep.so, and NEW's benchmark programs (malloc_free_bench, storm_bench,
# realistic_bench): the workload programs are the same binaries for both, so the
# only thing that differs between the OLD and NEW rows is the injected library.
# (A program compiled against the public header calls the step API through weak
# symbols, so NEW's programs run under OLD's library as long as OLD exports the
# functions they call; a missing one is simply not called.)
#
# Then N rounds (default 11), each running every workload bare, under OLD's
# library and under NEW's, with the two libraries' order alternating from one
# round to the next (bare OLD NEW, bare NEW OLD, ...: ABAB), so slow drift of
# the machine's load hits both alike and neither always runs second. The
# workloads are run_all.sh's full counts, default settings:
#   malloc_free     --pairs 20000000        figure ns_per_pair    (best round)
#   storm           --allocs-per-thread 50000000  figure allocs_per_s (best round)
#   realistic       --steps 100             figure median_step_s
#   realistic_leak  --steps 100 --leak 10240  figure s_per_step (the leak hunt runs)
#
# Output: a header (command, commits, machine, load before and after), one
# "round" line per workload and round with the three figures, then a summary
# table, then one verdict line per workload and "N passed, M failed" last.
#
# Verdict. Per round, the paired ratio r = NEW's cost / OLD's cost (cost: ns
# per pair, 1 / allocations per second, seconds per step), the two runs having
# met the same load. The verdict uses the median of r over the rounds and its
# distribution-free interval: the k-th smallest and k-th largest r, with k the
# largest for which P(Binomial(N, 1/2) <= k - 1) <= 1 % (N = 11: k = 2, a
# 98.8 % two-sided interval; N = 7: k = 1). FAIL when that interval lies wholly
# above 1.01: NEW costs more than 1 % over OLD in a way the rounds' own spread
# cannot explain. When NEW's true median cost is at most 1.01 x OLD's, a FAIL
# has probability at most 1 % per workload (at most 4 % for the four together).
# The 1 % margin is the goals' finest resolution (realistic-step-time is
# <= 1.02). Fewer than 7 rounds (or --quick, which runs tiny counts): no k
# exists, and the verdicts read "SKIP".
#
# Exits 1 when a build or a run fails or a verdict FAILs. scripts/bench_doc.py
# puts a saved output (tests/bench/compare_last_run.txt) into docs/benchmarks.md.
# Environment: MEMSTEP_COMPARE_TMP (scratch directory, default $TMPDIR or /tmp;
# removed at exit), MEMSTEP_COMPARE_CMAKE_ARGS (extra configure arguments, e.g.
# the ccache launcher), MEMSTEP_COMPARE_JOBS (build jobs, default 2).
set -u -o pipefail

usage() {
  echo "usage: compare_commits.sh OLD NEW [--rounds N] [--quick]" >&2
  exit 2
}

COMMAND=$(printf '%q ' "$0" "$@"); COMMAND=${COMMAND% }
[[ $# -ge 2 ]] || usage
OLD_ARG=$1 NEW_ARG=$2; shift 2
ROUNDS=11 QUICK=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds)
      [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || { echo "compare_commits: --rounds needs a positive integer" >&2; exit 2; }
      ROUNDS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "compare_commits: unknown argument '$1'" >&2; usage ;;
  esac
done

SRC_DIR=$(cd "$(dirname "$0")/../.." && pwd)
resolve() {
  git -C "$SRC_DIR" rev-parse --verify --quiet "$1^{commit}" ||
    { echo "compare_commits: '$1' is not a commit of $SRC_DIR" >&2; exit 2; }
}
OLD=$(resolve "$OLD_ARG") || exit 2
NEW=$(resolve "$NEW_ARG") || exit 2

TMP=$(mktemp -d "${MEMSTEP_COMPARE_TMP:-${TMPDIR:-/tmp}}/memstep_compare.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
JOBS=${MEMSTEP_COMPARE_JOBS:-2}
read -r -a CMAKE_EXTRA <<<"${MEMSTEP_COMPARE_CMAKE_ARGS:-}"

# build NAME COMMIT TARGETS...: exports COMMIT to $TMP/NAME and builds TARGETS
# (RelWithDebInfo, as scripts/build.sh does). The build log is kept in
# $TMP/NAME.log and its tail shown on failure.
build() {
  local name=$1 commit=$2; shift 2
  local dir="$TMP/$name"
  mkdir -p "$dir"
  echo "compare_commits: building $name (${commit:0:12}): $*" >&2
  if ! { git -C "$SRC_DIR" archive "$commit" | tar -x -C "$dir"; } >"$TMP/$name.log" 2>&1 ||
     ! cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
         "${CMAKE_EXTRA[@]}" >>"$TMP/$name.log" 2>&1 ||
     ! cmake --build "$dir/build" -j "$JOBS" --target "$@" >>"$TMP/$name.log" 2>&1; then
    echo "compare_commits: building $name failed; the log's tail:" >&2
    tail -20 "$TMP/$name.log" >&2
    exit 1
  fi
}
build old "$OLD" memstep_preload
build new "$NEW" memstep_preload malloc_free_bench storm_bench realistic_bench
LIB_OLD="$TMP/old/build/lib/libmemstep.so"
LIB_NEW="$TMP/new/build/lib/libmemstep.so"
BIN="$TMP/new/build/bin"
for f in "$LIB_OLD" "$LIB_NEW" "$BIN/malloc_free_bench" "$BIN/storm_bench" "$BIN/realistic_bench"; do
  [[ -f $f ]] || { echo "compare_commits: the build made no $f" >&2; exit 1; }
done

if (( QUICK )); then
  MF=(--pairs 200000); ST=(--allocs-per-thread 500000); RE=(--steps 3)
else
  MF=(--pairs 20000000); ST=(--allocs-per-thread 50000000); RE=(--steps 100)
fi
WORKLOADS=(malloc_free storm realistic realistic_leak)
declare -A ARGS=(
  [malloc_free]="$BIN/malloc_free_bench ${MF[*]}"
  [storm]="$BIN/storm_bench ${ST[*]}"
  [realistic]="$BIN/realistic_bench ${RE[*]}"
  [realistic_leak]="$BIN/realistic_bench ${RE[*]} --leak 10240"
)
declare -A KEY=([malloc_free]=ns_per_pair [storm]=allocs_per_s [realistic]=median_step_s
  [realistic_leak]=s_per_step)

LOAD_BEFORE=$(cat /proc/loadavg 2>/dev/null || echo unknown)
START_UTC=$(date -u +%Y-%m-%dT%H:%M:%SZ)
START_S=$SECONDS
FAILED_RUNS=0

# run MODE WORKLOAD: one run; prints the workload's figure (empty on failure).
run() {
  local mode=$1 w=$2 dir out rc
  RUN_ID=$(( ${RUN_ID:-0} + 1 ))
  dir="$TMP/runs/$w.$mode.$RUN_ID"
  mkdir -p "$dir"
  read -r -a cmd <<<"${ARGS[$w]}"
  case $mode in
    bare) out=$("${cmd[@]}" 2>"$dir/stderr") ;;
    old) out=$(env LD_PRELOAD="$LIB_OLD" MEMSTEP_DIR="$dir" "${cmd[@]}" 2>"$dir/stderr") ;;
    new) out=$(env LD_PRELOAD="$LIB_NEW" MEMSTEP_DIR="$dir" "${cmd[@]}" 2>"$dir/stderr") ;;
  esac
  rc=$?
  rm -rf "$dir"/*.trace
  if (( rc != 0 )); then
    echo "compare_commits: $w ($mode) exited $rc" >&2
    return 1
  fi
  sed -n "s/.*[ ]${KEY[$w]}=\([^ ]*\).*/\1/p" <<<"$out" | head -1
}

ROUND_LINES=()
for (( r = 1; r <= ROUNDS; r++ )); do
  if (( r % 2 )); then order=(bare old new); else order=(bare new old); fi
  for w in "${WORKLOADS[@]}"; do
    declare -A fig=()
    for mode in "${order[@]}"; do
      if ! fig[$mode]=$(run "$mode" "$w") || [[ -z ${fig[$mode]} ]]; then
        FAILED_RUNS=1; fig[$mode]=-
      fi
    done
    ROUND_LINES+=("$(printf 'round %-14s %2d %-13s %-14s %14s %14s %14s' "$w" "$r" "${order[1]}-first" \
      "${KEY[$w]}" "${fig[bare]}" "${fig[old]}" "${fig[new]}")")
  done
done
LOAD_AFTER=$(cat /proc/loadavg 2>/dev/null || echo unknown)

echo "memstep before/after comparison ($(nproc) cores$( (( QUICK )) && echo ', --quick: numbers are meaningless'))"
echo "command: $COMMAND"
echo "old: $(git -C "$SRC_DIR" log -1 --format='%h %s' "$OLD")"
echo "new: $(git -C "$SRC_DIR" log -1 --format='%h %s' "$NEW")"
echo "programs: new's benchmark programs under each commit's libmemstep.so"
echo "rounds: $ROUNDS"
echo "run mode: $( (( QUICK )) && echo quick || echo full)"
echo "started: $START_UTC"
echo "duration_s: $(( SECONDS - START_S ))"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "nproc: $(nproc)"
echo "kernel: $(uname -srm)"
echo "compiler: $(c++ --version 2>/dev/null | head -1)"
echo "loadavg before: $LOAD_BEFORE"
echo "loadavg after: $LOAD_AFTER"
printf 'round %-14s %2s %-13s %-14s %14s %14s %14s\n' workload r order figure bare old new
for l in "${ROUND_LINES[@]}"; do echo "$l"; done

# The summary and the verdicts, from the round lines alone (scripts/bench_doc.py
# recomputes them from the same lines).
printf '%s\n' "${ROUND_LINES[@]}" | awk -v quick="$QUICK" '
  function cost(w, v) { return w == "storm" ? 1 / v : v }
  function sort(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  }
  function median(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  # k: the largest with P(Binomial(n, 1/2) <= k - 1) <= 0.01; 0 when none.
  function order_k(n,   k, c, t, cum) {
    cum = 0; k = 0; c = 1
    for (t = 0; t < n; t++) {
      cum += c / 2 ^ n
      if (cum > 0.01) break
      k = t + 1; c = c * (n - t) / (t + 1)
    }
    return k
  }
  $1 == "round" {
    w = $2
    if (!(w in seen)) { seen[w] = 1; names[++nw] = w; key[w] = $5 }
    if ($6 == "-" || $7 == "-" || $8 == "-") { bad[w] = 1; next }
    n[w]++
    b[w, n[w]] = $6; o[w, n[w]] = $7; v[w, n[w]] = $8
    rat[w, n[w]] = cost(w, $8) / cost(w, $7)
  }
  END {
    printf "%-14s %-14s %12s %12s %12s %9s %9s %8s %17s\n", "workload", "figure", "bare_best", "old_best", "new_best", "old_x", "new_x", "new/old", "interval"
    passed = 0; failed = 0
    for (i = 1; i <= nw; i++) {
      w = names[i]; m = n[w]
      if (m == 0) { verdicts[i] = sprintf("FAIL %s: no round completed", w); failed++; continue }
      bb = b[w, 1]; ob = o[w, 1]; nb = v[w, 1]
      for (j = 1; j <= m; j++) {
        if (cost(w, b[w, j]) < cost(w, bb)) bb = b[w, j]
        if (cost(w, o[w, j]) < cost(w, ob)) ob = o[w, j]
        if (cost(w, v[w, j]) < cost(w, nb)) nb = v[w, j]
        r[j] = rat[w, j]
      }
      sort(r, m)
      med = median(r, m); k = order_k(m)
      lo = k ? r[k] : 0; hi = k ? r[m - k + 1] : 0
      if (w == "malloc_free") { ox = sprintf("+%.2fns", ob - bb); nx = sprintf("+%.2fns", nb - bb) }
      else { ox = sprintf("%.3fx", cost(w, ob) / cost(w, bb)); nx = sprintf("%.3fx", cost(w, nb) / cost(w, bb)) }
      iv = k ? sprintf("[%.3f,%.3f]", lo, hi) : "-"
      printf "%-14s %-14s %12s %12s %12s %9s %9s %8.3f %17s\n", w, key[w], bb, ob, nb, ox, nx, med, iv
      if (quick || !k) {
        verdicts[i] = sprintf("SKIP %s: median new/old %.3f over %d rounds (%s)", w, med, m, quick ? "quick" : "too few rounds for an interval")
      } else if (bad[w]) {
        verdicts[i] = sprintf("FAIL %s: a run failed", w); failed++
      } else if (lo > 1.01) {
        verdicts[i] = sprintf("FAIL %s: new/old cost %.3f, interval [%.3f, %.3f] wholly above 1.01 (%d rounds, k=%d)", w, med, lo, hi, m, k); failed++
      } else {
        verdicts[i] = sprintf("PASS %s: new/old cost %.3f, interval [%.3f, %.3f] not wholly above 1.01 (%d rounds, k=%d)", w, med, lo, hi, m, k); passed++
      }
    }
    print "best: the least cost over the rounds (malloc_free ns/pair, storm allocations/s, realistic seconds/step)."
    print "old_x, new_x: that best over bare best (malloc_free: ns added per pair)."
    print "new/old: the median over rounds of the paired ratio new cost / old cost (same round);"
    print "  interval: its k-th smallest and k-th largest, k the largest with P(Bin(rounds, 1/2) <= k-1) <= 1 %."
    print "verdicts (FAIL when the interval lies wholly above 1.01):"
    for (i = 1; i <= nw; i++) print verdicts[i]
    printf "%d passed, %d failed\n", passed, failed
    exit failed > 0
  }'
STATUS=$?
(( FAILED_RUNS )) && { echo "compare_commits: some runs failed (see above)" >&2; exit 1; }
exit $STATUS
