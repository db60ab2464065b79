#!/usr/bin/env python3
"""function_length.py finds exactly the planted long functions.

Runs the checker on planted/long_functions.cc and compares what it reports
with the file's "expect: NAME LINES" markers: a function of 80 lines passes,
81 fails, braces in comments, strings, character and raw string literals,
lambdas, a member function, an extern "C" block and a long initializer
table are handled. Then checks that the real tree's scan sees the functions
named in the task (so an empty or broken scan cannot pass).
"""

import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
checker = os.path.join(here, "function_length.py")
planted = os.path.join(here, "planted", "long_functions.cc")

with open(planted) as f:
    expected = sorted(re.findall(r"expect: (\w+) (\d+)", f.read()))
run = subprocess.run([sys.executable, checker, "--limit", "80", "--files", planted],
                     capture_output=True, text=True)
found = sorted(re.findall(r"^\s*(\d+) \S+:\d+ (\w+)$", run.stdout, re.M))
found = sorted((name, length) for length, name in found)
ok = True
if run.returncode != 1:
    print(f"FAIL: exit status {run.returncode}, expected 1\n{run.stdout}{run.stderr}")
    ok = False
if found != expected:
    print(f"FAIL: reported {found}, planted {expected}\n{run.stdout}")
    ok = False
# With a limit above every planted function, nothing is reported and it exits 0.
run = subprocess.run([sys.executable, checker, "--limit", "90", "--files", planted],
                     capture_output=True, text=True)
if run.returncode != 0 or "0 over 90" not in run.stdout:
    print(f"FAIL: --limit 90 should pass\n{run.stdout}{run.stderr}")
    ok = False
# The real tree: a limit of 10 lines must find many functions, among them
# ReportMain (the scan reaches tools/) and functions in src/ and preload/.
root = os.path.dirname(os.path.dirname(here))
run = subprocess.run([sys.executable, checker, "--limit", "10", root], capture_output=True,
                     text=True)
for needle in (" tools/memstep/report_command.cc:", " src/", " preload/", "ReportMain"):
    if needle not in run.stdout:
        print(f"FAIL: a scan of the tree with --limit 10 does not report '{needle}'")
        ok = False
print("PASS" if ok else "FAILED")
sys.exit(0 if ok else 1)
