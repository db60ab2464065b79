"""Tests of the tensor blocks of PyTorch's caching allocator
(python/memstep/_torch_blocks.py, preload/cuda/torch_blocks.cc).

CI has no GPU and no CUDA torch: the blocks come from
tests/python/fake_torch_blocks.py, a double of the caching allocator with
the real API's names, signatures and snapshot format; ApiTest checks those
against the real torch 2.x module (the pip torch of the `python3` on PATH).
CollectorTest runs in process against a recording API; ProfiledTest runs
planted programs under libmemstep.so, with the double's segments allocated
by the fake libcudart (tests/cuda/fake), and reads `memstep report`'s JSON.
"""

import contextlib
import io
import os
import subprocess
import sys
import textwrap
import unittest

import common
import fake_torch_blocks as fb

sys.path.insert(0, common.PYDIR)
from memstep import _torch_blocks  # noqa: E402

MB = 1024 * 1024


class RecordingApi:
    """memstep_torch_block / memstep_torch_block_sample, recorded; every
    block sampled with p = 1 (interval 0) unless `interval` says otherwise."""

    def __init__(self, interval=0):
        self.events = []
        self.interval = interval

    def torch_block_sample(self, size):
        return self.interval

    def torch_block(self, alloc, device, addr, size, interval, frames, n):
        self.events.append((alloc, device, addr, size, interval, frames, n))


def lines_of(frames):
    """[(name, file, line)] of a frames byte string."""
    parts = frames.split(b"\0")
    return [(parts[i].decode(), parts[i + 1].decode(), int(parts[i + 2]))
            for i in range(0, len(parts) - 2, 3)]


class CollectorTest(unittest.TestCase):
    def setUp(self):
        self.fake = fb.FakeTorch().install()
        self.addCleanup(self.fake.uninstall)
        self.api = RecordingApi()
        self.c = _torch_blocks.Collector(_torch_blocks.ON)

    def test_enabled_when_cuda_initialises_then_state_history(self):
        self.assertTrue(self.c.install(self.fake.torch))
        self.assertEqual(self.fake.history_calls, [])  # CUDA not initialised: queued
        self.c.push(self.api)
        self.assertEqual(self.api.events, [])
        keep = self.fake.empty(1000)  # initialises "CUDA": the queued call runs
        self.assertEqual(self.fake.history_calls, [("state", "alloc", "python")])
        self.c.push(self.api)
        (alloc, dev, addr, size, interval, frames, n), = self.api.events
        self.assertEqual((alloc, dev, addr, size, interval), (1, 0, keep.data_ptr(), 1024, 0))
        self.assertEqual(n, len(frames))
        name, path, line = lines_of(frames)[0]  # innermost first: this test's line
        self.assertEqual((name, os.path.basename(path)),
                         ("test_enabled_when_cuda_initialises_then_state_history",
                          "torch_blocks_test.py"))

    def test_leak_free_steps_write_nothing_after_warmup(self):
        self.c.install(self.fake.torch)
        for step in range(6):
            a = self.fake.empty(300 * 1024)
            b = self.fake.empty(3 * MB)
            del a, b
            self.c.push(self.api)
        self.assertEqual(self.api.events, [])  # freed before every step end
        weights = self.fake.empty(5 * MB)
        self.c.push(self.api)
        for step in range(5):
            x = self.fake.empty(64 * 1024)
            del x
            self.c.push(self.api)
        self.assertEqual([e[:4] for e in self.api.events],
                         [(1, 0, weights.data_ptr(), 5 * MB)])

    def test_leak_and_free_events(self):
        self.c.install(self.fake.torch)
        kept = []
        for step in range(4):
            kept.append(self.fake.empty(100 * 1024))
            self.c.push(self.api)
        self.assertEqual([(e[0], e[2]) for e in self.api.events],
                         [(1, t.data_ptr()) for t in kept])
        self.api.events = []
        gone = kept.pop(1)
        addr = gone.data_ptr()
        del gone
        self.c.push(self.api)
        self.assertEqual(self.api.events, [(0, 0, addr, 100 * 1024, -1, None, 0)])

    def test_unsampled_block_has_no_frames(self):
        self.c.install(self.fake.torch)
        api = RecordingApi(interval=-1)
        keep = self.fake.empty(4096)
        self.c.push(api)
        self.assertEqual(api.events, [(1, 0, keep.data_ptr(), 4096, -1, None, 0)])

    def test_nolines_mode_leaves_history_alone(self):
        c = _torch_blocks.Collector(_torch_blocks.NOLINES)
        c.install(self.fake.torch)
        keep = self.fake.empty(4096)
        c.push(self.api)
        self.assertEqual(self.fake.history_calls, [])
        self.assertEqual(len(self.api.events), 1)
        self.assertIsNone(self.api.events[0][5])  # PyTorch kept no frames
        del keep

    def test_off_mode_does_nothing(self):
        c = _torch_blocks.Collector(_torch_blocks.OFF)
        self.assertFalse(c.install(self.fake.torch))
        keep = self.fake.empty(4096)
        c.push(self.api)
        self.assertEqual((self.fake.history_calls, self.api.events, self.fake.snapshots),
                         ([], [], 0))
        del keep

    def test_mode_from_env(self):
        cases = {None: "on", "1": "on", "0": "off", "off": "off", "nolines": "nolines",
                 " NoLines ": "nolines"}
        for value, mode in cases.items():
            env = {} if value is None else {"MEMSTEP_TORCH_BLOCKS": value}
            self.assertEqual(_torch_blocks.mode_from_env(env), mode, value)

    def test_cuda_initialised_before_install(self):
        keep = self.fake.empty(4096)  # before the hook: enable() at the first step end
        self.c.push(self.api)
        self.assertEqual(self.fake.history_calls, [("state", "alloc", "python")])
        self.assertEqual(len(self.api.events), 1)
        del keep

    def test_failure_warns_once_then_off(self):
        self.c.install(self.fake.torch)
        keep = self.fake.empty(4096)

        def broken(*a, **k):
            raise RuntimeError("planted failure in _snapshot")

        self.fake.memory._snapshot = broken
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.c.push(self.api)
            self.c.push(self.api)
        lines = err.getvalue().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertTrue(lines[0].startswith("memstep: warning: PyTorch tensor blocks off after "
                                            "an error: RuntimeError('planted failure"), lines[0])
        self.assertTrue(self.c.failed)
        del keep

    def test_legacy_boolean_api(self):
        # torch 1.13's signature (2.0 adds keywords after `enabled`).
        calls = []

        def legacy(enabled, device=None):
            calls.append(enabled)

        self.fake.memory._record_memory_history = legacy
        self.c.install(self.fake.torch)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            keep = self.fake.empty(4096)
        self.assertEqual((calls, err.getvalue(), self.c.lines), ([True], "", True))
        del keep

    def test_cuda_malloc_async_backend_needs_no_blocks(self):
        self.fake.cuda.get_allocator_backend = lambda: "cudaMallocAsync"
        self.c.install(self.fake.torch)
        keep = self.fake.empty(4096)
        self.c.push(self.api)
        self.assertEqual((self.fake.history_calls, self.api.events, self.fake.snapshots),
                         ([], [], 0))
        del keep

    def test_lazy_init_never_broken(self):
        # A failing _record_memory_history inside torch's lazy init must not
        # raise into it.
        def broken(*a, **k):
            raise RuntimeError("planted failure in _record_memory_history")

        self.fake.memory._record_memory_history = broken
        self.c.install(self.fake.torch)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            keep = self.fake.empty(4096)  # runs the queued enable()
        self.assertIn("PyTorch tensor blocks off after an error", err.getvalue())
        del keep

    def test_never_imports_torch(self):
        self.fake.uninstall()
        self.c.push(self.api)
        self.assertNotIn("torch", sys.modules)
        self.fake.install()


