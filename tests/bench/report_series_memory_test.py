#!/usr/bin/env python3
"""Per-site step series bounded by what the sites did (issue 11 "Scale").

    report_series_memory_test.py MEMSTEP REPORT_SCALE_GEN

The report keeps, per call site, its live bytes at each step end, the part
allocated before the step, and its cohorts live at the end (bytes, samples,
variance). Stored densely that is five doubles per site per step, plus the
site's live series in the report: 48 bytes x steps x sites. Here a trace of
960 steps and about 14,000 replayed sites (10,000 stacks, host and mmap):
the dense table alone is about 650 MB, and the report that kept it peaked at
912 MB (text) on it. The series are now stored by their change points
(src/analysis/step_series.h), so the peak RSS must stay under half of the
dense table: a dense table anywhere breaks the bound.

The JSON report writes them the same way (schema memstep.report/3:
{"rows": N, "changes": [[row, value], ...]}) and streams to its output:
written densely the series alone took at least two bytes per step per site
("0,"), and the whole document was built in memory before it was written.
Its series must take at most 48 bytes per change and per site (a change is
"[row,value]": at most 10 + 24 characters and a comma), its peak RSS stay
under the same bound, and the series must read back to one value per step.
"""
import json
import os
import subprocess
import sys
import tempfile

from checks import check, finish  # tests/bench/checks.py

MEMSTEP, GEN = sys.argv[1], sys.argv[2]


def peak_rss(*args):
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.execv(MEMSTEP, [MEMSTEP, *args])
    _, status, ru = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024


with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "many.trace")
    subprocess.run([GEN, "--out", trace, "--records", "2000000", "--rate", "1000", "--stacks",
                    "10000", "--seed", "5"], check=True, capture_output=True)
    rc, rss = peak_rss("report", "--no-symbolize", "--format", "text", "-o",
                       os.path.join(tmp, "r.txt"), trace)
    check(rc == 0, "text report exits 0")
    json_path = os.path.join(tmp, "r.json")
    rc, json_rss = peak_rss("report", "--no-symbolize", "--format", "json", "-o", json_path, trace)
    check(rc == 0, "JSON report exits 0")
    with open(json_path, "rb") as f:
        out = f.read()
    doc = json.loads(out)
    steps = len(doc["steps"])
    replayed = sum(1 for s in doc["sites"] if s["kind"] in ("host", "mmap"))
    dense = 48 * steps * replayed
    changes = sum(len(s["live_bytes_by_step"]["changes"]) for s in doc["sites"])
    print(f"steps={steps} host+mmap sites={replayed} dense table={dense / 2**20:.0f} MiB "
          f"peak RSS={rss / 2**20:.0f} MiB (JSON: {json_rss / 2**20:.0f} MiB, "
          f"{len(out) / 2**20:.1f} MiB written, {changes} series changes)")
    check(steps >= 900 and replayed >= 10000, "the trace has many steps and sites")
    check(rss < dense / 2, "peak RSS under half of a dense steps x sites table")
    check(json_rss < dense / 2, "JSON report's peak RSS under half of the dense table")
    series = sum(len(json.dumps(s["live_bytes_by_step"], separators=(",", ":")))
                 for s in doc["sites"])
    print(f"series in JSON: {series / 2**20:.1f} MiB for {changes} changes; one number per step "
          f"per site would be {steps * len(doc['sites'])} numbers")
    check(changes < steps * len(doc["sites"]) / 10, "under one change in 10 steps per site")
    check(series < 48 * (changes + len(doc["sites"])),
          "the JSON series take at most 48 bytes per change and per site")
    # Each series reads back to one value per step.
    check(all(s["live_bytes_by_step"]["rows"] == steps for s in doc["sites"]),
          "every site's live_bytes_by_step has one row per step")
    ok = True
    for s in doc["sites"]:
        ch = s["live_bytes_by_step"]["changes"]
        ok = ok and all(0 <= r < steps for r, _ in ch) and all(
            a[0] < b[0] for a, b in zip(ch, ch[1:]))
    check(ok, "change rows increase within the steps")

finish()
