#!/bin/sh
# The GPU-free checks of the real-GPU check's files (tests/gpu/CMakeLists.txt).
# usage: check_scripts.sh REPO_ROOT   (PYTHON: the Python to compile with)
set -u
root=$1
py=${PYTHON:-python3}
status=0
for f in "$root/tests/gpu/real_gpu_check.sh" "$root/scripts/gpu_bundle.sh" "$root/tests/bench/torch_blocks_bench.sh" "$root/tests/gpu/prepare_carry.sh"; do
  bash -n "$f" || { echo "syntax error: $f"; status=1; }
  [ -x "$f" ] || { echo "not executable: $f"; status=1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in gpu_train.py gpu_check_report.py; do
  "$py" -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
    "$root/tests/gpu/$f" "$tmp/$f.pyc" || { echo "does not compile: $f"; status=1; }
done
# Bad usage: exit status 2 and a message, before anything is built.
expect2() {
  "$@" >"$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { echo "expected exit 2, got $rc: $*"; cat "$tmp/out"; status=1; }
}
expect2 "$root/tests/gpu/real_gpu_check.sh"
expect2 "$root/tests/gpu/real_gpu_check.sh" "$tmp/not-a-bundle"
expect2 "$root/tests/gpu/real_gpu_check.sh" --bogus
expect2 "$root/scripts/gpu_bundle.sh"
expect2 "$root/tests/gpu/prepare_carry.sh" --bogus
expect2 "$root/tests/bench/torch_blocks_bench.sh" "$tmp/no-build"
expect2 "$py" "$root/tests/gpu/gpu_check_report.py" nonsense
[ $status -eq 0 ] && echo "gpu scripts ok"
exit $status
