"""The bench tests' shared checks: each prints "ok" or "FAIL" with what it
checked; finish() exits 1 when any failed (after all ran)."""

import sys

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def finish():
    if failures:
        print(f"{len(failures)} check(s) failed: " + "; ".join(failures))
        sys.exit(1)
    print("all checks passed")
