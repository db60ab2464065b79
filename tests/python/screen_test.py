"""The leak hunt screens Python lines (docs/analysis.md "Screening Python
lines"): a small leak in heavy churn is named at its line within 80 steps.

A pure-Python loop (no torch, Debian's python3): each step makes and drops
12,000 tuples of a string and a list (about 3 MiB allocated, 5-8 ms), and one
line keeps 32 short strings (about 2.3 KiB per step, 0.07 % of the bytes the
step allocates). A stack costs 5-10 us on this 2-core VM, so the default
budget (10 %) pays for about a hundred stacks a step: T stays at 64-128 KiB,
where the leak draws a sample every few dozen steps, and without screening
the line was named in 0 of 10 seeds at 60 steps, 2 of 10 (this test's) at 80. Screens cost about a tenth of
a stack: the hunt screens at 4 KiB, the keeping line's screens outlive their
step, the line becomes a target, and its allocations are sampled with stacks
at 4 KiB from then on.

Stated rate: the line named LEAK in at least 90 % of seeds (measured 19 of
20 at 80 steps, seeds 31-50). With 10 fixed seeds the test accepts 5 or more:
a correct 90 % fails it with probability 1.6e-4 (Binomial(10, 0.9) <= 4).
Screening off (MEMSTEP_HUNT_SCREEN=0) fails it (2 of 10). Other LEAK sites,
over the 10 runs' tested sites, at most max_false_leaks (the false-LEAK rate
1e-3 a site, failing by chance with probability 1e-4; none in 60 runs).
"""

import os
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# Each step makes and drops 12,000 tuples (the churn), then calls KEEP.
LOOP = """\

    def batch(i):
        rows = [(j, str(j) * 4, [j, j + 1]) for j in range(12000)]
        return sum(len(r[1]) for r in rows)

    for step in range(int(sys.argv[1])):
        memstep.step(step)
        with memstep.stage("data"):
            batch(step)
        with memstep.stage("forward"):
            KEEP
    """

SCRIPT = textwrap.dedent("""\
    import sys
    import memstep

    kept = []

    def tokenize(i):
        return ["tok-%06d-%03d" % (i, j) for j in range(32)]
    """ + LOOP.replace("KEEP", "kept.extend(tokenize(step))"))
KEEP_LINE = 7
SEEDS = range(1, 11)
MIN_NAMED = 5

# The same churn, and a text log kept as a module global and rebuilt larger
# each step (`log += ...` on a global makes a new string and frees the last:
# CPython resizes in place only a string held by a local), 960 B a step.
REBUILT_SCRIPT = textwrap.dedent("""\
    import sys
    import memstep

    log = ""

    def record(i):
        global log
        log += "".join("step %06d tok %03d\\n" % (i, j) for j in range(48))
    """ + LOOP.replace("KEEP", "record(step)"))
REBUILT_LINE = 8


class ScreenTest(unittest.TestCase):
    def run_seed(self, seed, steps=80, script_text=SCRIPT, line=KEEP_LINE):
        p, report, script = common.run_step_script(self, script_text, "screen_leak.py", steps,
                                                   {"MEMSTEP_SEED": str(seed)})
        leaks = [s for s in report["sites"] if s["growth"]["class"] == "LEAK"]
        keeper = [s for s in leaks
                  if any(f["file"] == script and f["line"] == line for f in s["frames"][:6])]
        return p, keeper, leaks, report

    def test_a_small_leak_in_heavy_churn_is_named_at_its_line(self):
        named = 0
        runs, others = [], []
        tested = 0
        for seed in SEEDS:
            p, keeper, leaks, report = self.run_seed(seed)
            self.assertEqual(p["live_growth"]["class"], "LEAK", (seed, p["live_growth"]))
            self.assertTrue(p["hunts"], seed)
            self.assertTrue(all(h["screened"] for h in p["hunts"]), (seed, p["hunts"]))
            others += [(seed, s["frames"][:6]) for s in leaks if s not in keeper]
            others += [(seed, "line", ln["frames"][:2]) for ln in common.leak_lines(report)
                       if not ln["frames"] or ln["frames"][0]["line"] != KEEP_LINE]
            tested += len(common.tested_sites(report))
            named += bool(keeper)
            runs.append((seed, bool(keeper), p["hunts"][-1]["min_interval"],
                         p["hunts"][-1]["outcome"]))
        self.assertGreaterEqual(named, MIN_NAMED, runs)
        self.assertLessEqual(len(others), common.max_false_leaks(tested), others)


    def test_a_string_rebuilt_larger_each_step_is_named_at_its_line(self):
        # One block at a time, born each step: its line never has two
        # long-lived screens, and at T = 64-128 KiB the block (up to 75 KiB)
        # is sampled with a stack at fewer than 3/4 of the step ends, too
        # few for the rule of a buffer that grows by replacement. Its
        # screens, drawn at the screening T, grow at each step end: the line
        # becomes a target by its rises (preload/steps/sites.cc
        # kTargetMinRises), and from then on the string is sampled with a
        # stack at every step. Named in 10 of 10 seeds, 0 of 10 without the
        # rises rule; accepted from MIN_NAMED as above. The rate: the
        # string grows by 960 characters a step (its block by 960 B).
        named = 0
        runs, others, rates = [], [], []
        tested = 0
        for seed in SEEDS:
            p, keeper, leaks, report = self.run_seed(seed, 80, REBUILT_SCRIPT, REBUILT_LINE)
            self.assertEqual(p["live_growth"]["class"], "LEAK", (seed, p["live_growth"]))
            others += [(seed, s["frames"][:6]) for s in leaks if s not in keeper]
            tested += len(common.tested_sites(report))
            named += bool(keeper)
            for s in keeper:
                self.assertTrue(s["growth"]["replaced"], (seed, s["growth"]))
                rates.append((s["growth"]["sampled_bytes_per_step"] or s["growth_bytes_per_step"],
                              s["growth"]["ci"]))
            runs.append((seed, bool(keeper), [h["outcome"] for h in p["hunts"]]))
        self.assertGreaterEqual(named, MIN_NAMED, runs)
        self.assertLessEqual(len(others), common.max_false_leaks(tested), others)
        for rate, ci in rates:
            self.assertLess(abs(rate - 960), 96, rates)


if __name__ == "__main__":
    unittest.main()
