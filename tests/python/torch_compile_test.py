"""torch.compile and CUDA graphs under `memstep run` (issue 10 item 4).

CompileTest (torch >= 2.0: the pip torch of the `python3` on PATH, which
scripts/install-deps.sh installs; fails on a torch without torch.compile):
  - the zero-code hooks cause no graph break: a fullgraph compile of a
    function calling the model, and a fullgraph-compiled train step
    (forward, backward, optimizer step), both succeed under memstep, and
    Dynamo counts no graph break;
  - the compiled train step, which makes no Python optimizer call once
    compiled, is still one step per call.
GraphReplayTest (any torch, so also Debian's 1.13): each replay of a CUDA
graph that captured an optimizer step is a step (CPU: CUDAGraph's placeholder
base class gets no-op methods in tests/python/compiled_train.py).
"""

import glob
import os
import subprocess
import sys
import unittest

import common

common.require_torch()

CHECK = os.environ.get("MEMSTEP_TEST_CHECK", "")
SCRIPT = os.path.join(common.HERE, "compiled_train.py")


def markers(test, run_dir):
    """STEP and STAGE lines of every trace in run_dir (the helper processes
    of torch.compile have none), chunk files in order."""
    test.assertTrue(CHECK, "MEMSTEP_TEST_CHECK is not set")
    lines = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*.trace"))):
        r = subprocess.run([CHECK, path, "--dump"], capture_output=True, text=True, timeout=60)
        test.assertEqual(r.returncode, 0, r.stderr)
        lines += [l for l in r.stdout.splitlines() if l.split(" ", 1)[0] in ("STEP", "STAGE")]
    return lines


def count(lines, prefix, phase):
    return sum(1 for l in lines if l.startswith(prefix + " ") and " phase=%d " % phase in l)


def run(test, mode):
    out = common.temp_dir(test)
    env = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
    r = common.run_profiled([sys.executable, SCRIPT, mode], out, window=0, extra_env=env,
                            timeout=240)
    test.assertEqual(r.returncode, 0, r.stderr[-4000:])
    test.assertIn("DONE", r.stdout)
    return r.stdout, markers(test, out)


class CompileTest(unittest.TestCase):
    def test_no_graph_break_and_compiled_steps(self):
        import torch
        self.assertTrue(hasattr(torch, "compile"),
                        "%s has torch %s, without torch.compile (scripts/install-deps.sh "
                        "installs the pip torch)" % (sys.executable, torch.__version__))
        stdout, lines = run(self, "compile")
        self.assertIn("BREAKS 0\n", stdout)
        # 4 calls: the first compiles (the optimizer step is learnt while
        # Dynamo traces it), the 3 others are steps of stage "compiled";
        # the step opened by the last one saw no call and stays open at exit.
        self.assertEqual(count(lines, "STAGE compiled", 0), 3, lines)
        self.assertEqual(count(lines, "STEP", 1), 3, lines)
        self.assertEqual(count(lines, "STEP", 0), 4, lines)
        for k in range(3):
            self.assertTrue(any(l.startswith("STAGE compiled step=%d phase=0 " % k)
                                for l in lines), (k, lines))


class GraphReplayTest(unittest.TestCase):
    def test_replays_are_steps(self):
        stdout, lines = run(self, "graph")
        self.assertIn("REPLAYS 5", stdout)
        # Two eager steps end steps 0 and 1; the capture marks nothing; the
        # five replays end steps 2..6; step 7, opened by the last, saw no
        # call and stays open at exit.
        self.assertEqual(count(lines, "STAGE graph", 0), 5, lines)
        self.assertEqual(count(lines, "STEP", 1), 7, lines)
        self.assertEqual(count(lines, "STEP", 0), 8, lines)
        self.assertEqual(count(lines, "STAGE optimizer", 0), 2, lines)


if __name__ == "__main__":
    unittest.main()
