#!/usr/bin/env bash
# Usage: tests/suites/numpy_pytest.sh BUILD_DIR
#
# Runs a slice of NumPy's own test suite (shipped by Debian's python3-numpy
# 1.24 in /usr/lib/python3/dist-packages/numpy/*/tests, run with
# python3-pytest; numpy's conftest.py imports python3-hypothesis) with
# Debian's /usr/bin/python3 twice: without memstep, then under
#   BUILD_DIR/bin/memstep run --out TRACES -- /usr/bin/python3 -m pytest ...
# Installs nothing: see README.md for the Debian packages.
#
# Why numpy: a large real test suite we did not write that runs offline from
# Debian packages, and an allocation-heavy C extension (array buffers through
# malloc/calloc/realloc and numpy's own caches, large arrays through mmap,
# memmap files, threads in linalg/BLAS). The slice: numpy.linalg, fft,
# random, ma, polynomial, matrixlib, and from numpy.core and numpy.lib the
# array, ufunc, dtype, indexing, nditer and regression tests, np.save/np.load
# (test_io, test_format: large archives, memmap).
# Left out: the rest of numpy.core (9 minutes here), the rest of numpy.lib
# (minutes), core/tests/test_mem_policy.py (compiles C extensions: 5 minutes),
# f2py/distutils (need compilers and build trees), typing (mypy).
#
# "Same results", strictly (tests/suites/suite_compare.py): every test
# case's outcome in pytest's --junitxml (passed, failure, error, skipped,
# xfail) is identical in both runs, the exit statuses are equal, and
# `memstep report TRACES --format json` exits 0 and shows the pytest process
# with allocations, a clean exit and an untruncated trace.
# Tests skipped without memstep too (no compiler-built extensions, no
# network, platform-specific) are accepted as long as they are skipped in
# both runs.
#
# Determinism: numpy's conftest loads hypothesis's "np.test() profile"
# (derandomize=True, no database) since there is no pytest.ini next to the
# installed package. NPY_AVAILABLE_MEM=4GB: numpy's @requires_memory tests
# otherwise read MemAvailable, which other jobs on the machine change between
# the two runs (and one numpy.lib test used ~23 GB here). The runs start from
# `env -i` with PATH, HOME, LANG=C.UTF-8, USER/LOGNAME and a private TMPDIR
# (the caller's PYTHON*, LD_PRELOAD and MEMSTEP_* variables are dropped).
# KEEP_WORK=1 keeps the work directory on success (kept on failure).
#
# Output: progress and timings, MISMATCH / TRACE CHECK lines for each
# difference, then a final line "N passed, M failed" (N: test cases and the
# exit status with the same outcome in both runs; M: differences plus failed
# trace checks). Exit 0 when M is 0, 1 on any difference, 2 when the
# prerequisites are missing (then the last line is "0 passed, 1 failed").

set -uo pipefail

die() { echo "numpy_pytest: FAIL: $*" >&2; echo "0 passed, 1 failed"; exit 2; }

