#!/usr/bin/env bash
# Checks memstep's Python support on several CPython versions (local checks,
# not CI: CI has Debian's 3.11 only). For each interpreter:
#   layout  tests/python/pyframes_layout_test.c compiled against that
#           interpreter's own headers (include/python3.X, internal ones too):
#           every offset of preload/python/pyframes_layout.h is the real one;
#   frames  tests/python/pyframes_test.py PythonFramesTest run by it: a planted
#           leak is named at its Python file:line and function, and its
#           callers, in the report;
#   pymem   tests/python/pymem_test.py (the exact heap and Python sites of
#           small objects, the hook's state and pool size) run by it: memstep
#           sees Python's small objects;
#   freelst tests/python/freelist_test.py run by it: objects CPython hands
#           out from its free lists are named at the line that created them
#           (3.13+: the reference tracer re-stamps their blocks; 3.10-3.12:
#           the bypass of the free lists during hunts), and the bypass keeps
#           deeply nested containers and full collections whole;
#   lines   tests/python/lines_test.py run by it: a leak spread over the
#           sites of one Python line named at the line (the sites summed),
#           with a fixed T and by the hunt, which screens by line;
#   fork    tests/python/fork_test.py run by it: os.fork() under memstep
#           prints what it prints without it (3.12 and 3.13 warn when other
#           threads run: memstep's own are left out).
# A version memstep does not support (3.9, 3.14, ...) must instead say once
# that it does not read its frames, and the program must run unharmed.
#
# Usage: tests/python/cpython_versions.sh [-b BUILD_DIR] [-c CACHE_DIR] [WHAT...]
#   WHAT  an interpreter (a path), or a CPython version (3.12.1): pyenv's
#         ($PYENV_ROOT/versions/X.Y.Z) if installed, else built from the
#         python.org source tarball (or the git tag vX.Y.Z) into CACHE_DIR
#         (default ~/.cache/memstep-cpython). Default: pyenv's 3.10 to 3.13
#         and /usr/bin/python3.
#   BUILD_DIR  memstep's build (default ./build): lib/libmemstep.so,
#         bin/memstep, bin/memstep_trace_check, bin/memstep_pymem_c, python/.
# Prints PASS or FAIL per interpreter and check; exits 1 on any FAIL.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=build
CACHE=${HOME:-/root}/.cache/memstep-cpython
while getopts "b:c:h" opt; do
  case $opt in
    b) BUILD=$OPTARG ;;
    c) CACHE=$OPTARG ;;
    *) sed -n '2,30p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || { echo "no build directory" >&2; exit 2; }
PYENV_VERSIONS=${PYENV_ROOT:-/root/.pyenv}/versions

export MEMSTEP_TEST_LIB=$BUILD/lib/libmemstep.so
export MEMSTEP_TEST_CLI=$BUILD/bin/memstep
export MEMSTEP_TEST_CHECK=$BUILD/bin/memstep_trace_check
export MEMSTEP_TEST_PYDIR=$BUILD/python
MEMSTEP_TEST_PYMEM_C=$BUILD/bin/memstep_pymem_c
export MEMSTEP_TEST_PYMEM_C
export PYTHONDONTWRITEBYTECODE=1
for f in "$MEMSTEP_TEST_LIB" "$MEMSTEP_TEST_CLI" "$MEMSTEP_TEST_CHECK" "$MEMSTEP_TEST_PYMEM_C"; do
  [ -n "$f" ] && [ -e "$f" ] || { echo "missing in $BUILD: ${f:-memstep_pymem_c} (build first)" >&2; exit 2; }
done

# Builds CPython $1 (X.Y.Z) from source into $CACHE/$1; prints its python3.
build_cpython() {
  local v=$1 src=$CACHE/src/Python-$1 prefix=$CACHE/$1
  if [ -x "$prefix/bin/python3" ]; then echo "$prefix/bin/python3"; return 0; fi
  mkdir -p "$CACHE/src"
  if [ ! -d "$src" ]; then
    if ! curl -fsSL "https://www.python.org/ftp/python/$v/Python-$v.tgz" |
        tar -xz -C "$CACHE/src" 2>/dev/null; then
      rm -rf "$src"
      git clone -q --depth 1 --branch "v$v" https://github.com/python/cpython "$src" >&2 ||
        return 1
    fi
  fi
  (cd "$src" && ./configure -q --prefix="$prefix" >&2 && make -s -j"$(nproc)" >&2 &&
    make -s install >&2) || return 1
  echo "$prefix/bin/python3"
}

