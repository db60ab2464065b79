#!/bin/sh
# Usage: expect_output.sh [--exit-nonzero] REGEX COMMAND [ARG...]
#
# Runs COMMAND, shows its output, and passes only when its output matches
# REGEX (grep -E) AND its exit status is the expected one: 0, or with
# --exit-nonzero any non-zero status (a check that must refuse, such as a
# configure step with a planted layering violation). ctest's
# PASS_REGULAR_EXPRESSION alone ignores the exit status, so a program that
# printed its "ok" and then crashed, or a refusal that exited 0, would pass
# (issue 12, item 10: no checker's exit status is ignored).
want=zero
if [ "$1" = --exit-nonzero ]; then
  want=nonzero
  shift
fi
[ $# -ge 2 ] || { echo "usage: $0 [--exit-nonzero] REGEX COMMAND [ARG...]" >&2; exit 2; }
regex=$1
shift
out=$(mktemp "${TMPDIR:-/tmp}/memstep-expect.XXXXXX") || exit 2
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if grep -Eq -- "$regex" "$out"; then matched=1; else matched=0; fi
rm -f "$out"
if [ "$matched" != 1 ]; then
  echo "expect_output: FAIL: the output does not match: $regex" >&2
  exit 1
fi
if [ "$want" = zero ] && [ "$rc" -ne 0 ]; then
  echo "expect_output: FAIL: exit status $rc, expected 0" >&2
  exit 1
fi
if [ "$want" = nonzero ] && [ "$rc" -eq 0 ]; then
  echo "expect_output: FAIL: exit status 0, expected a refusal (non-zero)" >&2
  exit 1
fi
exit 0
