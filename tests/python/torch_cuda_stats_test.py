"""Tests of the PyTorch CUDA allocator statistics (python/memstep/_torch_cuda.py).

CI has no GPU and Debian's torch no CUDA, so the collection logic runs
against tests/python/fake_torch_cuda.py, a stand-in torch.cuda with planted
statistics. CollectorTest runs in process (no torch needed); the other tests
run programs under libmemstep.so, as `memstep run` does, and read the trace
with `memstep_trace_check --dump` (common.trace_markers: STEP, STAGE, EPOCH
and COUNTER lines in trace order).
CpuTorchTest uses Debian's real (CPU) torch and fails without it.
"""

import contextlib
import io
import os
import subprocess
import sys
import textwrap
import unittest

import common
import fake_torch_cuda as fake_cuda
from fake_torch_cuda import FakeCuda

sys.path.insert(0, common.PYDIR)
import memstep  # noqa: E402
from memstep import _torch_cuda  # noqa: E402

TRAIN = os.path.join(common.HERE, "train_mlp.py")


def has_torch():
    r = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    return r.returncode == 0


class CollectorTest(unittest.TestCase):
    """The collector against the fake torch.cuda, in process."""

    def setUp(self):
        self.counters = []

    def counter(self, name, value):
        self.counters.append((name.decode(), value))

    def fake(self, **kw):
        fake = FakeCuda(**kw).install()
        self.addCleanup(fake.uninstall)
        return fake

    def run_rounds(self, fake, collector, rounds):
        for k in range(rounds):
            fake.round = k
            collector.push(self.counter)

    def resets(self, fake):
        return [c[1] for c in fake.calls if c[0] == "reset_peak_memory_stats"]

    def test_planted_values_in_order_then_reset(self):
        fake = self.fake()
        self.run_rounds(fake, _torch_cuda.Collector(_torch_cuda.RESET), 3)
        self.assertEqual(self.counters,
                         fake_cuda.expected(0, 0) + fake_cuda.expected(0, 1) +
                         fake_cuda.expected(0, 2))
        self.assertEqual(self.counters[0], ("torch.cuda:0.allocated_bytes", 1000001))
        # Device 0 read, then reset; device 1 (nothing reserved) only read.
        self.assertEqual(fake.calls[:5], [
            ("is_initialized",), ("device_count",), ("memory_stats_as_nested_dict", 0),
            ("reset_peak_memory_stats", 0), ("memory_stats_as_nested_dict", 1)])
        self.assertEqual(self.resets(fake), [0, 0, 0])

    def test_device_reported_from_first_use_on(self):
        # Device 1 holds memory in round 2 only (then empty_cache): reported
        # from round 2 on, zeros included, so its series has no holes.
        fake = self.fake(dev1_rounds=(2,))
        self.run_rounds(fake, _torch_cuda.Collector(_torch_cuda.RESET), 4)
        zeros = [(name, 0) for name, _ in fake_cuda.expected(1, 3)]
        self.assertEqual(self.counters,
                         fake_cuda.expected(0, 0) + fake_cuda.expected(0, 1) +
                         fake_cuda.expected(0, 2) + fake_cuda.expected(1, 2) +
                         fake_cuda.expected(0, 3) + zeros)
        self.assertEqual(self.resets(fake), [0, 0, 0, 1, 0, 1])

    def test_missing_keys_skipped(self):
        # torch 1.13 has no requested_bytes; the cudaMallocAsync backend
        # leaves statistics out.
        missing = ("requested_bytes", "inactive_split_bytes")
        fake = self.fake(missing=missing)
        self.run_rounds(fake, _torch_cuda.Collector(_torch_cuda.RESET), 1)
        self.assertEqual(self.counters, fake_cuda.expected(0, 0, missing=missing))
        self.assertEqual(len(self.counters), 6)

    def test_default_mode_never_resets(self):
        fake = self.fake()
        self.run_rounds(fake, _torch_cuda.Collector(_torch_cuda.mode_from_env({})), 2)
        self.assertEqual(self.counters, fake_cuda.expected(0, 0, peaks=False) +
                         fake_cuda.expected(0, 1, peaks=False))
        self.assertEqual(self.resets(fake), [])

    def test_off_mode_touches_nothing(self):
        fake = self.fake()
        self.run_rounds(fake, _torch_cuda.Collector(_torch_cuda.OFF), 2)
        self.assertEqual(self.counters, [])
        self.assertEqual(fake.calls, [])

    def test_mode_from_env(self):
        cases = {None: "on", "1": "on", "0": "off", "off": "off", "noreset": "on",
                 " NoReset ": "on", "reset": "reset", " Reset ": "reset"}
        for value, mode in cases.items():
            env = {} if value is None else {"MEMSTEP_TORCH_CUDA_STATS": value}
            self.assertEqual(_torch_cuda.mode_from_env(env), mode, value)

    def test_cuda_not_initialized(self):
        fake = self.fake(initialized=False)
        self.run_rounds(fake, _torch_cuda.Collector(_torch_cuda.RESET), 2)
        self.assertEqual(self.counters, [])
        self.assertEqual(fake.calls, [("is_initialized",)] * 2)

    def test_no_torch_cuda_module(self):
        saved = sys.modules.pop("torch.cuda", None)
        try:
            _torch_cuda.Collector(_torch_cuda.RESET).push(self.counter)
        finally:
            if saved is not None:
                sys.modules["torch.cuda"] = saved
        self.assertEqual(self.counters, [])

    def test_failure_warns_once_then_off(self):
        fake = self.fake(fail_in="reset_peak_memory_stats")
        collector = _torch_cuda.Collector(_torch_cuda.RESET)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertIsNone(collector.push(self.counter))
            calls = len(fake.calls)
            self.assertIsNone(collector.push(self.counter))
        self.assertEqual(self.counters, fake_cuda.expected(0, 0))  # recorded before the error
        self.assertEqual(len(fake.calls), calls)  # nothing called any more
        lines = err.getvalue().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertTrue(lines[0].startswith(
            "memstep: warning: PyTorch CUDA statistics off after an error: "
            "RuntimeError('planted failure"), lines[0])

    def test_explicit_device(self):
        fake = self.fake()
        collector = _torch_cuda.Collector(_torch_cuda.RESET)
        collector.push(self.counter, device=1)  # asked for: reported though unused
        self.assertEqual(self.counters, [(n, 0) for n, _ in fake_cuda.expected(1, 0)])

        class Device:  # torch.device("cuda") has index None: the current device
            index = None

        for device in ("cuda:0", Device()):
            self.counters = []
            collector.push(self.counter, device=device)
            self.assertEqual(self.counters, fake_cuda.expected(0, 0))
        self.assertEqual(self.resets(fake), [1, 0, 0])

    def test_public_function_without_profiler(self):
        fake = self.fake()
        self.assertFalse(memstep.enabled())
        self.assertIsNone(memstep.torch_cuda_counters())
        self.assertEqual(fake.calls, [])

    def test_fake_matches_torch_cuda(self):
        self.assertTrue(has_torch(), "torch is not importable (the Quick start installs it)")
        # Run in a child: this process must not import torch (see below).
        code = textwrap.dedent("""
            import inspect, sys, torch
            sys.path.insert(0, %r)
            import fake_torch_cuda
            for name in fake_torch_cuda.API:
                params = list(inspect.signature(getattr(torch.cuda, name)).parameters)
                print(name, params)
        """ % common.HERE)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "is_initialized []", "device_count []", "current_device []",
            "memory_stats_as_nested_dict ['device']", "reset_peak_memory_stats ['device']"])

    def test_never_imports_torch(self):
        _torch_cuda.Collector(_torch_cuda.RESET).push(self.counter)
        memstep.torch_cuda_counters()
        self.assertNotIn("torch", sys.modules)


