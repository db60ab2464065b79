#!/usr/bin/env python3
"""Compares two runs of a real program's test suite: one without memstep (A)
and one under `memstep run` (B), and checks the traces of run B.

Used by cpython_slice.sh and numpy_pytest.sh (see README.md); standard
library only.

  suite_compare.py regrtest --a-log A.log --b-log B.log --a-xml A.xml \
      --b-xml B.xml --a-rc N --b-rc N --report REPORT.json --report-rc N
  suite_compare.py pytest   --a-xml A.xml --b-xml B.xml --a-rc N --b-rc N \
      --report REPORT.json --report-rc N

What must be identical between A and B ("same results", decided strictly):
  * each test case's outcome from the JUnit XML files (passed, failure,
    error, skipped, xfail, unexpected success): the same set of test case
    names with the same outcome in both runs;
  * regrtest only: each test file's result line ("test_os passed",
    "test_x skipped (resource denied)", "test_y failed (env changed)", ...,
    durations removed);
  * the exit status of the suite (run B's is the one `memstep run` passed
    through).
What run B's traces must show (`memstep report RUN --format json`):
  * the report exited 0 and is valid JSON;
  * regrtest: the main regrtest process has a trace, and every test file
    that ran has the trace of its worker process (regrtest -jN starts one
    `python3 -m test.regrtest --worker-args [..., "test_x"]` per test file):
    a non-fork process whose parent is the main process, that exited
    cleanly (clean_exit) and whose trace is not truncated;
  * pytest: the pytest process has a trace, exited cleanly, is not
    truncated and recorded allocations.

Known differences (--expect FILE): lines "KIND<TAB>NAME<TAB>WITHOUT<TAB>WITH"
(KIND test-case, test-file or exit-status; NAME "-" for the exit status;
WITHOUT and WITH the outcomes as the MISMATCH lines print them; "#" starts a
comment). A difference listed there, with exactly those outcomes, is
printed as EXPECTED and counts as passed. The list must be exact both ways:
a listed difference that does not appear (the item matched, or differed in
another way) is a failure ("EXPECTED DIFFERENCE ABSENT"), as is any
difference not listed.

The last line printed is "N passed, M failed": N counts the items (test
cases, plus test files for regrtest, plus the exit status) with the same
outcome in both runs, or with exactly the listed difference; M counts the
items that differ otherwise or exist in one run only, the listed
differences that did not appear, plus failed trace checks. Exit status: 0
when M is 0, else 1.
"""

import argparse
import collections
import json
import re
import sys
import xml.etree.ElementTree as ET

MAX_LISTED = 40


