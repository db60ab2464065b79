"""Python lines (docs/analysis.md "Python lines"): a leak spread over several
native sites of one Python line is named at the line, as one call site.

A pure-Python loop (no torch, Debian's python3), 60 steps: each step makes
and drops 3,000 small tuples, and one line keeps four strings, bytes, sets,
bytearrays and big ints (about 2 KiB per step, over half a dozen sites: each
object, a bytearray's buffer, the growing list's item array). None of these
types has a free list on 3.10-3.12 (objects from free lists keep the stack
of the line that first allocated their block unless a hunt runs: docs/
analysis.md "Objects from free lists"; with tuples and dicts here, the
churn's line read LEAK at 1.1 KiB/step in one run of ten). The run
samples at a fixed T of 1 KiB (no hunt: the test is of the report's sums,
not of the hunt's sampling), and the report holds every site to 1 KiB/step
(`--leak-min-rate 1K`): every site of the line grows 0.1-0.7 KiB/step and
stays under it, the line's sum does not.

Stated rates: the line named LEAK in at least 95 % of seeds (measured 30 of
30, seeds 1-30), and in at least 70 % with no site of it LEAK by itself
(measured 27 of 30: in 3 one site, the sets' at 1.2 KiB/step, passed the
bound alone); with 10 seeds the test accepts min_covered(10, q) or more of
each (a correct rate fails with probability at most 1e-3). The line's 95 %
interval holds the exact heap's rate (calibrated to it), and the report
says nothing is unattributed. With default settings (the
leak hunt, which screens by Python line): the line LEAK in at least 85 % of
seeds (measured 19 of 20; 2 of 10 while screens were tallied by
instruction), accepting min_covered(10, 0.85) or more. Leak-free (the same loop
without the keeping line): no LEAK line and no LEAK site, over the lines and
sites tested, at most max_false_leaks of them (none in 30 runs, seeds 1-30:
no line grew at all). Without the sums (a report
that lists only sites) the test fails: no LEAK anywhere though the heap
grows 2.2 KiB/step. The HTML report's page, drawn by headless Chromium,
lists the line in its table of Python lines.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SCRIPT = textwrap.dedent("""\
    import sys
    import memstep

    kept = []

    def churn(i):
        rows = [(j, str(j) * 3) for j in range(3000)]
        return len(rows)

    def record(i):
        for k in range(4):
            kept.append(f"run/{i}/{k}"); kept.append(bytes(40 + k)); kept.append({i, k + 1000}); kept.append(bytearray(24)); kept.append(i * 10 ** 30 + k)

    leak = sys.argv[2] == "1"
    for step in range(int(sys.argv[1])):
        memstep.step(step)
        with memstep.stage("data"):
            churn(step)
        with memstep.stage("forward"):
            if leak:
                record(step)
    """)
KEEP_LINE = 12
SEEDS = range(1, 11)


def python_lines(report):
    return [line for p in report["processes"] for line in p["python_lines"]]


class PythonLinesTest(unittest.TestCase):
    def run_seed(self, seed, leak, fixed=True):
        d = common.temp_dir(self)
        script = os.path.join(d, "spread.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        out = os.path.join(d, "run")
        sampling = ["--sample-interval", "1024", "--fixed-interval"] if fixed else []
        r = subprocess.run(
            [common.CLI, "run", "--out", out, "--no-python-hooks", "--window", "0"] + sampling +
            ["--", sys.executable, script, "60", "1" if leak else "0"],
            env=dict(common.clean_env(), MEMSTEP_SEED=str(seed)),
            capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = subprocess.run([common.CLI, "report", out, "--format", "json", "--no-symbolize",
                              "--leak-min-rate", "1K"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        report = json.loads(rep.stdout)
        self.run_dir = out
        procs = [p for p in report["processes"] if p["last_step"] >= 0]
        self.assertEqual(len(procs), 1, [p["cmdline"] for p in report["processes"]])
        return procs[0], report, script

    def test_a_leak_spread_over_sites_is_named_at_its_line(self):
        named, alone, runs = 0, 0, []
        for seed in SEEDS:
            p, report, script = self.run_seed(seed, True)
            heap = p["live_growth"]
            self.assertEqual(heap["class"], "LEAK", (seed, heap))
            keeper = [line for line in python_lines(report)
                      if line["class"] == "LEAK" and line["frames"]
                      and line["frames"][0]["file"] == script
                      and line["frames"][0]["line"] == KEEP_LINE]
            runs.append((seed, [(line["class"], round(line["growth_bytes_per_step"]), line["frames"][:1],
                                 len(line["site_ids"])) for line in python_lines(report)]))
            if not keeper:
                continue
            named += 1
            line = keeper[0]
            self.assertGreaterEqual(len(line["site_ids"]), 2, line)
            lo, hi = line["growth_ci"]
            self.assertLessEqual(lo, heap["bytes_per_step"], (seed, line["growth_ci"], heap))
            self.assertGreaterEqual(hi, heap["bytes_per_step"], (seed, line["growth_ci"], heap))
            # Its sites, mostly none LEAK by itself: then the line is the only
            # way to see the leak.
            by_id = {s["id"]: s for s in report["sites"]}
            alone += not any(by_id[i]["class"] == "LEAK" for i in line["site_ids"])
            self.assertEqual(p["unattributed_bytes_per_step"], 0, (seed, p["attribute_hint"]))
        self.assertGreaterEqual(named, common.min_covered(len(SEEDS), 0.95), runs)
        self.assertGreaterEqual(alone, common.min_covered(len(SEEDS), 0.7), runs)

    def test_the_html_report_lists_the_line(self):
        # The page's script draws the lines' table (headless Chromium, as
        # tests/unit/html_browser_test.py; a missing chromium fails).
        p, report, script = self.run_seed(1, True)
        page = os.path.join(common.temp_dir(self), "report.html")
        r = subprocess.run([common.CLI, "report", self.run_dir, "--format", "html", "-o", page,
                            "--leak-min-rate", "1K"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        chromium = shutil.which("chromium")
        self.assertTrue(chromium, "chromium is not installed (scripts/install-deps.sh installs it)")
        profile = common.temp_dir(self)
        d = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                            "--no-first-run", "--user-data-dir=" + profile,
                            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
                            "--dump-dom", "file://" + page],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(d.returncode, 0, d.stderr[-2000:])
        errors = [ln for ln in d.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
        self.assertEqual(errors, [])
        self.assertIn('id="python-lines"', d.stdout)
        table = d.stdout[d.stdout.index('id="python-lines"'):]
        table = table[:table.index("</table>")]
        self.assertIn("record  %s:%d" % (script, KEEP_LINE), table)
        self.assertIn('data-class="LEAK"', table)

    def test_the_hunt_names_the_line_with_default_settings(self):
        # The leak hunt screens Python lines and targets this one: its sites
        # sampled densely enough for the sum to be LEAK within 60 steps.
        named, runs = 0, []
        for seed in SEEDS:
            p, report, script = self.run_seed(seed, True, fixed=False)
            self.assertTrue(p["hunts"], seed)
            keeper = [line for line in python_lines(report)
                      if line["class"] == "LEAK" and line["frames"]
                      and line["frames"][0]["file"] == script
                      and line["frames"][0]["line"] == KEEP_LINE]
            named += bool(keeper)
            runs.append((seed, bool(keeper), p["hunts"][-1]["outcome"],
                         p["hunts"][-1]["min_interval"]))
        self.assertGreaterEqual(named, common.min_covered(len(SEEDS), 0.85), runs)

    def test_the_loop_without_the_leak_names_no_line(self):
        common.assert_leak_free(self, ((seed, self.run_seed(seed, False)[1]) for seed in SEEDS))


if __name__ == "__main__":
    unittest.main()
