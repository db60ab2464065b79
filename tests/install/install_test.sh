#!/bin/sh
# Installs the build tree into a temporary prefix and uses it as a user would:
#   1. `cmake --install BUILD --prefix TMP` puts every piece where it belongs;
#   2. a tiny CMake project finds it with find_package(memstep) and builds
#      against memstep::memstep and memstep::library; a C file compiles with
#      `pkg-config --cflags memstep`, a C++ one with memstep/scoped.h;
#   3. TMP/bin/memstep run, with no MEMSTEP_* variable and a bare PATH, finds
#      TMP's libmemstep.so and Python helper, and its report shows the steps.
# usage: install_test.sh BUILD_DIR SOURCE_DIR CMAKE CC
set -eu
export MEMSTEP_SEED="${MEMSTEP_SEED:-1}"  # samples from a fixed seed, never from the clock
build=$1 src=$2 cmake=$3 cc=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

"$cmake" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log"; fail "cmake --install"; }
p=$tmp/prefix
libdir=$(dirname "$(find "$p" -name libmemstep.so | head -n 1)")
for f in bin/memstep include/memstep/memstep.h include/memstep/scoped.h \
         share/memstep/python/memstep/__init__.py \
         share/memstep/python/startup/sitecustomize.py; do
  test -e "$p/$f" || fail "$f not installed"
done
test -e "$libdir/libmemstep.so" || fail "libmemstep.so not installed"
test -e "$libdir/cmake/memstep/memstepConfig.cmake" || fail "memstepConfig.cmake not installed"
test -e "$libdir/pkgconfig/memstep.pc" || fail "memstep.pc not installed"

# A clean environment: nothing points at the build tree.
run_clean() { env -i PATH=/usr/bin:/bin HOME="$tmp" "$@"; }

# find_package(memstep) from the prefix, both targets.
run_clean "$cmake" -S "$src/tests/install/consumer" -B "$tmp/consumer" \
  -DCMAKE_PREFIX_PATH="$p" -DCMAKE_C_COMPILER="$cc" >"$tmp/configure.log" 2>&1 || {
  cat "$tmp/configure.log"; fail "configuring the consumer project"; }
run_clean "$cmake" --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || {
  cat "$tmp/build.log"; fail "building the consumer project"; }
grep -qxF "$p/bin/memstep" "$tmp/consumer/memstep_executable.txt" ||
  fail "MEMSTEP_EXECUTABLE is $(cat "$tmp/consumer/memstep_executable.txt"), not $p/bin/memstep"
# Without the profiler the weak markers are no-ops.
"$tmp/consumer/consumer" | grep -q "consumer ok" || fail "consumer without memstep"

# pkg-config.
cflags=$(run_clean env PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags memstep) ||
  fail "pkg-config --cflags memstep"
version=$(run_clean env PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion memstep)
test -n "$version" || fail "pkg-config --modversion"
# shellcheck disable=SC2086
"$cc" $cflags -o "$tmp/consumer_pc" "$src/tests/install/consumer/consumer.c" ||
  fail "compiling with pkg-config --cflags memstep ($cflags)"
# The C++ scope objects, from the installed headers alone (scoped.h directly,
# and through memstep.h).
for h in scoped.h memstep.h; do
  printf '#include "memstep/%s"\nint main() {\n  memstep::ScopedStep s(1);\n  memstep::ScopedStage g("x");\n  return 0;\n}\n' "$h" >"$tmp/scoped_$h.cc"
  # shellcheck disable=SC2086
  "$cc" -x c++ -std=c++17 -Wall -Werror -fsyntax-only $cflags "$tmp/scoped_$h.cc" ||
    fail "compiling C++ against the installed memstep/$h ($cflags)"
done

# The installed CLI, with no environment pointing anywhere.
for prog in consumer consumer_linked; do
  run_clean "$p/bin/memstep" run --out "$tmp/run-$prog" -- "$tmp/consumer/$prog" \
    >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "memstep run $prog"; }
  run_clean "$p/bin/memstep" report "$tmp/run-$prog" --format csv -o "$tmp/steps.csv" \
    2>"$tmp/report.err" || { cat "$tmp/report.err"; fail "memstep report $prog"; }
  # Three steps, each allocating (at least) its 123456-byte block in stage
  # "work" and ending with it still live.
  tr -d '\r' <"$tmp/steps.csv" | awk -F, -v prog="$prog" '
    NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    { ++rows
      if ($col["alloc_bytes"] < 123456) bad = bad " step " $col["step"] ": alloc_bytes " $col["alloc_bytes"]
      if (rows > 1 && $col["live_bytes_end"] - prev < 123456) bad = bad " step " $col["step"] ": live grew too little"
      if (!("stage_peak:work" in col) || $col["stage_peak:work"] == "") bad = bad " step " $col["step"] ": no stage work"
      prev = $col["live_bytes_end"] }
    END { if (rows != 3 || bad != "") { print prog ": " rows " steps;" bad; exit 1 } }' ||
    { cat "$tmp/steps.csv"; fail "$prog: the report does not show the three planted steps"; }
done

# The installed Python helper is on the command's PYTHONPATH.
if [ -x /usr/bin/python3 ]; then
  run_clean "$p/bin/memstep" run --out "$tmp/run-py" -- /usr/bin/python3 -c \
    "import memstep, sys; sys.exit(0 if memstep.__file__.startswith('$p/') and memstep.enabled() else 1)" \
    >"$tmp/py.log" 2>&1 || { cat "$tmp/py.log"; fail "the Python helper from $p"; }
fi
echo "install_test: ok ($p)"