def counter_lines(pairs):
    return ["COUNTER %s=%d" % pair for pair in pairs]


def torch_counters(lines):
    return [line for line in lines if line.startswith("COUNTER torch.cuda")]


def before_step_end(lines, step, n):
    """The n lines right before the first `STEP step=<step> phase=1`."""
    prefix = "STEP step=%d phase=1 " % step
    for i, line in enumerate(lines):
        if line.startswith(prefix):
            return lines[max(0, i - n):i]
    raise AssertionError("no end of step %d in the trace" % step)


class ProfiledHelperTest(unittest.TestCase):
    """memstep.step()/step_end() record the statistics right before each step END."""

    SCRIPT = """
        import sys
        sys.path.insert(0, %r)
        from fake_torch_cuda import FakeCuda
        fake = FakeCuda(dev1_rounds=(2,)).install()
        import memstep
        assert memstep.enabled()
        keep = []
        for k in range(4):
            memstep.step(k)
            keep.append(bytearray(64 * 1024))
            fake.round = k
        memstep.step_end(3)
        print("resets=%%s" %% [c[1] for c in fake.calls if c[0] == "reset_peak_memory_stats"])
    """

    def run_script(self, env_extra=None):
        out = common.temp_dir(self)
        env = common.clean_env()
        env["PYTHONPATH"] = common.PYDIR
        env["LD_PRELOAD"] = common.LIB
        env["MEMSTEP_DIR"] = out
        env["MEMSTEP_WINDOW"] = "0"  # only the script's steps
        env.update(env_extra or {})
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(self.SCRIPT % common.HERE)],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        return r.stdout, common.trace_markers(self, out)

    def test_counters_before_each_step_end(self):
        # Opted in to the per-step peaks: read, then reset.
        stdout, lines = self.run_script({"MEMSTEP_TORCH_CUDA_STATS": "reset"})
        self.assertIn("resets=[0, 0, 0, 1, 0, 1]", stdout)
        for k in range(4):
            want = fake_cuda.expected(0, k)
            if k >= 2:  # device 1 used from round 2 on (zeros in round 3)
                want += [(n, v if k == 2 else 0) for n, v in fake_cuda.expected(1, k)]
            self.assertEqual(before_step_end(lines, k, len(want)), counter_lines(want), k)
        # Nowhere else: 4 x 8 for device 0, 2 x 8 for device 1.
        self.assertEqual(len(torch_counters(lines)), 48)

    def test_default_never_resets_the_programs_peaks(self):
        stdout, lines = self.run_script()
        self.assertIn("resets=[]", stdout)
        for k in range(4):
            want = fake_cuda.expected(0, k, peaks=False)
            if k >= 2:
                want += [(n, v if k == 2 else 0)
                         for n, v in fake_cuda.expected(1, k, peaks=False)]
            self.assertEqual(before_step_end(lines, k, len(want)), counter_lines(want), k)
        self.assertEqual(len(torch_counters(lines)), 36)  # 4 x 6 + 2 x 6

    def test_opt_out(self):
        stdout, lines = self.run_script({"MEMSTEP_TORCH_CUDA_STATS": "0"})
        self.assertIn("resets=[]", stdout)
        self.assertEqual(torch_counters(lines), [])
        self.assertEqual(sum(1 for l in lines if l.startswith("STEP ")), 8)