def junit_outcomes(path):
    """{case name: (outcome, message)} from a JUnit XML file (regrtest's or
    pytest's). Duplicate names get a " #2", " #3" suffix in file order."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise SystemExit(f"suite_compare: cannot read JUnit XML {path}: {e}")
    seen = collections.Counter()
    out = {}
    prev = "the start"
    for tc in root.iter("testcase"):
        if tc.get("name") is None and not len(tc):
            # regrtest (3.11) opens a <testcase> at startTest and fills it in
            # addSuccess/addFailure/...; a test whose failures are all in
            # subTest()s never gets there, so its element stays empty.
            name = f"(unnamed test case after {prev})"
            out[name] = ("unrecorded (subtest failures?)", "")
            continue
        name = tc.get("name", "?")
        prev = name
        cls = tc.get("classname")
        if cls:  # pytest: classname "numpy.linalg.tests.test_linalg.TestX"
            name = f"{cls}::{name}"
        seen[name] += 1
        if seen[name] > 1:
            name = f"{name} #{seen[name]}"
        outcome, message = "passed", ""
        for child in tc:
            tag = child.tag
            msg = (child.get("message") or child.text or "").strip()
            if tag == "failure":
                outcome, message = "failure", msg
                break
            if tag == "error":
                outcome, message = "error", msg
                break
            if tag == "skipped":
                # pytest writes xfail as <skipped type="pytest.xfail">.
                outcome = "xfail" if child.get("type") == "pytest.xfail" else "skipped"
                message = msg
            elif tag == "output":  # regrtest: expected failure
                outcome = "xfail"
            elif tag == "outcome":  # regrtest: UNEXPECTED_SUCCESS
                outcome = "unexpected-success"
        out[name] = (outcome, message)
    return out


# "0:00:31 load avg: 5.38 [ 3/34/1] test_subprocess failed (1 failure) (31.0 sec)"
_PROGRESS = re.compile(r"\[\s*\d+/\d+(?:/\d+)?\] (test_\w+|test\.\S+) (.+)$")
_DURATION = re.compile(r"\s*\((?:\d+ min )?\d+(?:\.\d+)? (?:sec|ms)\)|\s*\(\d+ min\)")


def regrtest_results(path):
    """{test file: result text} from a regrtest log (progress lines)."""
    res = {}
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        raise SystemExit(f"suite_compare: cannot read {path}: {e}")
    for line in text.splitlines():
        m = _PROGRESS.search(line)
        if not m:
            continue
        status = m.group(2).split(" -- running", 1)[0]
        status = _DURATION.sub("", status).strip()
        res[m.group(1)] = status
    return res


def load_expected(path):
    """{(kind, name): (without, with)} from an --expect file."""
    expected = {}
    if not path:
        return expected
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise SystemExit(f"suite_compare: cannot read {path}: {e}")
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 4 or fields[0] not in ("test-case", "test-file", "exit-status"):
            raise SystemExit(f"suite_compare: {path}:{n}: expected KIND<TAB>NAME<TAB>WITHOUT"
                             f"<TAB>WITH (KIND test-case, test-file or exit-status): {line!r}")
        key = (fields[0], fields[1])
        if key in expected:
            raise SystemExit(f"suite_compare: {path}:{n}: {fields[0]} {fields[1]} listed twice")
        expected[key] = (fields[2], fields[3])
    return expected


def compare(kind, a, b, show_message=False, expected=None, seen=None):
    """Returns (matched, [mismatch lines], [expected-difference lines]).

    A difference listed in `expected` with exactly these outcomes counts as
    matched and is added to `seen`."""
    matched, bad, known = 0, [], []
    expected = expected or {}
    for name in sorted(set(a) | set(b)):
        va, vb = a.get(name), b.get(name)
        oa = va[0] if isinstance(va, tuple) else va
        ob = vb[0] if isinstance(vb, tuple) else vb
        if va is not None and vb is not None and oa == ob:
            matched += 1
            continue
        if expected.get((kind, name)) == (oa or "not run", ob or "not run"):
            matched += 1
            seen.add((kind, name))
            known.append(f"EXPECTED {kind} {name}: without memstep: {oa or 'not run'}; "
                         f"with memstep: {ob or 'not run'} (listed in --expect)")
            continue
        line = (f"MISMATCH {kind} {name}: without memstep: {oa or 'not run'}; "
                f"with memstep: {ob or 'not run'}")
        if show_message:
            for label, v in (("with memstep", vb), ("without memstep", va)):
                if isinstance(v, tuple) and v[1] and v[0] in ("failure", "error"):
                    msg = v[1].strip().splitlines()
                    line += f"\n    {label}: " + " | ".join(msg[-4:])[:600]
        bad.append(line)
    return matched, bad, known


def load_report(path, rc):
    problems = []
    if rc != 0:
        problems.append(f"TRACE CHECK memstep report exited {rc} (want 0)")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        problems.append(f"TRACE CHECK cannot read the JSON report: {e}")
        return None, problems
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        # JSON text must be UTF-8 (RFC 8259); report it, then go on with the
        # other checks on a lenient decoding.
        problems.append(
            f"TRACE CHECK memstep report --format json wrote invalid UTF-8 at byte {e.start}: "
            f"{raw[max(0, e.start - 60):e.start + 20]!r}")
        text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text), problems
    except ValueError as e:
        problems.append(f"TRACE CHECK memstep report --format json is not valid JSON: {e}")
        return None, problems


def check_process(p, what):
    problems = []
    if not p.get("clean_exit"):
        problems.append(f"TRACE CHECK {what} (pid {p.get('pid')}): no clean exit in its trace")
    if p.get("truncated"):
        problems.append(f"TRACE CHECK {what} (pid {p.get('pid')}): trace truncated")
    return problems


_WORKER_TEST = re.compile(r'"(test_\w+|test\.[\w.]+)"\]\s*$')


def regrtest_trace_checks(report, tests_run):
    problems, info = [], []
    procs = report.get("processes", [])
    roots = [p for p in procs if not p.get("fork_child")
             and "--worker-args" not in p.get("cmdline", "")
             and re.search(r"(^|\s)-m test(\s|$)", p.get("cmdline", ""))]
    if len(roots) != 1:
        problems.append(f"TRACE CHECK want one trace of the main regrtest process, found {len(roots)}")
        return problems, info
    root = roots[0]
    problems += check_process(root, "main regrtest process")
    workers = collections.defaultdict(list)
    for p in procs:
        if p.get("fork_child") or p.get("ppid") != root.get("pid"):
            continue
        m = _WORKER_TEST.search(p.get("cmdline", ""))
        if "--worker-args" in p.get("cmdline", "") and m:
            workers[m.group(1)].append(p)
    for t in sorted(tests_run):
        if not workers.get(t):
            problems.append(f"TRACE CHECK no trace of the worker process of {t}")
            continue
        for p in workers[t]:
            problems += check_process(p, f"worker of {t}")
    extra = sorted(set(workers) - set(tests_run))
    if extra:
        problems.append(f"TRACE CHECK worker traces for tests that did not report a result: {extra}")
    info.append(f"traces: {len(procs)} processes "
                f"({sum(1 for p in procs if p.get('fork_child'))} fork children), "
                f"{sum(len(v) for v in workers.values())} regrtest workers for "
                f"{len(tests_run)} test files, "
                f"{sum(p.get('lost_records', 0) for p in procs)} lost records")
    return problems, info


def pytest_trace_checks(report):
    problems, info = [], []
    procs = report.get("processes", [])
    roots = [p for p in procs if not p.get("fork_child")
             and re.search(r"(^|\s)-m pytest(\s|$)", p.get("cmdline", ""))]
    if len(roots) != 1:
        problems.append(f"TRACE CHECK want one trace of the pytest process, found {len(roots)}")
        return problems, info
    root = roots[0]
    problems += check_process(root, "pytest process")
    if not root.get("alloc_count"):
        problems.append("TRACE CHECK the pytest process's trace recorded no allocation")
    info.append(f"traces: {len(procs)} processes; pytest process: "
                f"{root.get('alloc_count', 0)} allocations, {root.get('samples', 0)} samples, "
                f"peak {root.get('peak_bytes', 0)} bytes, {root.get('lost_records', 0)} lost records")
    return problems, info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("regrtest", "pytest"))
    ap.add_argument("--a-log")
    ap.add_argument("--b-log")
    ap.add_argument("--a-xml", required=True)
    ap.add_argument("--b-xml", required=True)
    ap.add_argument("--a-rc", type=int, required=True)
    ap.add_argument("--b-rc", type=int, required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--report-rc", type=int, required=True)
    ap.add_argument("--label", default="suite")
    ap.add_argument("--expect", help="the known differences (see above)")
    args = ap.parse_args()

    matched, bad, info, known = 0, [], [], []
    expected, seen = load_expected(args.expect), set()

    if args.kind == "regrtest":
        fa, fb = regrtest_results(args.a_log), regrtest_results(args.b_log)
        if not fa:
            raise SystemExit(f"suite_compare: no regrtest result line in {args.a_log}")
        n, m, k = compare("test-file", fa, fb, expected=expected, seen=seen)
        matched += n
        bad += m
        known += k
        info.append(f"test files: {len(fa)} without memstep, {len(fb)} with; "
                    + ", ".join(f"{v}: {c}" for v, c in
                                sorted(collections.Counter(fb.values()).items())))

    ca, cb = junit_outcomes(args.a_xml), junit_outcomes(args.b_xml)
    if not ca:
        raise SystemExit(f"suite_compare: no test case in {args.a_xml}")
    n, m, k = compare("test-case", ca, cb, show_message=True, expected=expected, seen=seen)
    matched += n
    bad += m
    known += k
    info.append(f"test cases: {len(ca)} without memstep, {len(cb)} with; with memstep: "
                + ", ".join(f"{v}: {c}" for v, c in
                            sorted(collections.Counter(o for o, _ in cb.values()).items())))

    if args.a_rc == args.b_rc:
        matched += 1
    elif expected.get(("exit-status", "-")) == (str(args.a_rc), str(args.b_rc)):
        matched += 1
        seen.add(("exit-status", "-"))
        known.append(f"EXPECTED exit status: without memstep {args.a_rc}, with memstep "
                     f"{args.b_rc} (listed in --expect)")
    else:
        bad.append(f"MISMATCH exit status: without memstep {args.a_rc}, with memstep {args.b_rc}")
    for (kind, name), (oa, ob) in sorted(expected.items()):
        if (kind, name) not in seen:
            bad.append(f"EXPECTED DIFFERENCE ABSENT {kind} {name}: listed as without memstep: "
                       f"{oa}; with memstep: {ob}, but it did not appear (update --expect)")

    report, problems = load_report(args.report, args.report_rc)
    if report is not None:
        if args.kind == "regrtest":
            p, i = regrtest_trace_checks(report, set(fb))
        else:
            p, i = pytest_trace_checks(report)
        problems += p
        info += i

    for line in info:
        print(line)
    for line in known:
        print(line)
    for line in (bad + problems)[:MAX_LISTED]:
        print(line)
    if len(bad) + len(problems) > MAX_LISTED:
        print(f"... and {len(bad) + len(problems) - MAX_LISTED} more")
    if bad or problems:
        print(f"{args.label}: FAIL: {len(bad)} result difference(s) between the runs without "
              f"and with memstep, {len(problems)} failed trace check(s)")
    else:
        print(f"{args.label}: OK: same results without and with memstep"
              + (f" but for the {len(known)} listed difference(s)" if known else "")
              + "; traces readable")
    print(f"{matched} passed, {len(bad) + len(problems)} failed")
    return 0 if not bad and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
