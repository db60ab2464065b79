"""Python's own allocator (preload/python/pymem.cc) under `memstep run`.

CTest runs it with Debian's python3 (3.11); tests/python/cpython_versions.sh
runs its exact-heap and state tests with CPython 3.10 to 3.13.

A pure-Python loop keeps 300 small objects per step (100 dicts, 100 lists,
100 short strings: every block <= 512 B, served by pymalloc) for 60 steps,
marked with memstep.step(). The truth, per step, comes from tracemalloc in a
run without memstep: the kept blocks' requested bytes, each rounded up to its
pymalloc size class (16 B), i.e. what pymalloc hands out.

Checked:
  * the report's exact heap live series (steps[].live_bytes_end) grows by the
    truth per step, within 10 % (least squares over steps 5..59); exact
    counters, so no sampling error: the margin is for the interpreter's own
    allocations (the kept list's growth, free lists);
  * the sites whose innermost Python frame is one of the three keeping lines
    (file:line) exist, and their estimated live bytes grow by the truth per
    step within 30 %. At --sample-interval 4K about 9 samples per step are
    drawn (35 KiB / 4 KiB); the least-squares slope over 55 steps of that
    compound Poisson series has a relative standard error of about
    sqrt(1.2 / (9 x 55)) = 5 %, so 30 % is 6 standard errors (over random
    seeds a false failure would have probability of about 2e-9; the runs use
    MEMSTEP_SEED and PYTHONHASHSEED, so they draw the same samples each time
    the interpreter allocates the same way);
  * arenas whose blocks are counted are not anonymous mmaps: the mmap live
    series stays flat over the steps (the ~4 MiB kept need ~4 new 1 MiB
    arenas), while with MEMSTEP_PYMEM=0 it grows by >= 2 MiB (so this test
    can fail), and the exact heap then misses the objects (< 20 % of the
    truth per step);
  * a steady leak whose exact heap falls once mid-run (one gc.collect()) is
    still LEAK, the fall set aside as a level shift; the step-end heap of
    that loop rises by a regular step in 16 runs of 16 (every block of the
    start-up arenas counted, wherever their addresses fall);
  * with python -I, -E or -S (no sitecustomize) the library hooks the
    allocator by itself, and the exact heap sees the objects;
  * the program's output and exit code are unchanged, also with
    PYTHONMALLOC=malloc (not wrapped: a NOTICE in the trace, nothing on
    stderr), debug and pymalloc_debug (not hooked: a NOTICE in the trace,
    nothing on stderr, as CPython's own test_cmd_line test_xdev requires);
  * blocks moving between pymalloc and malloc, zero-size and calloc requests
    keep the exact heap flat; a fork child's exact heap grows by the truth
    while it frees 3000 of the parent's objects;
  * memstep_pymem_state: hooked, pool size 16 KiB (3.10 to 3.13), and a C
    program (not Python) calling memstep_pymem_install gets 0, no output.
"""

import glob
import json
import os
import random
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

STEPS = 60
SCRIPT = textwrap.dedent("""\
    import os, sys
    import memstep
    kept = []

    def keep(step):
        for i in range(100):
            kept.append({"step": step, "i": i})
            kept.append([step, i, None])
            kept.append("s-%d-%d" % (step, i))

    def main(steps, probe):
        for step in range(steps):
            memstep.step(step)
            keep(step)
            if probe is not None:
                probe(step)
        memstep.step_end()
        print("kept %d objects" % len(kept))
        sys.stdout.flush()
        os._exit(int(os.environ.get("PYMEM_TEST_EXIT", "0")))

    if __name__ == "__main__":
        probe = None
        if os.environ.get("PYMEM_TEST_TRUTH"):
            import tracemalloc
            tracemalloc.start(1)
            series = []

            def probe(step):
                snap = tracemalloc.take_snapshot()
                total = 0
                for tr in snap.traces:
                    if tr.traceback[0].filename == __file__:
                        n = tr.size
                        total += (n + 15) // 16 * 16 if 0 < n <= 512 else 0
                series.append(total)
                if step == STEPS - 1:
                    sys.stderr.write("TRUTH %s\\n" % ",".join(map(str, series)))
        main(STEPS, probe)
    """).replace("STEPS", str(STEPS))
DICT_LINE, LIST_LINE, STR_LINE = 7, 8, 9
# Fixed sampler seeds and string hashes: the same samples in every run.
SEEDED = {"MEMSTEP_SEED": "12345", "PYTHONHASHSEED": "0"}