class ProfiledHooksTest(unittest.TestCase):
    """The zero-code hooks of `memstep run` record the statistics before each
    automatic step END (real CPU training, fake torch.cuda statistics)."""

    EPOCHS, BATCHES = 2, 5

    def run_train(self, *extra, env=None):
        out = common.temp_dir(self)
        argv = [sys.executable, TRAIN, "--epochs", str(self.EPOCHS), "--batches",
                str(self.BATCHES), "--batch", "16", "--hidden", "32", "--width", "16"]
        r = common.run_profiled(argv + list(extra), out, window=0, extra_env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("memstep: warning", r.stderr)
        self.assertIn("RESULT steps=%d " % (self.EPOCHS * self.BATCHES), r.stdout)
        return r.stdout, common.trace_markers(self, out)

    def test_counters_before_each_automatic_step_end(self):
        stdout, lines = self.run_train("--fake-cuda-stats", env={"MEMSTEP_TORCH_CUDA_STATS": "reset"})
        n = self.EPOCHS * self.BATCHES
        self.assertIn("FAKE resets=%s" % ",".join(["0"] * n), stdout)
        for k in range(n):
            want = counter_lines(fake_cuda.expected(0, k))
            # The optimizer stage ends, the statistics, the step ends.
            got = before_step_end(lines, k, len(want) + 1)
            self.assertTrue(got[0].startswith("STAGE optimizer step=%d phase=1 " % k), got[0])
            self.assertEqual(got[1:], want, k)
        self.assertEqual(len(torch_counters(lines)), 8 * n)

    def test_automatic_steps_never_reset_by_default(self):
        stdout, lines = self.run_train("--fake-cuda-stats")
        self.assertIn("FAKE resets=\n", stdout + "\n")
        self.assertEqual(len(torch_counters(lines)), 6 * self.EPOCHS * self.BATCHES)

    def test_cpu_torch_records_nothing(self):
        # Debian's torch has no CUDA: is_initialized() stays False, no counter.
        stdout, lines = self.run_train()
        self.assertIn("cuda_init=0", stdout)
        self.assertEqual(torch_counters(lines), [])
        ends = [l for l in lines if l.startswith("STEP ") and " phase=1 " in l]
        self.assertEqual(len(ends), self.EPOCHS * self.BATCHES)


if __name__ == "__main__":
    if any(arg.startswith("ProfiledHooksTest") for arg in sys.argv[1:]):
        common.require_torch()
    unittest.main()