class ApiTest(unittest.TestCase):
    """The double's API against the real torch 2.x (CPU build: the Python
    functions exist, their CUDA parts do not run)."""

    def test_double_matches_torch(self):
        code = textwrap.dedent("""
            import inspect, sys, torch, torch.cuda.memory
            sys.path.insert(0, %r)
            import fake_torch_blocks as fb
            fake = fb.FakeTorch()
            for mod, real, names in ((fake.cuda, torch.cuda, fb.API_CUDA),
                                     (fake.memory, torch.cuda.memory, fb.API_MEMORY)):
                for name in names:
                    want = list(inspect.signature(getattr(real, name)).parameters)
                    got = list(inspect.signature(getattr(mod, name)).parameters)
                    print(name, want == got, want, got)
            # The snapshot's keys, as the real _snapshot documents them.
            doc = torch.cuda.memory._snapshot.__doc__
            for key in ("address", "total_size", "blocks", "size", "requested_size",
                        "state", "frames", "active_allocated", "filename", "line", "name"):
                print("doc", key, key in doc)
        """ % common.HERE)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), len(fb.API_CUDA) + len(fb.API_MEMORY) + 11, lines)
        for line in lines:
            self.assertIn(" True", line.split("[")[0] + " ", line)


LEAK_SCRIPT = """
import ctypes, os, sys
sys.path.insert(0, %(here)r)
import fake_torch_blocks as fb
cudart = ctypes.CDLL(os.environ["MEMSTEP_TEST_FAKE_CUDART"])
fake = fb.FakeTorch(cudart=cudart).install()
import memstep
from memstep import _torch_blocks
assert memstep.enabled()
_torch_blocks.install(fake.torch)  # what the zero-code hook does after `import torch`
weights = [fake.empty(3 * 1024 * 1024) for _ in range(4)]
leaked = []


def leak_activations(k):
    leaked.append(fake.empty(%(leak)d))  # PLANTED_LEAK


for k in range(%(steps)d):
    memstep.step(k)
    act = [fake.empty(700 * 1024) for _ in range(6)]
    grad = fake.empty(5 * 1024 * 1024)
    if %(leak)d:
        leak_activations(k)
    del act, grad
memstep.step_end(%(steps)d - 1)
"""


