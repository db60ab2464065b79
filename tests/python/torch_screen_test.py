"""The leak hunt names a small tensor leak in a real PyTorch loop whose steps
churn far more (docs/analysis.md "Screening Python lines"), with default
settings and the zero-code step hooks. Runs on the pip torch (2.x) of the
`python3` on PATH, which scripts/install-deps.sh installs; fails without it.

tests/python/gru_lm.py: a GRU language model whose 60 steps each allocate
about 40 MiB in some 10^5 allocations (16 ms a step) and, with --keep, keep a
6 KiB tensor a step. A stack there costs about 10 us, so the hunt's budget
holds byte-proportional sampling at T = 32 KiB, where the leak draws a sample
every five steps: without screening the line was named in 0 of 3 runs
(UNATTRIBUTED, the exact heap +6.5 KiB/step). With it the hunt screens at
2 KiB, the keeping line becomes a target, and its tensors are sampled with
stacks.

Stated rate: the line named LEAK in at least 90 % of seeds (measured 12 of 12,
seeds 38-49, beside a CI build on a 2-vCPU Intel VM; 27 of 30 before growth.cc's
persistence rule took the cohorts' rate, the 3 misses BOUNDED_GROWTH "slowing").
With 10 fixed seeds the test accepts 5 or more: a correct 90 % fails it with
probability 1.6e-4 (Binomial(10, 0.9) <= 4). Other LEAK sites, over the
runs' tested sites, at most max_false_leaks (the false-LEAK rate 1e-3 a site;
a chance failure 1e-4); the same loop without --keep, two seeds: no heap LEAK,
and LEAK sites at most max_false_leaks.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.require_torch()

SCRIPT = os.path.join(common.HERE, "gru_lm.py")
SEEDS = range(1, 11)
MIN_NAMED = 5
STEPS = 60


def keep_line():
    with open(SCRIPT) as f:
        return next(i for i, text in enumerate(f, 1) if "# KEEP_LINE" in text)


class TorchScreenTest(unittest.TestCase):
    def run_seed(self, seed, keep):
        out = os.path.join(common.temp_dir(self), "run")
        argv = [sys.executable, SCRIPT, str(STEPS)] + (["--keep"] if keep else [])
        r = common.run_profiled(argv, out, timeout=300, extra_env={"MEMSTEP_SEED": str(seed)})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("RESULT steps=%d" % STEPS, r.stdout)
        report = common.report_json(out)
        procs = [p for p in report["processes"] if p["last_step"] >= 0]
        self.assertEqual(len(procs), 1, [p["cmdline"] for p in report["processes"]])
        leaks = [s for s in report["sites"] if s["growth"]["class"] == "LEAK"]
        return procs[0], leaks, report

    def test_a_small_tensor_leak_is_named_at_its_line(self):
        line = keep_line()
        named, tested = 0, 0
        runs, others = [], []
        for seed in SEEDS:
            p, leaks, report = self.run_seed(seed, keep=True)
            self.assertEqual(p["live_growth"]["class"], "LEAK", (seed, p["live_growth"]))
            self.assertTrue(p["hunts"], seed)
            keeper = [s for s in leaks
                      if any(f.get("file") == SCRIPT and f.get("line") == line
                             for f in s["frames"])]
            others += [(seed, [(f.get("function"), f.get("file"), f.get("line"))
                               for f in s["frames"][:6]]) for s in leaks if s not in keeper]
            # A LEAK Python line (its sites summed) names the leak too; any
            # other is a false LEAK, as a site would be.
            for ln in common.leak_lines(report):
                if any(f.get("file") == SCRIPT and f.get("line") == line for f in ln["frames"]):
                    keeper.append(ln)
                else:
                    others.append((seed, "line", ln["frames"][:2]))
            tested += len(common.tested_sites(report))
            named += bool(keeper)
            h = p["hunts"][-1]
            runs.append((seed, bool(keeper), h["min_interval"], h["screened"], h["outcome"],
                         p.get("unattributed_bytes_per_step")))
        self.assertGreaterEqual(named, MIN_NAMED, runs)
        self.assertLessEqual(len(others), common.max_false_leaks(tested), others)

    def test_the_loop_without_the_leak_leaks_nothing(self):
        leaks, tested = [], 0
        for seed in (1, 2):
            p, found, report = self.run_seed(seed, keep=False)
            self.assertNotEqual(p["live_growth"]["class"], "LEAK", (seed, p["live_growth"]))
            leaks += [(seed, s["frames"][:4]) for s in found]
            leaks += [(seed, "line", ln["frames"][:2]) for ln in common.leak_lines(report)]
            tested += len(common.tested_sites(report))
        self.assertLessEqual(len(leaks), common.max_false_leaks(tested), leaks)


if __name__ == "__main__":
    unittest.main()
