#!/usr/bin/env python3
"""Streaming `memstep report` (docs/architecture.md "Streaming reports").

    report_stream_test.py MEMSTEP REPORT_SCALE_GEN

1. Bounded memory: a 6M-record trace (report_scale_gen, realistic: several
   threads, records up to one flush cycle late) is reported with a peak RSS
   under 256 MiB. The whole-file reader this replaced kept every record as a
   120-byte event (plus the chunk's copy while merging): at least 720 MB here,
   so the bound fails if the analysis loads the trace whole again.
2. Same result: the same records with every chunk time 0 (no reorder bound
   known: the reader holds everything to the end, the whole-file order) give
   byte-identical text and JSON reports.
3. A trace that breaks the bound (one ALLOC in 500 written 5 s late) is read
   whole with a warning naming the records, and reports the same figures.
4. Progress: with stderr a terminal (a pty) a progress bar is drawn ('\\r',
   "memstep: reading", a percentage); with stderr a pipe nothing but the
   report's own warnings is written.
"""
import json
import os
import pty
import re
import select
import subprocess
import sys
import tempfile

from checks import check, finish  # tests/bench/checks.py

MEMSTEP, GEN = sys.argv[1], sys.argv[2]


def gen(path, *args):
    out = subprocess.run([GEN, "--out", path, "--seed", "3", *args], check=True,
                         capture_output=True, text=True).stdout
    return int(re.search(r"records=(\d+)", out).group(1))


def report(path, *args):
    """Runs memstep report; returns (rc, stdout, stderr, peak RSS in bytes)."""
    p = subprocess.Popen([MEMSTEP, "report", "--no-symbolize", *args, path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()  # reads both pipes, then reaps: wait4 below gets rusage
    return p.returncode, out.decode(), err.decode()


def peak_rss(path, *args):
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.execv(MEMSTEP, [MEMSTEP, "report", "--no-symbolize", *args, path])
    _, status, ru = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024


def normalized_json(text, path):
    d = json.loads(text.replace(path, "TRACE"))
    d.pop("warnings", None)
    return d


with tempfile.TemporaryDirectory() as tmp:
    # 1. Memory.
    big = os.path.join(tmp, "big.trace")
    records = gen(big, "--records", "6000000")
    rc, rss = peak_rss(big, "--format", "json", "-o", os.path.join(tmp, "big.json"))
    old_floor = records * 120
    print(f"records={records} peak_rss={rss / 2**20:.1f} MiB "
          f"(whole-file reader: >= {old_floor / 2**20:.0f} MiB)")
    check(rc == 0, "report on the 6M-record trace exits 0")
    check(rss < 256 * 2**20, "peak RSS under 256 MiB")
    check(rss < old_floor / 2, "peak RSS under half of what the whole-file reader needs")

    # 2. Streaming order == whole-file order.
    timed = os.path.join(tmp, "a", "run.trace")
    untimed = os.path.join(tmp, "b", "run.trace")
    os.makedirs(os.path.dirname(timed))
    os.makedirs(os.path.dirname(untimed))
    gen(timed, "--records", "400000")
    gen(untimed, "--records", "400000", "--chunk-time", "0")
    for fmt in ("text", "json"):
        ra = report(timed, "--format", fmt)
        rb = report(untimed, "--format", fmt)
        check(ra[0] == 0 and rb[0] == 0, f"{fmt}: both reports exit 0")
        check(ra[1].replace(timed, "TRACE") == rb[1].replace(untimed, "TRACE"),
              f"{fmt}: streamed report == whole-order report")
        check("reorder" not in ra[2], f"{fmt}: no reorder warning on a well-formed trace")

    # 3. Out of bound: read whole, same figures.
    late = os.path.join(tmp, "c", "run.trace")
    late_ref = os.path.join(tmp, "d", "run.trace")
    os.makedirs(os.path.dirname(late))
    os.makedirs(os.path.dirname(late_ref))
    gen(late, "--records", "400000", "--very-late", "500")
    gen(late_ref, "--records", "400000", "--very-late", "500", "--chunk-time", "0")
    ra = report(late, "--format", "json")
    rb = report(late_ref, "--format", "json")
    check(ra[0] == 0, "a trace breaking the bound still reports")
    check("breaks the reorder bound" in ra[2] and "read whole instead" in ra[2],
          "the warning says the trace broke the bound and was read whole")
    check(normalized_json(ra[1], late) == normalized_json(rb[1], late_ref),
          "the figures equal the whole-order report's")

    # 4. Progress bar: a terminal gets one, a pipe does not.
    pid, fd = pty.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execv(MEMSTEP, [MEMSTEP, "report", "--no-symbolize", timed])
    tty = b""
    while True:
        r, _, _ = select.select([fd], [], [], 60)
        if not r:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        tty += chunk
    _, status = os.waitpid(pid, 0)
    tty = tty.decode(errors="replace")
    check(os.waitstatus_to_exitcode(status) == 0, "report with a terminal on stderr exits 0")
    check("\r" in tty and "memstep: reading run.trace (pass 1)" in tty and "100%" in tty,
          "a terminal gets the progress bar (pass 1 to 100 %)")
    check("(pass 2)" in tty, "the bar shows the re-reads (pass 2)")
    rc, out, err = report(timed)
    check(rc == 0 and err == "", "a pipe gets nothing on stderr (no bar, no warning)")

finish()
