"""RSS growth explained on a real PyTorch loop (docs/analysis.md "RSS growth
explained", worked example). Fails without torch (the Quick start installs it).

tests/python/train_mlp.py --leak small keeps seven 2 KiB tensors per step
(14 KiB of data). On most machines RSS grows tens of times faster: glibc's
main arena keeps the freed activations' chunks, which the kept tensors pin.
The loop writes glibc's own count of its free space (mallinfo2) after each
step, and memstep's free-space rate must match it within 10 % whatever it is.
When that count grows at least twice as fast as the live bytes, the report
must call the RSS growth FRAGMENTATION (never LEAK), name the kept tensors'
line among its pins, say how much of the growth is memstep's own memory, and
print the same class in the text and the JSON reports; when it grows slower
than the live bytes (0.75x in one CI run), it must not say FRAGMENTATION.
"""

import os
import statistics
import subprocess
import sys
import unittest

import common

common.require_torch()

TRAIN = os.path.join(common.HERE, "train_mlp.py")


def theil_sen(ys):
    """The median of the pairwise slopes of ys over its index (rss_explain's estimator)."""
    return statistics.median((ys[j] - ys[i]) / (j - i)
                             for i in range(len(ys)) for j in range(i + 1, len(ys)))


class TorchRssTest(unittest.TestCase):
    # The loop (batch 512, hidden 1024) at half the hidden width: 60
    # steps, about a quarter of the time, the same shape of growth.
    EPOCHS, BATCHES, BATCH, HIDDEN = 1, 60, 512, 512

    def test_small_leak_fragments_the_main_arena(self):
        out = common.temp_dir(self)
        stats_path = os.path.join(out, "malloc-stats.txt")
        argv = [sys.executable, TRAIN, "--epochs", str(self.EPOCHS), "--batches",
                str(self.BATCHES), "--batch", str(self.BATCH), "--hidden", str(self.HIDDEN),
                "--optimizer", "adam", "--leak", "small", "--malloc-stats", stats_path]
        # One intra-op thread: with PyTorch's two, how much the leak fragments
        # the heap depends on the scheduling, so on the machine's load (glibc's
        # doing, not memstep's); in two CI runs 1.8x and 0x the live bytes.
        # With one, how much it fragments still depends on the machine (the
        # CPU's kernels, the hunt's sampled blocks that live outside glibc's
        # heap): 10x-29x the live bytes here (2-vCPU Intel, 10 runs, alone and
        # beside three busy loops), 2.2x in one CI run. So the test holds
        # memstep's free space to glibc's own count, whatever it comes to.
        # No screening (docs/analysis.md "Screening Python lines"): this test
        # checks the RSS split of one sampling plan. When the machine is loaded
        # the hunt's budget binds and it screens, and how many of the loop's
        # small blocks its screens and targets move out of glibc's heap into
        # memstep's sampled-block region then varies from run to run: beside
        # four busy loops "other" came to 19-22 % of the RSS rate in 3 runs of
        # 12 with screening, under 15 % in 4 of 4 without (and before it).
        r = common.run_profiled(argv, out, timeout=300,
                                extra_env={"MEMSTEP_SEED": "7", "OMP_NUM_THREADS": "1",
                                           "MEMSTEP_HUNT_SCREEN": "0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(TRAIN) as f:
            line = next(i for i, text in enumerate(f, 1) if "LEAK_SMALL_LINE" in text)
        report = common.report_json(out)
        p = report["processes"][0]
        x = p["rss_explain"]
        evidence = {k: x[k] for k in (
            "verdict", "reason", "stat_rows", "rss_per_step", "live_per_step", "frag_per_step",
            "cache_per_step", "mmap_per_step", "file_per_step", "own_per_step",
            "other_per_step", "arena", "arena_frag_per_step", "file_source", "pins",
            "rise_bytes", "rate_established")}
        evidence["rss_ci"] = p["rss_growth"]["ci"]
        with open(stats_path) as f:
            rows = [[int(v) for v in line.split()] for line in f]
        self.assertEqual(len(rows), self.EPOCHS * self.BATCHES)
        # glibc's own free bytes (less the top chunk) per step, over the
        # steps memstep's split uses (its last stat_rows).
        glibc_free = theil_sen([r[1] for r in rows][-x["stat_rows"]:])
        evidence["glibc_free_per_step"] = glibc_free
        self.assertEqual(x["allocator"], "glibc", evidence)
        self.assertEqual(x["arena"], 0, evidence)
        # memstep's free space inside the heap is glibc's own count (within
        # 10 %: 1-2 % in 10 runs here; the program reads it at the end of its
        # step, memstep a moment later), whatever it comes to.
        self.assertLess(abs(x["frag_per_step"] - glibc_free), 0.1 * glibc_free + 4096, evidence)
        self.assertEqual(p["live_growth"]["class"], "LEAK")
        # The JSON's RSS class is the verdict, as in the text report.
        text = subprocess.run([common.CLI, "report", out, "--no-symbolize"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(text.returncode, 0, text.stderr)
        if x["verdict"]:
            self.assertEqual(p["rss_growth"]["class"], x["verdict"], evidence)
            self.assertIn("    RSS: %s " % x["verdict"], text.stdout)
        # Whether the leak fragments the heap is glibc's doing and the
        # machine's: its free space grew 10x-29x as fast as the live bytes on
        # a 2-vCPU Intel VM, 12x-29x on a 2-vCPU AMD one (with AVX2 or SSE4.1
        # kernels), but 2.2x and 0.75x in two CI runs (where the kernels'
        # scratch blocks fall; which of the loop's blocks the leak hunt's
        # samples take out of glibc's heap). glibc's own count says which
        # case this run is, and the verdict must follow it.
        if glibc_free < x["live_per_step"]:
            # The heap did not fragment (0.75x in a CI run): FRAGMENTATION
            # would be wrong.
            sys.stderr.write("glibc's free space grew slower than the live bytes: %s\n"
                             % evidence)
            self.assertNotEqual(x["verdict"], "FRAGMENTATION", evidence)
            return
        if glibc_free < 2 * x["live_per_step"]:
            sys.stderr.write("glibc's free space grew 1-2x as fast as the live bytes: %s\n"
                             % evidence)
            return
        self.assertEqual(x["verdict"], "FRAGMENTATION", evidence)
        self.assertNotIn("RSS: LEAK", text.stdout)
        # Free space inside the heap, in the main arena, is the largest part
        # of the growth net of memstep's own memory.
        self.assertGreater(x["frag_per_step"], 0.25 * (x["rss_per_step"] - x["own_per_step"]),
                           evidence)
        self.assertGreater(x["arena_frag_per_step"], 0.9 * x["frag_per_step"], evidence)
        # memstep's own memory (the leak hunt's stacks and sites: most of it in
        # steps 7-27) is measured and kept out of the program's components:
        # it is not left in "other" (which can be negative: free chunks that
        # are not resident, RSS read a moment apart). "other" is a residual
        # of rates read a moment apart: up to 12 % of the RSS rate in 10 runs
        # alone or beside three busy loops, 16.5 % in one CI run beside two
        # tests of ten profiled runs each (the test now runs alone:
        # RUN_SERIAL); memstep's own is 10-18 % of it, so "other" with it
        # left in would read 20-30 %.
        self.assertTrue(x["has_own"], evidence)
        self.assertGreater(x["own_per_step"], 0, evidence)
        self.assertLess(x["other_per_step"], 0.2 * x["rss_per_step"], evidence)
        # The pin: a growing site at the line that keeps the tensors.
        sites = {s["id"]: s for s in report["sites"]}
        pinned = [sites[pin["site_id"]] for pin in x["pins"] if pin["site_id"] in sites]
        at_line = [s for s in pinned
                   if any(f.get("file", "").endswith("train_mlp.py") and f.get("line") == line
                          for f in s["frames"])]
        self.assertGreaterEqual(len(at_line), 1, [
            (s["id"], s["class"], [(f.get("file"), f.get("line")) for f in s["frames"]
                                   if f.get("line")][:3]) for s in pinned])
        # The text report says the same.
        # Under load the free space rises fast early and little late: an
        # uneven rise keeps its verdict, printed as the rise over the window
        # with its rate not established (docs/analysis.md).
        self.assertEqual("not established)" in text.stdout, not x["rate_established"], evidence)
        self.assertGreater(x["rise_bytes"], 0, evidence)
        self.assertIn("memstep's own ", text.stdout)
        self.assertIn("likely cause: site #", text.stdout)


if __name__ == "__main__":
    unittest.main()