resolve() {
  case $1 in
    */*) echo "$1" ;;
    *)
      local v=${1#v}
      if [ -x "$PYENV_VERSIONS/$v/bin/python3" ]; then echo "$PYENV_VERSIONS/$v/bin/python3"
      else build_cpython "$v"; fi ;;
  esac
}

if [ $# -eq 0 ]; then
  set --
  for minor in 10 11 12 13; do
    p=$(ls -d "$PYENV_VERSIONS"/3."$minor".* 2>/dev/null | sort -V | tail -1)
    [ -n "$p" ] && set -- "$@" "$p/bin/python3"
  done
  [ -x /usr/bin/python3 ] && set -- "$@" /usr/bin/python3
fi

LOG=$(mktemp -d /tmp/memstep-cpython-versions.XXXXXX)
failed=0
report() {  # name check status detail
  printf '%-5s %-28s %-7s %s\n' "$3" "$1" "$2" "$4"
  [ "$3" = PASS ] || failed=1
}

for what in "$@"; do
  py=$(resolve "$what") || { report "$what" build FAIL "could not build CPython $what"; continue; }
  ver=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) ||
    { report "$what" run FAIL "not a Python interpreter: $py"; continue; }
  minor=${ver#3.}; minor=${minor%%.*}
  ft=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("Py_GIL_DISABLED") or 0)')
  name="$ver ($py)"
  [ ${#name} -gt 28 ] && name=$ver
  log=$LOG/$ver
  if [ "${ver%%.*}" != 3 ] || [ "$minor" -lt 10 ] || [ "$minor" -gt 13 ] || [ "$ft" = 1 ]; then
    # Unsupported: said once, frames native, the program unharmed.
    d=$(mktemp -d "$LOG/unsupported.XXXXXX")
    "$MEMSTEP_TEST_CLI" run --out "$d/run" -- "$py" -c 'print(sum(range(1000)))' \
      >"$d/out" 2>"$d/err"
    rc=$?
    n=$(grep -c "Python frames not read" "$d/err")
    if [ $rc -eq 0 ] && [ "$(cat "$d/out")" = 499500 ] && [ "$n" = 1 ]; then
      report "$name" unsupp PASS "$(grep "Python frames not read" "$d/err" | cut -c1-90)"
    else
      report "$name" unsupp FAIL "rc=$rc, said $n times (see $d/err)"
    fi
    continue
  fi
  inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  if cc -I"$ROOT" -I"$inc" tests/python/pyframes_layout_test.c -o "$log.layout" \
      >"$log.layout.txt" 2>&1 && "$log.layout" >>"$log.layout.txt" 2>&1; then
    report "$name" layout PASS "$(tail -1 "$log.layout.txt")"
  else
    report "$name" layout FAIL "see $log.layout.txt"
  fi
  if "$py" tests/python/pyframes_test.py PythonFramesTest >"$log.frames.txt" 2>&1; then
    report "$name" frames PASS "planted leaks named at file:line, function, callers"
  else
    report "$name" frames FAIL "see $log.frames.txt"
  fi
  if timeout 600 "$py" tests/python/pymem_test.py PymemTest.test_exact_heap_and_python_site \
      PymemTest.test_state_and_plain_c_program >"$log.pymem.txt" 2>&1; then
    report "$name" pymem PASS "small objects counted exactly and at their Python sites"
  else
    report "$name" pymem FAIL "see $log.pymem.txt"
  fi
  # Free-listed objects: re-stamped at creation (3.13+), or the lists
  # bypassed during hunts (3.10-3.12).
  if timeout 900 "$py" tests/python/freelist_test.py >"$log.freelist.txt" 2>&1; then
    report "$name" freelst PASS "kept tuples from free lists named at the keeping line"
  else
    report "$name" freelst FAIL "see $log.freelist.txt"
  fi
  if timeout 600 "$py" tests/python/lines_test.py >"$log.lines.txt" 2>&1; then
    report "$name" lines PASS "a leak spread over a line's sites named at the line"
  else
    report "$name" lines FAIL "see $log.lines.txt"
  fi
  if timeout 600 "$py" tests/python/fork_test.py >"$log.fork.txt" 2>&1; then
    report "$name" fork PASS "os.fork() says what it says without memstep"
  else
    report "$name" fork FAIL "see $log.fork.txt"
  fi
done
echo "logs: $LOG"
exit $failed