[ $# -eq 1 ] || die "usage: $0 BUILD_DIR"
BUILD_DIR=$(cd "$1" 2>/dev/null && pwd) || die "no such build directory: $1"
MEMSTEP=$BUILD_DIR/bin/memstep
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
NP=/usr/lib/python3/dist-packages/numpy
RUN_TIMEOUT=${RUN_TIMEOUT:-1200}

TESTS=(
  "$NP/linalg" "$NP/fft" "$NP/random" "$NP/ma" "$NP/polynomial" "$NP/matrixlib"
  "$NP/core/tests/test_multiarray.py" "$NP/core/tests/test_umath.py"
  "$NP/core/tests/test_numeric.py" "$NP/core/tests/test_dtype.py"
  "$NP/core/tests/test_indexing.py" "$NP/core/tests/test_nditer.py"
  "$NP/core/tests/test_shape_base.py" "$NP/core/tests/test_regression.py"
  "$NP/lib/tests/test_io.py" "$NP/lib/tests/test_format.py"
  "$NP/lib/tests/test_function_base.py"
)
PYTEST_ARGS=(-m pytest -p no:cacheprovider -q)

[ -x "$MEMSTEP" ] || die "$MEMSTEP not found or not executable (build memstep first)"
[ -x "$PY" ] || die "$PY not found (Debian package python3)"
[ -f "$NP/core/tests/test_multiarray.py" ] && [ -f "$NP/conftest.py" ] \
  || die "numpy's tests are missing: install Debian's python3-numpy"
"$PY" -c 'import pytest' 2>/dev/null || die "pytest is missing: install Debian's python3-pytest"
"$PY" -c 'import hypothesis' 2>/dev/null || die "hypothesis is missing: install Debian's python3-hypothesis"
for t in "${TESTS[@]}"; do
  [ -e "$t" ] || die "missing test path $t (python3-numpy version changed?)"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/memstep-numpy.XXXXXX") || die "mktemp failed"
mkdir -p "$WORK/tmp-a" "$WORK/tmp-b"

clean_env() {  # clean_env TMPDIR COMMAND...
  local tmp=$1
  shift
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME="${HOME:-/root}" LANG=C.UTF-8 USER="${USER:-$(id -un)}" \
    LOGNAME="${LOGNAME:-$(id -un)}" TMPDIR="$tmp" NPY_AVAILABLE_MEM=4GB "$@"
}

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }

echo "numpy_pytest: numpy $("$PY" -c 'import numpy; print(numpy.__version__)'), ${#TESTS[@]} test paths; work directory $WORK"
echo "numpy_pytest: memstep: $MEMSTEP ($("$MEMSTEP" --version 2>&1 | head -1))"

echo "numpy_pytest: run 1/2: without memstep"
t0=$(now)
(cd "$WORK" && clean_env "$WORK/tmp-a" timeout -k 30 "$RUN_TIMEOUT" \
  "$PY" "${PYTEST_ARGS[@]}" --junitxml="$WORK/a.xml" "${TESTS[@]}") >"$WORK/a.log" 2>&1
rc_a=$?
t1=$(now)
echo "numpy_pytest: run 1/2: exit $rc_a in $(secs "$t0" "$t1") s: $(tail -1 "$WORK/a.log")"

echo "numpy_pytest: run 2/2: under memstep run --out $WORK/traces"
t0=$(now)
(cd "$WORK" && clean_env "$WORK/tmp-b" timeout -k 30 "$RUN_TIMEOUT" \
  "$MEMSTEP" run --out "$WORK/traces" -- \
  "$PY" "${PYTEST_ARGS[@]}" --junitxml="$WORK/b.xml" "${TESTS[@]}") >"$WORK/b.log" 2>&1
rc_b=$?
t1=$(now)
echo "numpy_pytest: run 2/2: exit $rc_b in $(secs "$t0" "$t1") s: $(grep -v '^memstep: ' "$WORK/b.log" | tail -1)"
if grep -v -E '^memstep: (run directory|see the report)' "$WORK/b.log" | grep -q '^memstep: '; then
  echo "numpy_pytest: note: memstep's own messages in run 2 (not a result difference):"
  grep '^memstep: ' "$WORK/b.log" | grep -v -E 'run directory|see the report' | sort | uniq -c | sed 's/^/  /'
fi

. "$HERE/common.sh"
report_traces numpy_pytest  # sets rc_r

"$PY" "$HERE/suite_compare.py" pytest --label numpy_pytest \
  --a-xml "$WORK/a.xml" --b-xml "$WORK/b.xml" --a-rc "$rc_a" --b-rc "$rc_b" \
  --report "$WORK/report.json" --report-rc "$rc_r" >"$WORK/compare.out" 2>&1
rc_c=$?
finish numpy_pytest $rc_c
