#!/usr/bin/env bash
# The dlopen/dlclose soak (issue 12, item 6) as a benchmark: dlsoak_bench (16
# threads dlopen/dlclose a library while 8 threads allocate, in rounds of
# fixed work, one step per round) runs bare for two rounds, then under memstep
# (LD_PRELOAD, default settings) for the requested time, and the driver checks
# three goals:
#   soak-no-deadlock  the memstep run ends, and ends within 120 s of the
#                     requested time (a round takes a few seconds; a hang runs
#                     into the driver's timeout, the requested time + 600 s)
#   soak-same-result  the memstep run's exit status and per-round checksum are
#                     the bare run's, with no error (every block read back
#                     intact, every library call right)
#   soak-counters     memstep's report of the run is consistent: a clean trace
#                     (trailer, not truncated, no notice), one step per round
#                     (no step lost), exact counters that add up (live = allocated
#                     - freed), at least as many allocations and frees as the
#                     program made, nothing lost of the records memstep keeps
#
#   tests/bench/soak.sh BUILD_DIR [--seconds S | --minutes M]    (default 30 s)
#
# Output: a header, a table (one row per run), the report's figures, one line
# per goal ("PASS name: measured X (goal <= Y)" or FAIL) and "N passed, M
# failed". scripts/bench_doc.py renders tests/bench/soak_last_run.txt (the
# 10-minute soak: --minutes 10) into docs/benchmarks.md; tests/bench/run_all.sh
# runs a short soak and counts its goals with its own. Exits 1 when a goal
# FAILs. Environment: MEMSTEP_BENCH_TMP (scratch directory).
set -u -o pipefail

COMMAND=$(printf '%q ' "$0" "$@"); COMMAND=${COMMAND% }
BUILD=${1:?usage: soak.sh BUILD_DIR [--seconds S | --minutes M]}
shift
SECONDS_WANTED=30
while (( $# )); do
  case $1 in
    --seconds) SECONDS_WANTED=${2:?}; shift 2 ;;
    --minutes) SECONDS_WANTED=$(( ${2:?} * 60 )); shift 2 ;;
    *) echo "usage: soak.sh BUILD_DIR [--seconds S | --minutes M]" >&2; exit 2 ;;
  esac
done
[[ $SECONDS_WANTED =~ ^[0-9]+$ ]] || { echo "soak.sh: the duration must be whole seconds" >&2; exit 2; }

BIN="$BUILD/bin/dlsoak_bench"
DSO="$BUILD/lib/libdlsoak_dso.so"
LIB="$BUILD/lib/libmemstep.so"
CLI="$BUILD/bin/memstep"
for f in "$BIN" "$DSO" "$LIB" "$CLI"; do
  [[ -e $f ]] || { echo "soak.sh: missing $f: build first" >&2; exit 1; }
