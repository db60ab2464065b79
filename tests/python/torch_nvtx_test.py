"""NVTX step ranges with the zero-code PyTorch hooks: every step counted once.

tests/python/train_mlp.py --nvtx-steps wraps each iteration in an NVTX range
"train_step N" (tests/python/nvtx_client.py: CI's torch has no torch.cuda.nvtx)
under `memstep run`, which makes libmemstep.so the NVTX injection library.
The hooks must stand down at the first NVTX step (memstep_nvtx_steps_seen()).
Fails without torch or when libmemstep.so lacks that query.
"""

import os
import shutil
import subprocess
import sys
import unittest

import common
import fake_torch_cuda as fake_cuda

common.require_torch()

CHECK = os.environ.get("MEMSTEP_TEST_CHECK", "")
TRAIN = os.path.join(common.HERE, "train_mlp.py")


def lib_has_nvtx_query():
    nm = shutil.which("nm")
    if nm is None or not common.LIB:
        return False
    r = subprocess.run([nm, "-D", "--defined-only", common.LIB], capture_output=True, text=True)
    return any(line.split()[-1] == "memstep_nvtx_steps_seen"
               for line in r.stdout.splitlines() if line.strip())


if not lib_has_nvtx_query() or not CHECK or not common.cli_has_python_hooks():
    sys.stderr.write("FAIL: needs memstep_nvtx_steps_seen in %s, memstep_trace_check and "
                     "memstep run with Python hooks\n" % common.LIB)
    sys.exit(common.MISSING)


class NvtxStepsTest(unittest.TestCase):
    EPOCHS, BATCHES = 2, 5

    def run_train(self):
        out = common.temp_dir(self)
        argv = [sys.executable, TRAIN, "--epochs", str(self.EPOCHS), "--batches",
                str(self.BATCHES), "--batch", "16", "--hidden", "32", "--width", "16",
                "--nvtx-steps", "--fake-cuda-stats"]
        r = common.run_profiled(argv, out, window=0)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("memstep: warning", r.stderr)
        self.assertIn("RESULT steps=%d " % (self.EPOCHS * self.BATCHES), r.stdout)
        self.assertIn("NVTX attached=1", r.stdout)
        return common.trace_markers(self, out)

    def test_each_step_once_with_stages_and_statistics(self):
        lines = self.run_train()
        n = self.EPOCHS * self.BATCHES
        steps = [" ".join(l.split()[1:3]) for l in lines if l.startswith("STEP ")]
        # The automatic step 0 (begun by the DataLoader's first iteration) is
        # ended by the first NVTX step; then only NVTX's steps.
        # The automatic step 0 opened by the first iteration is continued by
        # NVTX's step 0 (the same number): no short extra step.
        want = []
        for k in range(n):
            want += ["step=%d phase=0" % k, "step=%d phase=1" % k]
        self.assertEqual(steps, want)
        ends = [i for i, l in enumerate(lines) if l.startswith("STEP ") and " phase=1 " in l]
        for k, i in enumerate(ends):
            # The automatic stages go on inside NVTX's steps ...
            stages = {l.split()[1] for l in lines[:i]
                      if l.startswith("STAGE ") and " step=%d phase=1 " % k in l}
            self.assertLessEqual({"forward", "backward", "optimizer"}, stages, k)
            # ... and the statistics come at the optimizer step's end (six:
            # no *_peak counter, the program's peaks are not reset by default).
            counters = ["COUNTER %s=%d" % c for c in fake_cuda.expected(0, k, peaks=False)]
            self.assertTrue(lines[i - 8].startswith("STAGE optimizer step=%d phase=1 " % k),
                            lines[i - 8:i])
            self.assertEqual(lines[i - 7:i - 1], counters, k)
            self.assertTrue(lines[i - 1].startswith("STAGE data step=%d phase=0 " % k),
                            lines[i - 1])
        self.assertEqual(sum(1 for l in lines if l.startswith("COUNTER torch.cuda")), 6 * n)


if __name__ == "__main__":
    unittest.main()
