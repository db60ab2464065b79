#!/usr/bin/env python3
"""The same trace reported three times gives byte-identical reports.

    report_determinism_test.py MEMSTEP REPORT_SCALE_GEN

Each report is a new process, so anything that depends on where memory was
mapped or on a per-process hash seed (the iteration order of a hash table
summed into a figure: JSON `growth.retained_bytes` and
`bytes_per_step_*_half` once differed in their last digits between two
reports of one trace) shows as a difference. Two traces from
report_scale_gen: few call sites (many sampled allocations per site and step,
whose sums depend on their order) and many. Text and JSON, three runs each,
compared byte for byte. The traces have steps enough for every site's growth
to be tested, checked below so that the comparison covers those figures.
"""
import json
import os
import subprocess
import sys
import tempfile

from checks import check, finish  # tests/bench/checks.py

MEMSTEP, GEN = sys.argv[1], sys.argv[2]


def report(path, fmt):
    p = subprocess.run([MEMSTEP, "report", "--no-symbolize", "--format", fmt, path],
                       capture_output=True)
    if p.returncode != 0:
        sys.exit(f"memstep report --format {fmt} exited {p.returncode}: {p.stderr.decode()}")
    return p.stdout


with tempfile.TemporaryDirectory() as tmp:
    for stacks, seed in ((10, 9), (300, 4)):
        path = os.path.join(tmp, f"s{stacks}.trace")
        subprocess.run([GEN, "--out", path, "--records", "200000", "--rate", "1000", "--stacks",
                        str(stacks), "--seed", str(seed)], check=True, capture_output=True)
        first = report(path, "json")
        doc = json.loads(first)
        tested = [s for s in doc["sites"] if s["growth"].get("retained_bytes") is not None]
        check(len(tested) >= 3, f"{stacks} stacks: {len(tested)} sites with retained_bytes "
                                "(the sums whose order mattered)")
        for run in (2, 3):
            check(report(path, "json") == first, f"{stacks} stacks: JSON run {run} == run 1")
        text = report(path, "text")
        check(len(text) > 0, f"{stacks} stacks: text report not empty")
        for run in (2, 3):
            check(report(path, "text") == text, f"{stacks} stacks: text run {run} == run 1")

finish()
