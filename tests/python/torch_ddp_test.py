"""A multi-rank job under `memstep run`: torchrun with two CPU ranks (gloo)
of DistributedDataParallel, pip torch (2.x) of the `python3` on PATH, which
scripts/install-deps.sh installs; fails without it.

tests/python/ddp_train.py: rank 1 keeps an 8 KiB tensor a step, rank 0
nothing. Each rank is its own process with its RANK, its steps from the
zero-code hooks, its own leak hunt. The report must show both ranks (the
"Ranks" table), 60 steps each, and name rank 1's line LEAK (a site there, or
the line's sites summed), never rank 0's.
DDP's heap is noisy: rank 1's exact heap often reads NO_TREND with a
significant trend (its rate interval reaching 0), and the site, hunted for
about 20 steps and sampled sparsely after, needs the benefit of the doubt of
docs/analysis.md "Classes" 3 (before it, BOUNDED_GROWTH "slowing" in 1 of 1).

Stated rate: rank 1's line named LEAK in at least 90 % of seeds (measured 13
of 14, seeds 11-24, beside a CI build on a 2-vCPU Intel VM; the miss had no
growing site on rank 1). With 10 fixed seeds the test accepts
min_covered(10, 0.9, 1e-3) = 5 or more: a correct 90 % fails it with
probability 1.6e-4 (Binomial(10, 0.9) <= 4). Other LEAK sites (rank 0's
included), over the runs' tested sites, at most max_false_leaks (1e-4).
Rank 0's exact heap may read LEAK: DDP's own heap grows 1.6-2.3 KiB a step
without memstep (glibc's mallinfo2 in the loop), LEAK in 2 of those 14 runs.
That growth is real, so a LEAK line or site in torch's own Python code (its
innermost Python frame in the torch package: autograd's backward, DDP's
forward), on either rank, names it and is not a false LEAK; its 95 % interval
must still reach down to DDP's 2.3 KiB a step. A caller line on rank 1 whose
sites include the leak's (`<module>`'s call of main(), in 2 of 10 seeds of
one CI run) holds the leak and DDP's growth: not false either. Since sites count usable bytes
(docs/analysis.md "Bytes: usable, not requested") the backward line of rank 0
reads LEAK in 3 of 10 seeds at 1.4 KiB/step [0.3, 3.3] (a sum of 68 sites).
"""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.require_torch()

SCRIPT = os.path.join(common.HERE, "ddp_train.py")
STEPS = 60
SEEDS = range(1, 11)
MIN_NAMED = common.min_covered(len(SEEDS), 0.9, 1e-3)
DDP_GROWTH = 2.3 * 1024  # DDP's own heap growth a step, measured without memstep


def in_torch(frames, ci):
    """A LEAK in torch's own Python code whose interval allows DDP's growth."""
    py = [f for f in frames if f.get("module") == "<python>"]
    return bool(py) and "/torch/" in py[0].get("file", "") and ci[0] <= DDP_GROWTH


def leak_line():
    with open(SCRIPT) as f:
        return next(i for i, text in enumerate(f, 1) if "# LEAK_LINE" in text)


class TorchDdpTest(unittest.TestCase):
    def run_seed(self, seed):
        out = os.path.join(common.temp_dir(self), "run")
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2", SCRIPT, str(STEPS), "--leak-rank", "1"]
        r = common.run_profiled(argv, out, timeout=300,
                                extra_env={"MEMSTEP_SEED": str(seed), "OMP_NUM_THREADS": "1"})
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        for rank in (0, 1):
            self.assertIn("RESULT rank=%d steps=%d" % (rank, STEPS), r.stdout)
        return out, common.report_json(out)

    def test_two_ranks_and_the_leaking_rank_named_at_its_line(self):
        line = leak_line()
        named, tested = 0, 0
        runs, others, torch_growth, holding = [], [], [], []
        for seed in SEEDS:
            out, report = self.run_seed(seed)
            ranks = {p["pid"]: p["rank"] for p in report["processes"] if p["rank"] != ""}
            self.assertEqual(sorted(ranks.values()), ["0", "1"], report["processes"])
            for p in report["processes"]:
                if p["pid"] in ranks:
                    self.assertEqual(p["last_step"], STEPS - 1, (seed, p["rank"]))
            leaks = [s for s in report["sites"] if s["growth"]["class"] == "LEAK"]
            keeper = [s for s in leaks if ranks.get(s["pid"]) == "1" and any(
                f.get("file") == SCRIPT and f.get("line") == line for f in s["frames"])]
            # Rank 1's sites allocated on the leak's line, LEAK or not.
            leak_ids = {s["id"] for s in report["sites"] if ranks.get(s["pid"]) == "1" and any(
                f.get("file") == SCRIPT and f.get("line") == line for f in s["frames"])}
            for s in leaks:
                if s in keeper:
                    continue
                if in_torch(s["frames"], s["growth"]["ci"]):
                    torch_growth.append((seed, ranks.get(s["pid"]), "site"))
                    continue
                others.append((seed, ranks.get(s["pid"]),
                               [(f.get("function"), f.get("line")) for f in s["frames"][:4]]))
            # Python lines (docs/analysis.md "Python lines"): the leak's line
            # may be LEAK as a sum of its sites; any other LEAK line is a
            # false one, as a site would be.
            for p in report["processes"]:
                for ln in p["python_lines"]:
                    if ln["class"] != "LEAK":
                        continue
                    at = ln["frames"][0] if ln["frames"] else {}
                    if ranks.get(p["pid"]) == "1" and at.get("file") == SCRIPT and \
                            at.get("line") == line:
                        keeper.append(ln)
                    elif in_torch(ln["frames"], ln["growth_ci"]):
                        torch_growth.append((seed, ranks.get(p["pid"]), "line", at))
                    elif ln["callees"] and leak_ids & set(ln["site_ids"]):
                        # A caller line above the leak (main()'s call): the
                        # leak and DDP's own growth under it, both real.
                        holding.append((seed, ranks.get(p["pid"]), at.get("line")))
                    else:
                        others.append((seed, ranks.get(p["pid"]), "line", at))
            tested += len(common.tested_sites(report))
            named += bool(keeper)
            runs.append((seed, bool(keeper), {ranks[p["pid"]]: p["live_growth"]["class"]
                                              for p in report["processes"]
                                              if p["pid"] in ranks}))
            if seed == SEEDS[0]:
                text = subprocess.run([common.CLI, "report", out, "--no-symbolize"],
                                      capture_output=True, text=True, timeout=120)
                self.assertEqual(text.returncode, 0, text.stderr)
                self.assertIn("Ranks (2 processes with RANK", text.stdout)
        print("DDP's own growth named in torch's code:", torch_growth)
        print("caller lines holding the leak:", holding)
        self.assertGreaterEqual(named, MIN_NAMED, runs)
        self.assertLessEqual(len(others), common.max_false_leaks(tested), others)


if __name__ == "__main__":
    unittest.main()
