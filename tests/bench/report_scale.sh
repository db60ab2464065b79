#!/usr/bin/env bash
# The report scale benchmark (issue 11 "Scale"; docs/benchmarks.md "Report
# scale"): generates a realistic zstd-compressed trace of SIZE MiB (default
# 1024) with report_scale_gen, then runs report_scale_bench on it: every
# format and `memstep diff` timed as child processes (wall and CPU seconds,
# peak RSS), the time split (scan, one re-read, whole analysis, growth
# statistics), and one PASS/FAIL line per goal (every format within 60 wall
# seconds per GiB of its input, diff's input being both traces, and under
# 2 GiB), then "N passed, M failed".
#
#   tests/bench/report_scale.sh BUILD_DIR [SIZE_MIB]
#
# Save a full run's output as tests/bench/report_scale_last_run.txt and run
# scripts/bench_doc.py to regenerate docs/benchmarks.md from it.
# Environment: MEMSTEP_BENCH_TMP (scratch directory, default $TMPDIR or /tmp;
# it needs SIZE MiB free).
set -u -o pipefail
BUILD=${1:?usage: report_scale.sh BUILD_DIR [SIZE_MIB]}
SIZE=${2:-1024}
BIN="${MEMSTEP_SCALE_BIN:-$BUILD/bin}"  # MEMSTEP_SCALE_BIN: where the three programs are
for b in memstep report_scale_gen report_scale_bench; do
  [[ -x $BIN/$b ]] || { echo "missing $BIN/$b: build first" >&2; exit 1; }
done
TMP=$(mktemp -d "${MEMSTEP_BENCH_TMP:-${TMPDIR:-/tmp}}/memstep_scale.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
SRC_DIR=$(cd "$(dirname "$0")" && pwd)
COMMIT=$(git -C "$SRC_DIR" log -1 --format='%h %s' 2>/dev/null || echo unknown)
git -C "$SRC_DIR" diff-index --quiet HEAD -- 2>/dev/null || COMMIT+=" (plus uncommitted changes)"
echo "memstep report scale benchmark"
echo "command: $(printf '%q ' "$0" "$@")"
echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit: $COMMIT"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "nproc: $(nproc)"
echo "memory: $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
echo "loadavg before: $(cat /proc/loadavg)"
T0=$SECONDS
GEN_OUT=$("$BIN/report_scale_gen" --out "$TMP/run.trace" --mib "$SIZE" --seed 1) || exit 1
echo "generated: $GEN_OUT"
echo "generated in $(( SECONDS - T0 )) s"
PIN=0
(( $(nproc) >= 8 )) && PIN=1  # formats at once, each run on 2 CPUs of its own
"$BIN/report_scale_bench" --memstep "$BIN/memstep" --trace "$TMP/run.trace" --pin2 "$PIN"
RC=$?
echo "loadavg after: $(cat /proc/loadavg)"
exit $RC