ADOPT_SCRIPT = """\
import sys
import memstep
kept = []
def churn(i):
    rows = [(j, j * 0.5, {"a": j}) for j in range(6000)]
    return sum(r[1] for r in rows)
for step in range(int(sys.argv[1])):
    memstep.step(step)
    churn(step)
    for j in range(256):
        kept.append(step * 1.5 + j)
"""


# A steady leak of small dicts, and objects in reference cycles that only a
# full collection frees: the collector is off until one gc.collect() after
# step 29 (an evaluation pass that collects, say).
COLLECT_SCRIPT = """\
import gc, sys
import memstep
kept = []
gc.disable()
class Node:
    def __init__(self):
        self.me = self
for step in range(int(sys.argv[1])):
    memstep.step(step)
    rows = [(j, j * 0.5, {"a": j}) for j in range(3000)]
    for j in range(48):
        kept.append({"i": step, "j": j})
    for j in range(5):
        Node()
    if step == 29:
        gc.collect()
"""


# Keeps 0-16 new 1 KiB byte strings a step (8 on average, from the seed in
# argv[2]), in 3,000 tuples of churn: a leak whose bytes vary from step to
# step, as a batch's or a log line's do.
PILE_SCRIPT = """\
import random, sys
import memstep
random.seed(int(sys.argv[2]))
kept = []
for step in range(int(sys.argv[1])):
    memstep.step(step)
    rows = [(j, j * 0.5, str(j)) for j in range(3000)]
    kept.extend(bytes(1024) for _ in range(random.randrange(0, 17)))
"""

# Without memstep's sitecustomize (python -I, -E, -S): waits for the library
# to hook Python's allocator by itself, then keeps 200 small dicts a step for
# 30 steps, marked through the C API (the memstep package is not importable
# with -I).
ISOLATED_SCRIPT = """\
import ctypes, sys, time
lib = ctypes.PyDLL(None)
lib.memstep_pymem_state.argtypes = [ctypes.c_void_p]
lib.memstep_step_begin.argtypes = [ctypes.c_uint64]
lib.memstep_step_end.argtypes = [ctypes.c_uint64]
t0 = time.time()
while lib.memstep_pymem_state(None) == 0 and time.time() - t0 < 10:
    sum(range(1000))
print("state", lib.memstep_pymem_state(None))
kept = []
for step in range(30):
    lib.memstep_step_begin(step)
    for i in range(200):
        kept.append({"step": step, "i": i})
    lib.memstep_step_end(step)
"""


def slope_of(values, first=5):
    return common.slope(values[first:])


class PymemTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        assert (3, 10) <= sys.version_info[:2] <= (3, 13), "pymalloc is checked on CPython 3.10-3.13"
        cls.tmp = __import__("tempfile").TemporaryDirectory(prefix="memstep-pymem-")
        cls.script = os.path.join(cls.tmp.name, "keep_objects.py")
        with open(cls.script, "w") as f:
            f.write(SCRIPT)
        env = common.clean_env()
        env["PYTHONPATH"] = common.PYDIR
        env["PYMEM_TEST_TRUTH"] = "1"
        r = subprocess.run([sys.executable, cls.script], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        line = [l for l in r.stderr.splitlines() if l.startswith("TRUTH ")][0]
        series = [int(x) for x in line.split()[1].split(",")]
        cls.truth = slope_of(series)
        assert cls.truth > 30000, series  # ~300 objects of 48..128 B per step

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def profile(self, extra_env=None, sample_interval="4K"):
        out = os.path.join(common.temp_dir(self), "run")
        extra_env = dict(SEEDED, **(extra_env or {}))
        # hooks=True: `--no-python-hooks` leaves sitecustomize off PYTHONPATH (nothing
        # of memstep runs in Python then); without torch the step hooks do nothing.
        r = common.run_profiled([sys.executable, self.script], out, hooks=True, window=0,
                                sample_interval=sample_interval, extra_env=extra_env)
        return r, out

    def steps(self, report):
        rows = [s for s in report["steps"] if s["step"] < STEPS]
        self.assertEqual([s["step"] for s in rows], list(range(STEPS)))
        return rows

    def test_exact_heap_and_python_site(self):
        r, out = self.profile()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("kept %d objects" % (3 * 100 * STEPS)), 1, r.stdout)
        report = common.report_json(out)
        rows = self.steps(report)
        live = slope_of([s["live_bytes_end"] for s in rows])
        self.assertLess(abs(live - self.truth), 0.10 * self.truth, (live, self.truth))
        # The keeping lines, by Python file:line.
        per_line = {DICT_LINE: [0.0] * STEPS, LIST_LINE: [0.0] * STEPS, STR_LINE: [0.0] * STEPS}
        allocators = {}
        for s in report["sites"]:
            py = [f for f in s["frames"] if f["module"] == "<python>"]
            if py and py[0]["file"] == self.script and py[0]["line"] in per_line:
                if s["kind"] != "host":
                    continue
                allocators[s["allocator"]] = allocators.get(s["allocator"], 0) + s["samples"]
                for i, v in enumerate(common.dense_series(s["live_bytes_by_step"])[:STEPS]):
                    per_line[py[0]["line"]][i] += v
        for line, series in per_line.items():
            self.assertGreater(series[-1], 0, "no live site at %s:%d" % (self.script, line))
        # The report says which allocator served them: pymalloc (the kept list's
        # item array is malloc's, from another line of the interpreter's).
        self.assertGreater(allocators.get("pymalloc", 0), 0.9 * sum(allocators.values()),
                           allocators)
        est = slope_of([sum(v) for v in zip(*per_line.values())])
        self.assertLess(abs(est - self.truth), 0.30 * self.truth, (est, self.truth))
        sys.stderr.write("truth %.0f B/step, exact heap %.0f B/step, Python-line sites %.0f B/step\n"
                         % (self.truth, live, est))
        # Arenas of counted blocks are not mmaps: flat mmap series.
        mm = [s["mmap_live_bytes_end"] for s in rows]
        self.assertLessEqual(mm[-1] - mm[5], 256 * 1024, mm)
        rss = [s["rss_bytes_end"] for s in rows]
        self.assertGreater(rss[-1] - rss[5], 2 << 20, rss)

    def test_switch_off_leaves_arenas_as_mmap(self):
        r, out = self.profile(extra_env={"MEMSTEP_PYMEM": "0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = self.steps(common.report_json(out))
        live = slope_of([s["live_bytes_end"] for s in rows])
        self.assertLess(live, 0.20 * self.truth, (live, self.truth))
        # The ~2 MB kept from step 5 need at least one new 1 MiB arena (two
        # on 3.11; on 3.12 and 3.13, where our sitecustomize imports ctypes
        # for the fork wrapper, the start-up arenas have room for one more
        # MiB): mapped, and seen only as an mmap.
        mm = [s["mmap_live_bytes_end"] for s in rows]
        self.assertGreaterEqual(mm[-1] - mm[5], 1 << 20, mm)

    def test_arenas_mapped_before_the_install_are_counted(self):
        # A churn frees blocks in the arenas CPython mapped before memstep's
        # install, and a line keeps 256 floats (8 KiB) a step: floats that
        # land in those arenas are counted too, so no step of the exact heap
        # grows by less than half of that after step 10 (the bypass of the
        # free lists begins or ends at one or two steps). With
        # MEMSTEP_PY_ADOPT=0 (those arenas uncounted) 7 steps of 28 grow by
        # less (measured on Debian's 3.11, seeds 1-3): the test fails.
        # The floats land there while a hunt bypasses the free lists: a
        # budget of 1 % keeps the hunt running to the end. At the default
        # budget the hunt ended "explained" at step 28 or 29 in about half
        # the runs on a loaded machine, and the control saw no low step (0
        # instead of 7; 4 failures in 8 runs beside two busy loops, 0 of 6
        # with this budget).
        script = os.path.join(common.temp_dir(self), "adopt.py")
        with open(script, "w") as f:
            f.write(ADOPT_SCRIPT)
        rows = {}
        for adopt in ("1", "0"):
            out = os.path.join(common.temp_dir(self), "run")
            r = common.run_profiled([sys.executable, script, "40"], out, hooks=False, window=0,
                                    extra_env={"MEMSTEP_SEED": "1", "MEMSTEP_PY_ADOPT": adopt,
                                               "MEMSTEP_HUNT_BUDGET": "1"})
            self.assertEqual(r.returncode, 0, r.stderr)
            rows[adopt] = [s for s in common.report_json(out)["steps"] if s["step"] < 39]
            self.assertEqual(len(rows[adopt]), 39)  # ended by the next one
        low = {}
        for adopt, rr in rows.items():
            live = [s["live_bytes_end"] for s in rr]
            low[adopt] = sum(live[i + 1] - live[i] < 4096 for i in range(10, 38))
        self.assertLessEqual(low["1"], 2, low)
        if sys.version_info[:2] == (3, 11):
            # There the workload does reach those arenas (measured; on 3.10
            # and 3.13 its floats land elsewhere, 0 and 1 low steps; on 3.12
            # 7 before our sitecustomize imported ctypes at start-up for the
            # fork wrapper, 2 since).
            self.assertGreaterEqual(low["0"], 3, low)
        # The arenas are the heap's now, not anonymous mappings: at least
        # one arena (1 MiB, less the part outside its pools) moved.
        heap = rows["1"][0]["live_bytes_end"] - rows["0"][0]["live_bytes_end"]
        mmap = rows["0"][0]["mmap_live_bytes_end"] - rows["1"][0]["mmap_live_bytes_end"]
        self.assertGreater(mmap, (1 << 20) - (64 << 10), (heap, mmap))
        self.assertGreater(heap, 0, (heap, mmap))
        self.assertLess(heap, mmap, (heap, mmap))  # what was free in them is not live

    def profiled_heap(self, script_text, args):
        """Runs the script (its text) with args under memstep, seeded; returns
        the one stepping process's live_growth and its step-end live bytes."""
        d = common.temp_dir(self)
        script = os.path.join(d, "script.py")
        with open(script, "w") as f:
            f.write(script_text)
        out = os.path.join(d, "run")
        r = common.run_profiled([sys.executable, script] + args, out, hooks=True, window=0,
                                extra_env=SEEDED)
        self.assertEqual(r.returncode, 0, r.stderr)
        report = common.report_json(out)
        proc = [p for p in report["processes"] if p["live_growth"]["window_steps"] > 0]
        self.assertEqual(len(proc), 1, [p["cmdline"] for p in report["processes"]])
        rows = [s["live_bytes_end"] for s in report["steps"] if s["pid"] == proc[0]["pid"]]
        return proc[0]["live_growth"], rows

    def test_a_collection_mid_run_leaves_the_heap_leak(self):
        # The exact heap rises ~11 KiB a step but for one fall of ~60 KiB at
        # step 30: the trend test sets the fall aside as a level shift
        # (docs/analysis.md "Level shifts"). Before, the one fall made every
        # residual before it rank above every one after it, and the heap's
        # rate interval reached 0: NO_TREND.
        g, rows = self.profiled_heap(COLLECT_SCRIPT, ["60"])
        falls = [b - a for a, b in zip(rows, rows[1:]) if b < a]
        if sys.version_info >= (3, 13):
            # 3.13's full collection also empties the free lists, which the
            # next step refills: a fall of ~170 KiB and a jump back of ~140
            # KiB at once. The two jumps sum to more than 0.4 of the growth,
            # the rule's bound (a cache emptied and refilled in part at once
            # looks the same), and the heap stays NO_TREND: a known limit
            # (docs/analysis.md "Level shifts").
            self.assertEqual(len(falls), 1, rows)
            self.assertEqual(g["class"], "NO_TREND", g["reason"])
            self.assertEqual(g["level_shifts"], 0, g)
            return
        self.assertEqual(len(falls), 1, rows)  # the collection, and nothing else
        self.assertEqual(g["class"], "LEAK", g["reason"])
        steps = sorted(b - a for a, b in zip(rows[g["window_begin"]:], rows[g["window_begin"] + 1:]))
        if -falls[0] > steps[len(steps) // 2]:
            # The collection freed more than a step keeps (55 KiB of 11 KiB
            # steps): set aside as a level shift.
            self.assertGreaterEqual(g["level_shifts"], 1, g)
            self.assertIn("level shift", g["reason"])
        else:
            # It freed less than a step keeps (6.5 KiB of 9.7 KiB steps with
            # memstep's hooks since December 2026): the heap only piles up,
            # its rate is its mean step (docs/analysis.md "Piles").
            self.assertEqual(g["level_shifts"], 0, (g, rows))
        net = (rows[-1] - rows[g["window_begin"]]) / (len(rows) - 1 - g["window_begin"])
        self.assertGreater(g["ci"][0], 0, g)
        self.assertLessEqual(g["ci"][0], min(g["bytes_per_step"], net), g)
        self.assertGreaterEqual(g["ci"][1], max(g["bytes_per_step"], net), g)

    def test_a_leak_of_varying_size_is_a_leak_at_its_mean_step(self):
        # The exact heap piles up 0-16 KiB a step: a random walk with drift,
        # whose residuals about any line wander. The levels' interval read
        # that as persisting noise and reached 0 at the first step that
        # freed a few bytes more than it kept (a PyTorch loop keeping 0-16
        # 1 KiB tensors a step: NO_TREND in 3 of 5 runs, [-32 B, 22.7 KiB]);
        # the steps' interval holds the mean step (docs/analysis.md "Piles").
        for seed in (1, 2, 3):
            g, rows = self.profiled_heap(PILE_SCRIPT, ["60", str(seed)])
            steps = [b - a for a, b in zip(rows, rows[1:])]
            # What the program keeps: its own count of byte strings.
            random.seed(seed)
            kept = [random.randrange(0, 17) for _ in range(60)]
            evidence = (seed, g, steps)
            self.assertEqual(g["class"], "LEAK", evidence)
            self.assertLessEqual(g["level_shifts"], 1, evidence)
            # The rate is the mean step (but for the interpreter's start-up
            # in the first row, when the window holds it: a level shift),
            # its interval holding what the loop keeps a step: 1 KiB strings,
            # 1,057 B objects in 1,064 B blocks, and the list's pointers.
            first = g["window_begin"]
            regular = sorted(steps[first:])[:len(steps) - first - g["level_shifts"]]
            self.assertAlmostEqual(g["bytes_per_step"], sum(regular) / len(regular), delta=1,
                                   msg=evidence)
            truth = 1064 * sum(kept[first + 1:]) / (59 - first)
            self.assertLessEqual(g["ci"][0], 1.02 * truth, evidence)
            self.assertGreaterEqual(g["ci"][1], truth, evidence)
            self.assertGreater(g["ci"][0], 0.5 * truth, evidence)

    def test_every_adopted_block_counted_wherever_the_arena_lies(self):
        # An arena mapped before the install that begins on a pool boundary
        # (a quarter of them: the address is random) has 64 pools, not 63;
        # with its last pool left out, the step-end heap counted the loop's
        # survivors only when they lay elsewhere, and zigzagged by 16 KiB a
        # step (-6 KiB, +26 KiB, ... in 9 of 16 runs of this loop, seeds
        # 1-2; the sampler's seed moves where the survivors land; failed at
        # its second run without the fix). 16 runs, seeds 1-16: each
        # step-end heap must rise by the loop's regular step, within half of
        # it (measured 0.98-1.05 of the median). Without hunts, whose bypass
        # of the free lists moves other blocks.
        script = os.path.join(common.temp_dir(self), "collect.py")
        with open(script, "w") as f:
            f.write(COLLECT_SCRIPT)
        for run in range(16):
            out = os.path.join(common.temp_dir(self), "run%d" % run)
            r = common.run_profiled([sys.executable, script, "12"], out, hooks=True, window=0,
                                    extra_env={"MEMSTEP_SEED": str(run + 1),
                                               "PYTHONHASHSEED": "0",
                                               "MEMSTEP_HUNT_BUDGET": "0"})
            self.assertEqual(r.returncode, 0, r.stderr)
            report = common.report_json(out)
            pids = [s["pid"] for s in report["steps"]]
            pid = max(set(pids), key=pids.count)
            rows = [s["live_bytes_end"] for s in report["steps"] if s["pid"] == pid]
            self.assertGreaterEqual(len(rows), 10, rows)
            rises = [b - a for a, b in zip(rows[1:], rows[2:])]  # the first: start-up
            median = sorted(rises)[len(rises) // 2]
            self.assertTrue(all(0.5 * median <= d <= 1.5 * median for d in rises),
                            (run, rises))

    def test_hooked_without_our_sitecustomize(self):
        # python -I, -E and -S never import memstep's sitecustomize: the
        # library's writer, once CPython is initialised, starts a thread that
        # takes the GIL and installs the hooks (pymem.cc PyMemPoll). Within
        # about one flush period (100 ms); the exact heap then sees the kept
        # dicts (200 a step, ~45 KiB; without the hooks it saw under 20 % of
        # such objects: test_switch_off_leaves_arenas_as_mmap).
        script = os.path.join(common.temp_dir(self), "isolated.py")
        with open(script, "w") as f:
            f.write(ISOLATED_SCRIPT)
        for flag in ("-I", "-E", "-S"):
            out = os.path.join(common.temp_dir(self), "run" + flag)
            r = common.run_profiled([sys.executable, flag, script], out, hooks=True, window=0,
                                    extra_env=SEEDED)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("state 1", r.stdout, (flag, r.stdout, r.stderr))
            report = common.report_json(out)
            pids = [s["pid"] for s in report["steps"]]
            pid = max(set(pids), key=pids.count)
            rows = [s["live_bytes_end"] for s in report["steps"] if s["pid"] == pid]
            self.assertGreaterEqual(len(rows), 25, rows)
            rise = slope_of(rows)
            self.assertGreater(rise, 200 * 150, (flag, rise, rows))  # >= 150 B a dict
        # MEMSTEP_PYMEM=0 still switches it off.
        out = os.path.join(common.temp_dir(self), "off")
        r = common.run_profiled([sys.executable, "-I", script], out, hooks=True, window=0,
                                extra_env=dict(SEEDED, MEMSTEP_PYMEM="0"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("state 0", r.stdout, r.stdout)

    def test_output_and_exit_code_unchanged(self):
        env = common.clean_env()
        env["PYTHONPATH"] = common.PYDIR
        env["PYMEM_TEST_EXIT"] = "7"
        bare = subprocess.run([sys.executable, self.script], env=env, capture_output=True,
                              text=True, timeout=120)
        self.assertEqual(bare.returncode, 7)
        expect_stderr = {
            None: "",
            "malloc": "",
            "malloc_debug": "",
            "debug": "",
            "pymalloc_debug": "",
        }
        for mode, err in expect_stderr.items():
            extra = {"PYMEM_TEST_EXIT": "7"}
            if mode is not None:
                extra["PYTHONMALLOC"] = mode
            r, out = self.profile(extra_env=extra, sample_interval=None)
            self.assertEqual(r.returncode, 7, (mode, r.stderr))
            self.assertEqual(r.stdout, bare.stdout, mode)
            lines = [l + "\n" for l in r.stderr.splitlines() if not l.startswith("memstep: run")
                     and not l.startswith("memstep: see")]
            self.assertEqual("".join(lines), err, mode)
            report = common.report_json(out)
            notices = json.dumps(report["processes"][0]["notices"])
            if mode in ("malloc", "malloc_debug"):
                self.assertIn("counted by the malloc hooks", notices)
                # Objects come from malloc: the exact heap sees them anyway.
                live = slope_of([s["live_bytes_end"] for s in self.steps(report)])
                self.assertGreater(live, 0.8 * self.truth, (mode, live))
            elif mode is not None:
                self.assertIn("not hooked", notices)

    def test_churn_realloc_and_zero_size_balance(self):
        """Blocks that move between pymalloc and malloc (PyObject_Realloc of a
        small block past 512 B and back), zero-size and calloc requests,
        lists whose item arrays grow from 16 B to > 512 B, dicts and strings
        made and dropped: nothing is kept, so the exact heap must stay flat
        (a missed or doubled count would drift by kilobytes per step)."""
        code = textwrap.dedent("""\
            import ctypes, os, memstep
            api = ctypes.pythonapi
            for name in ("PyObject_Malloc", "PyMem_Malloc", "PyObject_Calloc",
                         "PyObject_Realloc", "PyMem_Realloc"):
                getattr(api, name).restype = ctypes.c_void_p
            api.PyObject_Malloc.argtypes = [ctypes.c_size_t]
            api.PyMem_Malloc.argtypes = [ctypes.c_size_t]
            api.PyObject_Calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
            api.PyObject_Realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            api.PyMem_Realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            api.PyObject_Free.argtypes = [ctypes.c_void_p]
            api.PyMem_Free.argtypes = [ctypes.c_void_p]
            for step in range(60):
                memstep.step(step)
                for i in range(200):
                    p = api.PyObject_Malloc(100 + i)
                    p = api.PyObject_Realloc(p, 2000 + i)   # pymalloc -> malloc
                    p = api.PyObject_Realloc(p, 40)         # stays malloc's
                    api.PyObject_Free(p)
                    q = api.PyMem_Malloc(0)
                    q = api.PyMem_Realloc(q, 300)           # malloc(1)? -> pool or malloc
                    q = api.PyMem_Realloc(q, 16)            # shrink, maybe in place
                    api.PyMem_Free(q)
                    c = api.PyObject_Calloc(i % 40, 8)
                    api.PyObject_Free(c)
                    api.PyObject_Free(api.PyObject_Malloc(0))
                    lst = []
                    for k in range(100):
                        lst.append(k)                       # items array 32 B -> 800 B
                    d = {str(k): k for k in range(i % 12)}
                    del lst, d
            memstep.step_end()
            print("ok")
            os._exit(0)
            """)
        out = os.path.join(common.temp_dir(self), "run")
        r = common.run_profiled([sys.executable, "-c", code], out, hooks=True, window=0,
                                sample_interval="4K", extra_env=SEEDED)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "ok\n")
        report = common.report_json(out)
        rows = self.steps(report)
        live = [s["live_bytes_end"] for s in rows]
        # Minima of the two halves: the series also sits ~564 KiB higher for
        # stretches of steps now and then, with MEMSTEP_PYMEM=0 as well (not
        # this hook's: probably another thread's unflushed counters, exact up
        # to threads x 1 MiB, docs/preload.md). One block lost or
        # doubled per iteration would move the second half by ~100 KiB.
        self.assertLess(abs(min(live[32:]) - min(live[5:32])), 8 * 1024, live)
        p = report["processes"][0]
        self.assertGreater(p["alloc_count"], 60 * 200 * 8)

    def test_fork_child_counts_its_own_objects(self):
        """A fork child inherits the arena table and the sampled-block bits:
        its own kept objects show in its exact heap like the parent's, and
        objects it frees that the parent allocated do not underflow it."""
        code = textwrap.dedent("""\
            import os, memstep
            kept = []
            def keep(step):
                for i in range(100):
                    kept.append({"step": step, "i": i})
                    kept.append([step, i, None])
                    kept.append("s-%d-%d" % (step, i))
            for step in range(20):
                memstep.step(step)
                keep(step)
            memstep.step_end()
            pid = os.fork()
            if pid == 0:
                del kept[:3000]                        # the parent's blocks, freed here
                for step in range(20, 60):
                    memstep.step(step)
                    keep(step)
                memstep.step_end()
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            print("child", os.waitstatus_to_exitcode(status))
            os._exit(0)
            """)
        out = os.path.join(common.temp_dir(self), "run")
        r = common.run_profiled([sys.executable, "-c", code], out, hooks=True, window=0,
                                sample_interval="4K", extra_env=SEEDED)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "child 0\n")
        report = common.report_json(out)
        self.assertEqual(len(report["processes"]), 2)
        child = [p for p in report["processes"] if p["fork_child"]][0]
        rows = [s for s in report["steps"] if s["pid"] == child["pid"] and s["step"] >= 20]
        self.assertEqual([s["step"] for s in rows], list(range(20, 60)))
        live = slope_of([s["live_bytes_end"] for s in rows])
        self.assertLess(abs(live - self.truth), 0.10 * self.truth, (live, self.truth))
        mm = [s["mmap_live_bytes_end"] for s in rows]
        self.assertLessEqual(mm[-1] - mm[5], 256 * 1024, mm)

    def test_state_and_plain_c_program(self):
        code = textwrap.dedent("""\
            import ctypes
            lib = ctypes.PyDLL(None)
            ps = ctypes.c_uint64(0)
            print("state=%d pool=%d install=%d" % (
                lib.memstep_pymem_state(ctypes.byref(ps)), ps.value, lib.memstep_pymem_install()))
            """)
        out = os.path.join(common.temp_dir(self), "run")
        r = common.run_profiled([sys.executable, "-c", code], out, hooks=True, window=0)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("state=1 pool=16384 install=1", r.stdout)
        # Not Python: the entry point does nothing and says nothing.
        cc = os.environ.get("MEMSTEP_TEST_PYMEM_C", "")
        self.assertTrue(cc and os.path.exists(cc), "MEMSTEP_TEST_PYMEM_C is not set")
        env = common.clean_env()
        env["LD_PRELOAD"] = common.LIB
        env["MEMSTEP_DIR"] = common.temp_dir(self)
        r = subprocess.run([cc], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "install=0\n", ""))


if __name__ == "__main__":
    unittest.main()
