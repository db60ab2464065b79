"""PyTorch's OutOfMemoryError as a memory snapshot (python/memstep/_torch_oom.py).

A real CUDA out-of-memory error cannot be produced here (no GPU; Debian's
torch has no CUDA), so FakeTorchOomTest hands _torch_oom.install a stand-in
`torch` and plays the caching allocator's part: it calls the attached
observer as torch._C would (device, requested, total, free), or lets an
OutOfMemoryError end the program (the excepthook path, older torch). The
programs run under libmemstep.so; `memstep report --format json` must show
the snapshot. RealTorchTest checks that the hooks install one of the two
paths into Debian's real (CPU) torch and that an uncaught
torch.cuda.OutOfMemoryError still ends the program as before.
"""

import os
import subprocess
import sys
import textwrap
import unittest

import common

GiB = 1 << 30
MiB = 1 << 20

FAKE = textwrap.dedent("""
    import sys, types
    sys.path.insert(0, %(pydir)r)
    import memstep
    from memstep import _torch_oom

    class OutOfMemoryError(RuntimeError):
        pass

    observers = []
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
    if %(observer)r:
        fake._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append)
    memstep.step(0)
    with memstep.stage("forward"):
        mode = _torch_oom.install(fake, memstep._resolve())
        print("mode", mode, flush=True)
        if mode == "observer":
            # What the caching allocator does before it raises.
            observers[0](1, 3 * %(gib)d, 80 * %(gib)d, 256 * %(mib)d)  # total, free
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB")
""")


class FakeTorchOomTest(unittest.TestCase):
    def run_fake(self, observer):
        out = os.path.join(common.temp_dir(self), "run")
        script = FAKE % {"pydir": common.PYDIR, "observer": observer, "gib": GiB, "mib": MiB}
        r = common.run_profiled([sys.executable, "-c", script], out, hooks=False, window=0)
        # The program still ends with the error, as without memstep.
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("CUDA out of memory", r.stderr)
        self.assertIn("mode %s" % ("observer" if observer else "excepthook"), r.stdout)
        return common.report_json(out)["memory_snapshots"]

    def test_observer(self):
        snaps = self.run_fake(observer=True)
        self.assertEqual(len(snaps), 1, snaps)  # the observer's; the excepthook is not installed
        s = snaps[0]
        self.assertEqual(s["cause"], "torch_oom")
        self.assertTrue(s["out_of_memory"])
        self.assertEqual((s["device"], s["requested_bytes"], s["free_bytes"], s["total_bytes"]),
                         (1, 3 * GiB, 256 * MiB, 80 * GiB))
        self.assertEqual((s["step"], s["stage"]), (0, "forward"))
        self.assertIn("out of memory at step 0, stage forward, requested 3.00 GiB "
                      "(3,221,225,472 bytes), free 256 MiB of 80.0 GiB", s["summary"])

    def test_excepthook(self):
        snaps = self.run_fake(observer=False)
        self.assertEqual(len(snaps), 1, snaps)
        s = snaps[0]
        self.assertEqual((s["cause"], s["device"], s["requested_bytes"]), ("torch_oom", None, 0))
        self.assertEqual(s["step"], 0)


class RealTorchTest(unittest.TestCase):
    def test_hooks_install_a_path(self):
        common.require_torch()
        out = os.path.join(common.temp_dir(self), "run")
        script = textwrap.dedent("""
            import sys
            import torch
            from memstep import _torch_oom
            print("installed", _torch_oom._installed,
                  "excepthook" if sys.excepthook is not sys.__excepthook__ else "observer",
                  flush=True)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (planted)")
        """)
        r = common.run_profiled([sys.executable, "-c", script], out, hooks=True, window=0)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("CUDA out of memory (planted)", r.stderr)
        self.assertIn("installed True", r.stdout, r.stderr)
        snaps = common.report_json(out)["memory_snapshots"]
        if "excepthook" in r.stdout:  # no observer in this torch: the uncaught error is seen
            self.assertEqual([s["cause"] for s in snaps], ["torch_oom"])
        else:  # the observer fires only inside the allocator: nothing to see here
            self.assertEqual(snaps, [])


if __name__ == "__main__":
    unittest.main()