done
TMP=$(mktemp -d "${MEMSTEP_BENCH_TMP:-${TMPDIR:-/tmp}}/memstep_soak.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

LOAD_BEFORE=$(cat /proc/loadavg 2>/dev/null || echo unknown)
START_UTC=$(date -u +%Y-%m-%dT%H:%M:%SZ)
SRC_DIR=$(cd "$(dirname "$0")" && pwd)
if COMMIT=$(git -C "$SRC_DIR" log -1 --format='%h %s' 2>/dev/null); then
  git -C "$SRC_DIR" diff-index --quiet HEAD -- 2>/dev/null || COMMIT+=" (plus uncommitted changes)"
else
  COMMIT=unknown
fi

now_ns() { date +%s%N; }
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2" | head -1; }

# The bare reference: two rounds (a round's work does not depend on time).
t0=$(now_ns)
BARE_OUT=$(timeout -k 10 600 "$BIN" --lib "$DSO" --seconds 0 --min-rounds 2 2>"$TMP/bare.stderr")
BARE_RC=$?
BARE_WALL=$(awk -v a="$t0" -v b="$(now_ns)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')

# The soak under memstep.
LIMIT=$(( SECONDS_WANTED + 600 ))
mkdir -p "$TMP/out"
t0=$(now_ns)
MS_OUT=$(timeout -k 10 "$LIMIT" env LD_PRELOAD="$LIB" MEMSTEP_DIR="$TMP/out" \
         "$BIN" --lib "$DSO" --seconds "$SECONDS_WANTED" 2>"$TMP/memstep.stderr")
MS_RC=$?
MS_WALL=$(awk -v a="$t0" -v b="$(now_ns)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
LOAD_AFTER=$(cat /proc/loadavg 2>/dev/null || echo unknown)

echo "memstep dlopen soak"
echo "command: $COMMAND"
echo "started: $START_UTC"
echo "requested_s: $SECONDS_WANTED"
echo "commit: $COMMIT"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "nproc: $(nproc)"
echo "loadavg before: $LOAD_BEFORE"
echo "loadavg after: $LOAD_AFTER"
printf '%-8s %7s %8s %7s %17s %7s %12s %9s\n' run status wall_s rounds checksum errors allocs dlopens
for r in bare memstep; do
  if [[ $r == bare ]]; then out=$BARE_OUT rc=$BARE_RC wall=$BARE_WALL; else out=$MS_OUT rc=$MS_RC wall=$MS_WALL; fi
  printf '%-8s %7s %8s %7s %17s %7s %12s %9s\n' "$r" "$rc" "$wall" "$(field rounds "$out")" \
    "$(field checksum "$out")" "$(field errors "$out")" "$(field allocs "$out")" "$(field dlopens "$out")"
done

# memstep's report of the run, read back with the CLI.
TRACE=$(ls "$TMP"/out/memstep.*.trace 2>/dev/null | head -1)
REPORT=""
if [[ -n $TRACE ]]; then
  "$CLI" report "$TRACE" --format json --no-symbolize >"$TMP/report.json" 2>"$TMP/report.stderr" &&
    REPORT=$(python3 - "$TMP/report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["processes"][0]
steps = sum(1 for s in r["steps"] if s.get("pid", p["pid"]) == p["pid"])
print("steps=%d clean_exit=%d truncated=%d recording_stopped=%d notices=%d lost_kept=%d "
      "lost_samples=%d alloc_count=%d free_count=%d alloc_bytes=%d free_bytes=%d live_bytes_end=%d"
      % (steps, p["clean_exit"], p["truncated"], p["recording_stopped"], len(p["notices"]),
         p.get("lost_kept_records", 0), p.get("lost_samples", 0), p["alloc_count"],
         p["free_count"], p["alloc_bytes"], p["free_bytes"], p["live_bytes_end"]))
EOF
)
fi
echo "report: ${REPORT:-none (no trace, or the report failed: $(tail -2 "$TMP/report.stderr" 2>/dev/null | tr '\n' ' '))}"

# ---- goals ----
PASSED=0; FAILED=0
verdict() {  # NAME OK MEASURED GOAL
  local v=FAIL
  (( $2 )) && v=PASS
  [[ $v == PASS ]] && PASSED=$(( PASSED + 1 )) || FAILED=$(( FAILED + 1 ))
  echo "$v $1: measured $3 (goal $4)"
}

# no deadlock: the run ended (not killed by the timeout) within 120 s of the request.
if (( MS_RC == 124 || MS_RC == 137 )); then
  echo "inconsistent: the memstep run was killed after ${LIMIT} s (deadlock?)"
  verdict soak-no-deadlock 0 "nothing (killed after $LIMIT s)" "<= 120 s"
else
  OVER=$(awk -v w="$MS_WALL" -v s="$SECONDS_WANTED" 'BEGIN { d = w - s; printf "%.1f", d < 0 ? 0 : d }')
  verdict soak-no-deadlock "$(awk -v d="$OVER" 'BEGIN { print (d <= 120) }')" "$OVER s past the requested time" "<= 120 s"
fi

# same result as bare.
DIFF=0
[[ $BARE_RC == 0 && -n $(field checksum "$BARE_OUT") ]] || { echo "inconsistent: the bare run failed (status $BARE_RC)"; DIFF=$(( DIFF + 1 )); }
[[ $MS_RC == "$BARE_RC" ]] || { echo "inconsistent: exit status $MS_RC under memstep, $BARE_RC bare"; DIFF=$(( DIFF + 1 )); }
[[ $(field checksum "$MS_OUT") == "$(field checksum "$BARE_OUT")" ]] ||
  { echo "inconsistent: checksum $(field checksum "$MS_OUT") under memstep, $(field checksum "$BARE_OUT") bare"; DIFF=$(( DIFF + 1 )); }
[[ $(field errors "$MS_OUT") == 0 ]] || { echo "inconsistent: $(field errors "$MS_OUT") errors under memstep"; DIFF=$(( DIFF + 1 )); }
verdict soak-same-result "$(( DIFF == 0 ))" "$DIFF differences" "<= 0"

# memstep's counters.
BAD=0
check() {  # DESCRIPTION CONDITION(awk expression over the report's fields)
  local ok
  ok=$(awk -v r="$REPORT rounds=$(field rounds "$MS_OUT") allocs=$(field allocs "$MS_OUT")" -v e="$2" '
    BEGIN { n = split(r, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); f[p[1]] = p[2] + 0 }
            if (e == "steps") print (f["steps"] == f["rounds"])
            else if (e == "clean") print (f["clean_exit"] == 1 && f["truncated"] == 0 && f["recording_stopped"] == 0 && f["notices"] == 0)
            else if (e == "live") print (f["live_bytes_end"] == f["alloc_bytes"] - f["free_bytes"])
            else if (e == "allocs") print (f["alloc_count"] >= f["allocs"] && f["free_count"] >= f["allocs"])
            else if (e == "kept") print (f["lost_kept"] == 0) }')
  [[ $ok == 1 ]] || { echo "inconsistent: $1"; BAD=$(( BAD + 1 )); }
}
if [[ -z $REPORT ]]; then
  echo "inconsistent: no report"; BAD=1
else
  check "steps in the report != rounds the program ran" steps
  check "the trace is not clean (trailer, truncation, notices)" clean
  check "live bytes at the end != allocated - freed" live
  check "fewer allocations or frees counted than the program made" allocs
  check "records memstep keeps were lost" kept
fi
verdict soak-counters "$(( BAD == 0 ))" "$BAD inconsistencies" "<= 0"
echo "$PASSED passed, $FAILED failed"
(( FAILED == 0 ))
