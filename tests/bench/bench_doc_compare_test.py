#!/usr/bin/env python3
"""scripts/bench_doc.py's reading of a saved tests/bench/compare_commits.sh
output (the "Before and after" section of docs/benchmarks.md): the committed
output reads back, and an output that disagrees with itself (a verdict, a
median or a count that its round lines do not give, a --quick run, a cut-off
run) is refused. Also compare_commits.sh's refusal of bad arguments (it
builds nothing then). Python 3 standard library only."""

import importlib.util
import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("bench_doc", os.path.join(ROOT, "scripts", "bench_doc.py"))
bench_doc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_doc)

SAVED = os.path.join(ROOT, bench_doc.COMPARE_INPUT)


def saved_text():
    with open(SAVED, encoding="utf-8") as f:
        return f.read()


class CompareOutputTest(unittest.TestCase):
    def parse(self, text):
        return bench_doc.parse_compare("test", text)

    def refused(self, text, words):
        with self.assertRaises(bench_doc.BenchDocError) as e:
            self.parse(text)
        self.assertIn(words, str(e.exception))

    def test_order_statistic(self):
        # P(Bin(n, 1/2) <= k - 1) <= 1 %: n = 7 -> 1/128; n = 11 -> 12/2048; n = 6: 1/64 > 1 %.
        self.assertEqual(bench_doc.compare_k(6), 0)
        self.assertEqual(bench_doc.compare_k(7), 1)
        self.assertEqual(bench_doc.compare_k(11), 2)
        self.assertEqual(bench_doc.compare_k(21), 5)  # P(<= 4) = 7547/2^21 = 0.36 %; P(<= 5) = 1.3 %

    def test_saved_output_reads_back(self):
        header, summary, verdicts, count = self.parse(saved_text())
        self.assertEqual(len(verdicts), 4)
        self.assertEqual(sum(count), 4)
        self.assertIn("old", dict(header))

    def test_flipped_verdict_is_refused(self):
        text = saved_text()
        line = next(l for l in text.splitlines() if l.startswith(("PASS ", "FAIL ")))
        flipped = ("FAIL " + line[5:]) if line.startswith("PASS") else ("PASS " + line[5:])
        self.refused(text.replace(line, flipped), "its rounds give")

    def test_changed_rounds_are_refused(self):
        # NEW three times slower in every malloc_free round: the median and the
        # verdict the lines print are no longer what the rounds give.
        lines = saved_text().splitlines()
        for i, l in enumerate(lines):
            if l.startswith("round malloc_free"):
                head, new = l.rsplit(None, 1)
                lines[i] = head + " " + "%.2f" % (float(new) * 3)
        self.refused("\n".join(lines) + "\n", "malloc_free")

    def test_count_line_must_agree(self):
        text = saved_text()
        count = next(l for l in text.splitlines() if bench_doc.COUNT_RE.match(l))
        self.refused(text.replace(count, "0 passed, 4 failed"), "count line")

    def test_quick_run_is_refused(self):
        self.refused(saved_text().replace("run mode: full", "run mode: quick"), "--quick")

    def test_cut_off_run_is_refused(self):
        text = saved_text()
        self.refused(text[:text.index("workload ")], "incomplete")

    def test_not_a_comparison(self):
        self.refused("memstep benchmarks (2 cores)\n", "not compare_commits.sh output")


class CompareArgumentsTest(unittest.TestCase):
    SCRIPT = os.path.join(ROOT, "tests", "bench", "compare_commits.sh")

    def run_script(self, *args):
        return subprocess.run([self.SCRIPT, *args], capture_output=True, text=True, timeout=60)

    def test_unknown_commit(self):
        r = self.run_script("no-such-commit-xyz", "HEAD")
        self.assertEqual(r.returncode, 2)
        self.assertIn("'no-such-commit-xyz' is not a commit", r.stderr)

    def test_bad_rounds(self):
        r = self.run_script("HEAD", "HEAD", "--rounds", "zero")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--rounds needs a positive integer", r.stderr)

    def test_missing_arguments(self):
        r = self.run_script("HEAD")
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage:", r.stderr)


if __name__ == "__main__":
    sys.exit(unittest.main())