def planted_line():
    for i, line in enumerate(LEAK_SCRIPT.splitlines()):
        if "PLANTED_LEAK" in line:
            return i + 1  # the script runs with python -c: line 1 is LEAK_SCRIPT's first
    raise AssertionError("no planted line")


class ProfiledTest(unittest.TestCase):
    STEPS = 40

    def run_script(self, leak, extra_env=None):
        cudart = os.environ.get("MEMSTEP_TEST_FAKE_CUDART", "")
        self.assertTrue(cudart, "MEMSTEP_TEST_FAKE_CUDART is not set (tests/python/CMakeLists)")
        out = common.temp_dir(self)
        env = common.clean_env()
        env["PYTHONPATH"] = common.PYDIR
        env["LD_PRELOAD"] = common.LIB
        env["MEMSTEP_DIR"] = out
        env["MEMSTEP_WINDOW"] = "0"
        env["MEMSTEP_SEED"] = "1"
        env["MEMSTEP_TEST_FAKE_CUDART"] = cudart
        env["LD_LIBRARY_PATH"] = os.environ.get("MEMSTEP_TEST_FAKE_DRV", "")
        env.update(extra_env or {})
        script = LEAK_SCRIPT % {"here": common.HERE, "leak": leak, "steps": self.STEPS}
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        return common.report_json(out)

    def block_sites(self, report):
        return [s for s in report["sites"] if s["kind"] == "tensor_block"]

    def planted_sites(self, report):
        line = planted_line()
        out = []
        for s in self.block_sites(report):
            frames = s.get("frames") or []
            if frames and frames[0].get("function") == "leak_activations" and \
                    frames[0].get("line") == line:
                out.append(s)
        return out

    def device_steps(self, report):
        rows = []
        for step in report["steps"]:
            for d in step.get("devices", []):
                if d.get("device") == 0:
                    rows.append(d)
        return rows

    def check_layers(self, report, leak):
        rows = self.device_steps(report)
        self.assertEqual(len(rows), self.STEPS)
        for k, d in enumerate(rows):
            tb = d["tensor_blocks"]
            # 4 weights of 3 MiB, plus the leak so far (the step's own
            # activations are freed before its end).
            want = 4 * 3 * MB + (k + 1) * leak
            self.assertEqual(tb["allocated_bytes"], want, k)
            # Segments (the fake cudart's cudaMalloc) are the device total.
            self.assertEqual(tb["reserved_bytes"], d["live_bytes_end"], k)
            self.assertEqual(tb["fragmentation_bytes"], d["live_bytes_end"] - want, k)
            self.assertGreaterEqual(d["live_bytes_end"], want)
            # Blocks never add to the device total: only the segments do.
            self.assertNotIn("tensor_block", d["live_by_kind"])

    def test_planted_leak_named_at_its_line_exact(self):
        leak = 4 * MB
        report = self.run_script(leak, {"MEMSTEP_DEVICE_SAMPLE_INTERVAL": "1"})
        self.check_layers(report, leak)
        sites = self.planted_sites(report)
        self.assertEqual(len(sites), 1, self.block_sites(report))
        site = sites[0]
        self.assertEqual(site["growth"]["class"], "LEAK", site["growth"])
        self.assertAlmostEqual(site["growth"]["bytes_per_step"], leak, delta=leak * 0.01)
        self.assertAlmostEqual(site["live_bytes_end"], self.STEPS * leak, delta=1)
        others = [s for s in self.block_sites(report)
                  if s is not site and s["growth"]["class"] == "LEAK"]
        self.assertEqual(others, [])

    def test_planted_leak_sampled(self):
        # Default device sampling (T_dev 8 MiB, 2 MiB while warm, seed 1): a
        # 4 MiB block is sampled with p = 0.39 (0.86 warm); 160 MiB leaked has
        # no sample with probability exp(-20). The Horvitz-Thompson rate has a
        # relative standard error of about sqrt(T/X) = 22 %: +-60 % is 2.7 SE.
        leak = 4 * MB
        report = self.run_script(leak)
        self.check_layers(report, leak)
        sites = self.planted_sites(report)
        self.assertEqual(len(sites), 1, self.block_sites(report))
        self.assertEqual(sites[0]["growth"]["class"], "LEAK", sites[0]["growth"])
        self.assertAlmostEqual(sites[0]["growth"]["bytes_per_step"], leak, delta=leak * 0.6)

    def test_leak_free_run_has_no_leak_site(self):
        report = self.run_script(0, {"MEMSTEP_DEVICE_SAMPLE_INTERVAL": "1"})
        self.check_layers(report, 0)
        self.assertTrue(self.block_sites(report))  # the weights
        leaks = [s for s in self.block_sites(report) if s["growth"]["class"] == "LEAK"]
        self.assertEqual(leaks, [])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:], verbosity=2)
