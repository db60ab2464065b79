"""Tests of the zero-code PyTorch hooks (python/memstep/_torch_hooks.py and
python/startup/sitecustomize.py). Fails without torch (the Quick start installs it).

MarkerSequenceTest runs in process with a fake C API that records the calls;
ProfiledTrainingTest runs tests/python/train_mlp.py under libmemstep.so, as
`memstep run` does, and reads `memstep report --format json`.
"""

import glob
import math
import os
import subprocess
import sys
import unittest

import common

common.require_torch()

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

sys.path.insert(0, common.PYDIR)
import memstep  # noqa: E402
from memstep import _torch_cuda, _torch_hooks  # noqa: E402
import fake_torch_cuda as fake_cuda  # noqa: E402

TRAIN = os.path.join(common.HERE, "train_mlp.py")


class FakeApi:
    """Records the C API calls as short strings: E<n> epoch, S<n>/s<n> step
    begin/end, +name/-name stage begin/end, C:name=value counter. `nvtx`
    is what memstep_nvtx_steps_seen() returns."""

    def __init__(self):
        self.calls = []
        self.nvtx = False
        self.step_begin = lambda n: self.calls.append("S%d" % n)
        self.step_end = lambda n: self.calls.append("s%d" % n)
        self.stage_begin = lambda b: self.calls.append("+" + b.decode())
        self.stage_end = lambda b: self.calls.append("-" + b.decode())
        self.epoch_begin = lambda n: self.calls.append("E%d" % n)
        self.counter = lambda name, v: self.calls.append("C:%s=%d" % (name.decode(), v))
        self.nvtx_steps_seen = lambda: int(self.nvtx)


def counters(dev, k):
    return ["C:%s=%d" % pair for pair in fake_cuda.expected(dev, k)]


class MarkerSequenceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        memstep._api = FakeApi()
        assert _torch_hooks.install(torch)

    def setUp(self):
        for k in memstep.explicit:
            memstep.explicit[k] = False
        memstep._step_open = False
        self.api = FakeApi()
        memstep._api = self.api
        _torch_hooks._state = _torch_hooks._State(self.api, torch)
        _torch_cuda.collector = _torch_cuda.Collector(_torch_cuda.RESET)
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.data = TensorDataset(torch.randn(12, 8), torch.randn(12, 1))

    def train(self, opt, epochs=2, batch=4, evaluate=False, explicit=False, each=None):
        loader = DataLoader(self.data, batch_size=batch)
        n = 0
        for _ in range(epochs):
            for x, y in loader:
                if explicit:
                    memstep.step(n)
                opt.zero_grad()
                loss = nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                if each is not None:
                    each(n)  # before the optimizer step: the step's end
                opt.step()
                n += 1
            if evaluate:
                with torch.no_grad():
                    for x, _ in DataLoader(self.data, batch_size=6):
                        self.model(x)
        _torch_hooks._at_exit()
        return self.api.calls

    STEP = ["-data", "+forward", "-forward", "+backward", "-backward", "+optimizer",
            "-optimizer"]

    def expected(self, epochs=2, steps_per_epoch=3):
        out, n = [], 0
        for e in range(epochs):
            out.append("E%d" % e)
            for _ in range(steps_per_epoch):
                out += ["S%d" % n, "+data"] + self.STEP + ["s%d" % n]
                n += 1
        return out

    def test_sgd_steps_stages_epochs(self):
        calls = self.train(torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.assertEqual(calls, self.expected())

    def test_adam_and_user_subclass_count_once(self):
        class MyAdam(torch.optim.Adam):
            def step(self, closure=None):
                return super().step(closure)

        torch.optim.Adam(self.model.parameters())  # wraps Adam.step too: nested
        calls = self.train(MyAdam(self.model.parameters(), lr=0.1))
        self.assertEqual(calls, self.expected())

    def test_eval_between_epochs_is_outside_steps(self):
        calls = self.train(torch.optim.SGD(self.model.parameters(), lr=0.1), evaluate=True)
        evaluation = ["+forward", "-forward", "+data", "-data"] * 2
        exp = self.expected()
        i = exp.index("E1")
        self.assertEqual(calls, exp[:i] + evaluation + exp[i:] + evaluation)

    def loop_without_loader(self, steps, then_forward):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        for _ in range(steps):
            opt.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            opt.step()
        if then_forward:
            self.model(x).sum().backward()  # a step that ran, cut short by exit
        _torch_hooks._at_exit()
        return self.api.calls

    def test_exit_leaves_the_step_the_loop_never_ran_open(self):
        # Without a DataLoader the next step opens when the optimizer step
        # returns; the program then leaves its loop. That step saw no forward
        # or optimizer step: at exit it is not ended (no row), so what the
        # program frees on its way out belongs to no step.
        calls = self.loop_without_loader(3, then_forward=False)
        steps = [c for c in calls if c[0] in "Ss"]
        self.assertEqual(steps, ["S0", "s0", "S1", "s1", "S2", "s2", "S3"])
        self.assertEqual(calls[-2:], ["S3", "+data"])

    def test_exit_ends_a_step_that_ran(self):
        calls = self.loop_without_loader(3, then_forward=True)
        steps = [c for c in calls if c[0] in "Ss"]
        self.assertEqual(steps, ["S0", "s0", "S1", "s1", "S2", "s2", "S3", "s3"])
        self.assertEqual(calls[-1], "s3")

    def test_explicit_steps_win(self):
        calls = self.train(torch.optim.SGD(self.model.parameters(), lr=0.1), explicit=True)
        # The automatic step 0 (opened by the loader) is left open for the
        # first explicit step, which continues it (the same number) in
        # libmemstep.so; every other step marker is the program's own.
        self.assertEqual([c for c in calls if c[0] in "Ss"],
                         ["S0"] + ["S%d" % i for i in range(6)])
        self.assertEqual(calls.count("+forward"), 6)
        self.assertEqual(calls.count("+optimizer"), 6)
        self.assertEqual(calls.count("E1"), 1)

    def fake_cuda(self):
        fake = fake_cuda.FakeCuda().install()
        self.addCleanup(fake.uninstall)
        return fake

    def test_cuda_stats_before_each_step_end(self):
        fake = self.fake_cuda()

        def each(n):
            fake.round = n

        calls = self.train(torch.optim.SGD(self.model.parameters(), lr=0.1), each=each)
        exp = []
        for c in self.expected():
            if c[0] == "s":
                exp += counters(0, int(c[1:]))
            exp.append(c)
        self.assertEqual(calls, exp)

    def test_cuda_stats_with_explicit_steps(self):
        # The helper records them before each step END it emits (the
        # automatic step 0 is continued by the explicit one: no END of its own).
        fake = self.fake_cuda()

        def each(n):
            fake.round = n

        calls = self.train(torch.optim.SGD(self.model.parameters(), lr=0.1), explicit=True,
                           each=each)
        memstep.step_end()
        marks = [(i, c) for i, c in enumerate(calls) if c[0] in "Ss"]
        self.assertEqual([c for _, c in marks],
                         ["S0"] + ["S%d" % i for i in range(6)] + ["s5"])
        # (marker index in `marks`, round of the step it ends)
        ends = [(1 + k, k - 1) for k in range(1, 6)] + [(7, 5)]
        for m, k in ends:
            i = marks[m][0]
            self.assertEqual(calls[i - 8:i], counters(0, k), marks[m])
        self.assertEqual(sum(1 for c in calls if c[0] == "C"), 8 * len(ends))

    def test_nvtx_steps_take_over(self):
        # NVTX step ranges start during step 1: from then on no automatic step
        # marker (the first NVTX step ended step 1 in libmemstep.so); stages and
        # epochs go on, and the statistics come at each optimizer step's end.
        fake = self.fake_cuda()

        def each(n):
            fake.round = n
            self.api.nvtx = n >= 1

        calls = self.train(torch.optim.SGD(self.model.parameters(), lr=0.1), each=each)
        body = ["-data", "+forward", "-forward", "+backward", "-backward", "+optimizer",
                "-optimizer"]
        exp = ["E0", "S0", "+data"] + body + counters(0, 0) + ["s0", "S1", "+data"]
        for n in (1, 2):
            exp += body + counters(0, n) + ["+data"]
        exp += ["-data", "E1"] + body[1:] + counters(0, 3) + ["+data"]
        for n in (4, 5):
            exp += body + counters(0, n) + ["+data"]
        exp += ["-data"]  # at exit
        self.assertEqual(calls, exp)
        self.assertFalse(_torch_hooks._state.steps_on)

    def test_nvtx_query_absent(self):
        # An older libmemstep.so without memstep_nvtx_steps_seen: steps as before.
        del self.api.nvtx_steps_seen
        _torch_hooks._state = _torch_hooks._State(self.api, torch)
        calls = self.train(torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.assertEqual(calls, self.expected())

    def test_behaviour_unchanged(self):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        x = torch.randn(4, 8)

        def closure():
            return torch.tensor(7.0)

        self.assertEqual(opt.step(closure).item(), 7.0)
        self.assertTrue(getattr(type(opt).step, "hooked", True))

        def bad_closure():
            raise ValueError("from closure")

        with self.assertRaises(ValueError):
            opt.step(bad_closure)
        self.assertEqual(_torch_hooks._state.opt_depth, 0)

        class Flaky(nn.Module):
            fail = True

            def forward(self, x):
                if self.fail:
                    raise KeyError("boom")
                return x

        flaky = Flaky()
        model = nn.Sequential(nn.Linear(8, 8), flaky)
        with self.assertRaises(KeyError):
            model(x)
        flaky.fail = False
        # The root's next call is a root forward again (its post hooks ran).
        self.assertEqual(model(x).shape, (4, 8))
        self.assertEqual(self.api.calls[-2:], ["-forward", "+backward"])
        self.assertEqual(_torch_hooks._state.fwd_depth, 0)


class CompiledStepLogicTest(unittest.TestCase):
    """The compiled-step machinery of _torch_hooks without Dynamo (so also on
    torch 1.13): "tracing" is simulated by making _is_compiling() return
    True and _comptime call its callback at once, as Dynamo does at trace
    time. The real thing: torch_compile_test.py."""

    @classmethod
    def setUpClass(cls):
        memstep._api = FakeApi()
        _torch_hooks.install(torch)  # once per process (MarkerSequenceTest may have)

    def setUp(self):
        for k in memstep.explicit:
            memstep.explicit[k] = False
        self.api = FakeApi()
        memstep._api = self.api
        _torch_hooks._state = _torch_hooks._State(self.api, torch)
        self.tracing = False
        saved = (_torch_hooks._is_compiling, _torch_hooks._comptime)
        self.addCleanup(self.restore, saved)
        _torch_hooks._is_compiling = lambda: self.tracing
        _torch_hooks._comptime = lambda fn: fn(None)
        torch.manual_seed(0)
        self.model = nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    @staticmethod
    def restore(saved):
        _torch_hooks._is_compiling, _torch_hooks._comptime = saved

    def train_step(self, traced):
        """A train step; its first call is "traced" when `traced`."""
        self.tracing = traced
        try:
            self.model(torch.ones(2, 4)).sum().backward()
            self.opt.step()
        finally:
            self.tracing = False

    def test_traced_optimizer_step_makes_calls_steps(self):
        calls = {"n": 0}

        def fn():
            calls["n"] += 1
            if calls["n"] == 1:
                self.train_step(traced=True)  # the compiling call: traced hooks only
            # later calls replay: no Python hook runs

        compiled = _torch_hooks._wrap_compiled(fn)
        for _ in range(4):
            compiled()
        _torch_hooks._at_exit()
        steps = [c for c in self.api.calls if c[0] in "Ss"]
        # The first call learns it (no step was open: none ends); calls 2-4
        # are steps 0-2; step 3, opened by the last, saw no call: it stays
        # open at exit (no step).
        self.assertEqual(steps, ["S0", "s0", "S1", "s1", "S2", "s2", "S3"])
        self.assertEqual(self.api.calls.count("+compiled"), 3)
        self.assertNotIn("+optimizer", self.api.calls)

    def test_eager_optimizer_inside_is_not_counted_twice(self):
        first = {"done": False}

        def fn():
            # Traced once, then Dynamo runs the optimizer step eagerly
            # (a graph break inside it): the eager hook ends the step.
            self.train_step(traced=not first["done"])
            first["done"] = True

        compiled = _torch_hooks._wrap_compiled(fn)
        for _ in range(3):
            compiled()
        _torch_hooks._at_exit()
        ends = [c for c in self.api.calls if c[0] == "s"]
        # Calls 2 and 3; step 2, opened by the last, saw no call: it stays
        # open at exit.
        self.assertEqual(ends, ["s0", "s1"])
        self.assertEqual(self.api.calls.count("+optimizer"), 2)

    def test_untraced_optimizer_is_not_a_compiled_step(self):
        compiled = _torch_hooks._wrap_compiled(lambda: self.model(torch.ones(2, 4)))
        for _ in range(3):
            compiled()
        self.assertNotIn("+compiled", self.api.calls)
        self.assertEqual([c for c in self.api.calls if c[0] in "Ss"], ["S0"])

    def test_compile_wrapper_shapes(self):
        seen = []

        def fake_compile(model=None, **kwargs):
            seen.append(kwargs)
            if model is None:
                return lambda m: (lambda *a: m(*a))
            return model if isinstance(model, nn.Module) else (lambda *a: model(*a))

        wrapped = _torch_hooks._wrap_compile(torch, fake_compile)
        self.assertIs(wrapped(self.model), self.model)  # a module: left alone
        f = wrapped(lambda x: x + 1, mode="default")
        self.assertTrue(f._memstep_compiled)
        self.assertEqual(f(1), 2)
        g = wrapped(fullgraph=True)(lambda x: x * 3)  # decorator form
        self.assertTrue(g._memstep_compiled)
        self.assertEqual(g(2), 6)
        self.assertEqual(seen, [{}, {"mode": "default"}, {"fullgraph": True}])


class StartupImportTest(unittest.TestCase):
    """sitecustomize's finder wraps torch's import and leaves no trace."""

    PROBE = """
import sys
import torch
import memstep._torch_hooks as h
print("installed=%d" % (h._state is not None))
print("finder=%d" % any(type(f).__name__ == "_TorchFinder" for f in sys.meta_path))
print("loader=%s/%s" % (type(torch.__loader__).__name__, type(torch.__spec__.loader).__name__))
print("init_wrapped=%d" % hasattr(torch.optim.Optimizer.__init__, "__wrapped__"))
"""

    def probe(self, hooks, preload):
        env = common.hook_env(hooks=hooks)
        if preload:
            env["LD_PRELOAD"] = common.LIB
            env["MEMSTEP_DIR"] = common.temp_dir(self)
        r = subprocess.run([sys.executable, "-c", self.PROBE], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_hooked_under_profiler(self):
        out = self.probe(hooks=True, preload=True)
        self.assertIn("installed=1", out)
        self.assertIn("finder=0", out)
        self.assertIn("loader=SourceFileLoader/SourceFileLoader", out)
        self.assertIn("init_wrapped=1", out)

    def test_inert_without_profiler_or_env(self):
        for hooks, preload in ((True, False), (False, True)):
            out = self.probe(hooks=hooks, preload=preload)
            self.assertIn("installed=0", out)
            self.assertIn("init_wrapped=0", out)


def steps_of(report):
    pid = report["processes"][0]["pid"]
    return [s for s in report["steps"] if s["pid"] == pid]


def leak_sites(report):
    return [s for s in report["sites"] if s.get("class") == "LEAK"]


def leak_sites_at(report, line):
    """The LEAK sites with train_mlp.py:`line` in their stack."""
    return [s for s in leak_sites(report)
            if any(f.get("file", "").endswith("train_mlp.py") and f.get("line") == line
                   for f in s["frames"])]


def the_line(marker):
    """train_mlp.py's line that carries `marker`."""
    with open(TRAIN) as f:
        return next(i for i, text in enumerate(f, 1) if marker in text)


def has_classes(report):
    """The growth classifier's output is there (schema memstep.report/3)."""
    return "live_growth" in report["processes"][0]


class ProfiledTrainingTest(unittest.TestCase):
    EPOCHS, BATCHES, BATCH, HIDDEN = 3, 20, 128, 512

    def run_train(self, *extra, hooks=True, sample_interval=None, extra_env=None):
        out = common.temp_dir(self)
        argv = [sys.executable, TRAIN, "--epochs", str(self.EPOCHS), "--batches",
                str(self.BATCHES), "--batch", str(self.BATCH), "--hidden", str(self.HIDDEN)]
        r = common.run_profiled(argv + list(extra), out, hooks=hooks,
                                sample_interval=sample_interval, extra_env=extra_env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("RESULT steps=%d" % (self.EPOCHS * self.BATCHES), r.stdout)
        self.assertNotIn("memstep: warning", r.stderr)
        report = common.report_json(out)
        self.assertEqual(len(report["processes"]), 1)
        return report

    def replaced_leak_at(self, report, line):
        """The heap is LEAK and one LEAK site, a replaced buffer, is at
        train_mlp.py:`line`: that site."""
        self.assertEqual(report["processes"][0]["live_growth"]["class"], "LEAK")
        named = leak_sites_at(report, line)
        self.assertEqual(len(named), 1, [
            (s["class"], s["growth_bytes_per_step"], s["growth"]["reason"],
             [(f.get("file"), f.get("line")) for f in s["frames"] if f.get("line")][:2])
            for s in report["sites"] if s.get("class") in ("LEAK", "BOUNDED_GROWTH")])
        self.assertTrue(named[0]["growth"]["replaced"], named[0]["growth"])
        return named[0]

    def check_steps_and_stages(self, report):
        steps = steps_of(report)
        n = self.EPOCHS * self.BATCHES
        self.assertLessEqual(abs(len(steps) - n), 1, [s["step"] for s in steps])
        full = [s for s in steps
                if {"data", "forward", "backward", "optimizer"} <= set(s["stage_peaks"])]
        self.assertGreaterEqual(len(full), n - 1)
        if "epochs" in report:  # one epoch per pass over the DataLoader
            epochs = [e for e in report["epochs"] if e["pid"] == steps[0]["pid"]]
            self.assertEqual([e["epoch"] for e in epochs], list(range(self.EPOCHS)))
            self.assertEqual([e["steps"] for e in epochs], [self.BATCHES] * self.EPOCHS)
        if "stage_peaks" in report:
            stages = {p["stage"] for p in report["stage_peaks"]}
            self.assertLessEqual({"data", "forward", "backward", "optimizer"}, stages)
        return steps

    def test_no_leak(self):
        report = self.run_train("--optimizer", "adam")
        steps = self.check_steps_and_stages(report)
        # From the second epoch on: the exact heap includes Python's own objects
        # (pymalloc, docs/python.md), and the DataLoader's and tensors' Python
        # objects grow for the first ~15 steps (about 8.5 KiB/step, measured)
        # before they reach their steady state.
        live = [s["live_bytes_end"] for s in steps[self.BATCHES:]]
        # Flat: one-off frees may step it down, nothing accumulates (the script
        # keeps one float per step: ~40 bytes).
        diffs = sorted(b - a for a, b in zip(live, live[1:]))
        self.assertLess(abs(diffs[len(diffs) // 2]), 512, live)
        self.assertLess(live[-1] - min(live), 64 * 1024, live)
        if has_classes(report):
            # The process series holds Python objects that do grow a little
            # after warm-up (~0.2 KiB/step measured: the kept floats and the
            # DataLoader's Python state), so its verdict may be LEAK at that
            # scale; it must stay far below the planted leaks' (7 KiB/step and
            # more). No call site is a LEAK, but for the stated false-LEAK rate
            # (1e-3 per site the classifier tests; more than max_false_leaks
            # with probability <= 1e-4, docs/testing.md).
            growth = report["processes"][0]["live_growth"]
            if growth["class"] == "LEAK":
                self.assertLess(growth["bytes_per_step"], 2048, growth)
            tested = len(common.tested_sites(report))
            false_leaks = leak_sites(report) + common.leak_lines(report)
            self.assertLessEqual(len(false_leaks), common.max_false_leaks(tested),
                                 (tested, false_leaks))

    def test_classic_leak_loss_tensors(self):
        # loss tensors kept after backward(): their graph nodes stay (~7 KiB/step).
        report = self.run_train("--optimizer", "sgd", "--leak", "loss")
        steps = self.check_steps_and_stages(report)
        live = [s["live_bytes_end"] for s in steps[5:]]
        self.assertGreater(common.slope(live), 2048, live)
        grew = sum(1 for a, b in zip(live, live[1:]) if b > a)
        self.assertGreaterEqual(grew, 0.8 * (len(live) - 1), live)
        if has_classes(report):
            # The trend is found and measured; at ~7 KiB/step it is below the
            # classifier's LEAK threshold (16 KiB/step), so no class is asserted.
            live_growth = report["processes"][0]["live_growth"]
            self.assertLess(live_growth["p_value"], 0.01, live_growth)
            self.assertGreater(live_growth["bytes_per_step"], 2048, live_growth)

    def test_leak_features_bytes_per_step(self):
        # Hidden features kept with their graph: batch x hidden float32 per step.
        # T = 64 KiB samples each 256 KiB leaked block with p = 0.98, so the
        # call-site assertions below do not depend on a lucky draw (at the
        # default 512 KiB, p = 0.39, and one of nine runs here failed).
        # MEMSTEP_PROGRESSIVE=0 keeps T at 64 KiB all run (no warm-up or hunt
        # rates), so the site's sampled rate has an exact distribution (below).
        report = self.run_train("--optimizer", "mysgd", "--leak", "features",
                                sample_interval=65536, extra_env={"MEMSTEP_PROGRESSIVE": "0"})
        steps = self.check_steps_and_stages(report)
        truth = self.BATCH * self.HIDDEN * 4
        growth = common.slope([s["live_bytes_end"] for s in steps[5:]])
        self.assertLess(abs(growth - truth), 0.1 * truth, growth)
        if has_classes(report):
            live_growth = report["processes"][0]["live_growth"]
            self.assertEqual(live_growth["class"], "LEAK")
            self.assertLess(abs(live_growth["bytes_per_step"] - truth), 0.1 * truth, live_growth)
            # The leaking call site (sampled) is found, its rate right.
            leaks = leak_sites(report)
            self.assertNotEqual(leaks, [])
            site = max(leaks, key=lambda s: s["growth_bytes_per_step"])
            g = site["growth"]
            # The sampled rate (before any calibration) is the Horvitz-Thompson
            # rate of what the window's n = N - 1 cohorts kept: one block of s
            # = 256 KiB per step, sampled with p = 1 - exp(-(s+1)/T), weighing
            # s/p. With one T it is exactly k s / (p n), k ~ Binomial(n, p)
            # the sampled blocks (docs/analysis.md "Intervals of the
            # estimates"). Stated error rate 1e-6: k >= MinCovered(n, p, 1e-6)
            # (n = 59: k >= 50, the rate >= -13.7 %; at most +1.9 % when all are
            # sampled), and the rate is that multiple of s/p.
            sampled = g["sampled_bytes_per_step"] if g["calibrated"] else g["bytes_per_step"]
            n = g["window_steps"] - 1
            p = 1 - math.exp(-(truth + 1) / 65536.0)
            k = sampled * p * n / truth
            self.assertAlmostEqual(k, round(k), delta=1e-6 * n, msg=(sampled, n, g))
            self.assertGreaterEqual(round(k), common.min_covered(n, p, 1e-6), (sampled, n, g))
            self.assertLessEqual(round(k), n, (sampled, n, g))
            if g["calibrated"]:
                # Rescaled to its share of the exact heap growth (calibrate.h):
                # the exact counters' tolerance, as for the process above (the
                # graph's other kept objects).
                self.assertLess(abs(site["growth_bytes_per_step"] - truth), 0.1 * truth, g)

    def test_small_leak_named_at_its_line(self):
        # The case: 14 KiB/step kept in a Python list (seven 2 KiB
        # tensors), default settings. The exact heap proves the leak; the leak hunt samples it
        # densely enough that the site, and the Python line that keeps the
        # tensor, are named (docs/analysis.md "Leak hunt"). Seeded for replay.
        out = common.temp_dir(self)
        argv = [sys.executable, TRAIN, "--epochs", str(self.EPOCHS), "--batches",
                str(self.BATCHES), "--batch", str(self.BATCH), "--hidden", str(self.HIDDEN),
                "--optimizer", "adam", "--leak", "small"]
        r = common.run_profiled(argv, out, extra_env={"MEMSTEP_SEED": "7"})
        self.assertEqual(r.returncode, 0, r.stderr)
        line = the_line("LEAK_SMALL_LINE")
        check = os.environ.get("MEMSTEP_TEST_CHECK", "")
        self.assertTrue(check, "MEMSTEP_TEST_CHECK is not set")
        traces = glob.glob(os.path.join(out, "*.trace"))
        self.assertEqual(len(traces), 1, traces)
        dump = subprocess.run([check, traces[0], "--dump"], capture_output=True, text=True,
                              timeout=60).stdout
        hunts = [h for h in dump.splitlines() if h.startswith("HUNT ")]
        self.assertTrue(any(" phase=0 " in h for h in hunts), hunts)
        report = common.report_json(out)
        self.assertEqual(report["processes"][0]["live_growth"]["class"], "LEAK")
        # memstep's wrapper of optimizer.step and its import hook: not shown.
        self.assertEqual(common.own_frames(report), [])
        named = leak_sites_at(report, line)
        # The line makes several leaking allocations (the tensors' storage,
        # their C++ objects, their Python objects): one site each, at least
        # one of them named.
        self.assertGreaterEqual(len(named), 1, [
            (s["class"], s["growth_bytes_per_step"],
             [(f.get("file"), f.get("line")) for f in s["frames"] if f.get("line")][:2])
            for s in report["sites"] if s.get("class") in ("LEAK", "BOUNDED_GROWTH")])
        # The truth, from exact counters: the line keeps 7 x 2 KiB of storage
        # plus each tensor's objects (TensorImpl, StorageImpl, its Python
        # object: 427 B measured; allowed 512 B), and the loop itself grows
        # less than 2 KiB/step (test_no_leak). The exact heap's rate G is in
        # that range.
        lo_truth, hi_truth = 14336, 14336 + 7 * 512 + 2048
        exact = report["processes"][0]["live_growth"]["bytes_per_step"]
        self.assertGreaterEqual(exact, lo_truth)
        self.assertLessEqual(exact, hi_truth)
        rate = sum(s["growth_bytes_per_step"] for s in named)
        detail = [s["growth"] for s in named]
        if all(s["growth"]["calibrated"] for s in named):
            # Calibrated (calibrate.h): the LEAK sites' rates were rescaled to
            # sum to the exact growth G, each keeping its sampled share. The
            # named line holds G but for what other LEAK sites took, and those
            # are false LEAK sites, at most max_false_leaks (1e-4).
            others = [s for s in leak_sites(report)
                      if s not in named and s["growth"]["calibrated"]]
            self.assertAlmostEqual(rate + sum(s["growth_bytes_per_step"] for s in others), exact,
                                   delta=1e-6 * exact + 1, msg=detail)
            tested = len(common.tested_sites(report))
            self.assertLessEqual(len(others), common.max_false_leaks(tested), others)
        else:
            # Sampled rates: each named site's 95 % interval, widened to the
            # normal 99.99 % quantile (half-widths x 3.891 / 1.960: a false
            # failure in 1e-4 of runs, as the e2e example test does with
            # 99.9 %), summed, reaches the truth's range.
            z = 3.891 / 1.960
            lo = sum(s["growth_bytes_per_step"] - z * (s["growth_bytes_per_step"] - s["growth_ci"][0])
                     for s in named)
            hi = sum(s["growth_bytes_per_step"] + z * (s["growth_ci"][1] - s["growth_bytes_per_step"])
                     for s in named)
            self.assertLessEqual(lo, hi_truth, detail)
            self.assertGreaterEqual(hi, lo_truth, detail)

    def test_history_grown_by_concatenation_is_named(self):
        # `hist = torch.cat([hist, x])`, 32 KiB a step: each step's copy
        # replaces the last, so nothing old is kept and the site's cohorts
        # show no leak; its whole live series rises (docs/analysis.md "A
        # buffer that grows by replacement"). Default settings, seeded.
        report = self.run_train("--optimizer", "adam", "--leak", "history",
                                extra_env={"MEMSTEP_SEED": "7"})
        line = the_line("LEAK_HISTORY_LINE")
        process = report["processes"][0]
        site = self.replaced_leak_at(report, line)
        # The truth: the copy's storage grows 64 x 128 float32 = 32,768 B a
        # step (its usable size too: whole 16-byte units); its tensor objects
        # do not grow. The 95 % interval widened to 99.99 % (as above) holds
        # it. Calibrated, the LEAK sites sum to the exact heap's rate, and
        # the others are false LEAK sites, at most max_false_leaks.
        g = site["growth"]
        if g["calibrated"]:
            others = [s for s in leak_sites(report) if s is not site and s["growth"]["calibrated"]]
            self.assertAlmostEqual(
                g["bytes_per_step"] + sum(s["growth_bytes_per_step"] for s in others),
                process["live_growth"]["bytes_per_step"], delta=1, msg=g)
            tested = len(common.tested_sites(report))
            self.assertLessEqual(len(others), common.max_false_leaks(tested), others)
        z = 3.891 / 1.960
        lo = g["bytes_per_step"] - z * (g["bytes_per_step"] - g["ci"][0])
        hi = g["bytes_per_step"] + z * (g["ci"][1] - g["bytes_per_step"])
        self.assertLessEqual(lo, 32768, g)
        self.assertGreaterEqual(hi, 32768, g)
        self.assertEqual(process["unattributed_bytes_per_step"], 0, process)

    def test_log_string_grown_in_place_is_named(self):
        # A text log in a local string, 64 lines of per-sample losses a step
        # (`log += ...`, 896 characters): CPython resizes the string in
        # place, one block reallocated larger each step, so nothing old is
        # kept and the site's cohorts show no leak; the samples it holds at
        # each step end rise (docs/analysis.md "A buffer that grows by
        # replacement"). Named in 13 of 13 runs on Debian's torch and on the
        # pip torch (python_torch_log_pip). How often the string was sampled
        # depends on the hunt's T, and so on the machine's load: the rules
        # this needs are held to their failure rates by python_screen_rebuilt.
        # Default settings, seeded; the rate is the block's growth, 896 B a
        # step (glibc rounds each block to 16 B: 896 on average).
        report = self.run_train("--optimizer", "adam", "--leak", "log",
                                extra_env={"MEMSTEP_SEED": "3"})
        line = the_line("LEAK_LOG_LINE")
        process = report["processes"][0]
        g = self.replaced_leak_at(report, line)["growth"]
        raw = g["sampled_bytes_per_step"] if g["calibrated"] else g["bytes_per_step"]
        self.assertLess(abs(raw - 896), 90, g)
        self.assertEqual(process["unattributed_bytes_per_step"], 0, process)

    def test_leak_that_starts_mid_run_is_named(self):
        # `--leak small` from step 30 of 60 (a leak that begins after an
        # epoch, an evaluation, a schedule change): flat over the window's
        # first half, 14 KiB/step of data over its second. Over the whole
        # window the exact heap's interval reached 0 (NO_TREND) and the line
        # was BOUNDED_GROWTH, "not retained", or LEAK at the window's average,
        # half its rate (docs/analysis.md "A leak that started inside the
        # window"). Now both are LEAK at the second half's rate. Seeded.
        report = self.run_train("--optimizer", "adam", "--leak", "small", "--leak-from", "30",
                                extra_env={"MEMSTEP_SEED": "7"})
        line = the_line("LEAK_SMALL_LINE")
        process = report["processes"][0]
        g = process["live_growth"]
        self.assertEqual(g["class"], "LEAK", g)
        self.assertIn("inside the window", g["reason"], g)
        # The truth over the second half, as in test_small_leak_named_at_its_line:
        # 7 x 2 KiB of storage plus each tensor's objects (<= 512 B), and the
        # loop's own growth (< 2 KiB/step). The heap's 95 % interval widened to
        # 99.99 % (half-widths x 3.891 / 1.960) reaches that range.
        lo_truth, hi_truth = 14336, 14336 + 7 * 512 + 2048
        z = 3.891 / 1.960
        self.assertLessEqual(g["bytes_per_step"] - z * (g["bytes_per_step"] - g["ci"][0]),
                             hi_truth, g)
        self.assertGreaterEqual(g["bytes_per_step"] + z * (g["ci"][1] - g["bytes_per_step"]),
                                lo_truth, g)
        named = leak_sites_at(report, line)
        self.assertGreaterEqual(len(named), 1, [
            (s["class"], s["growth_bytes_per_step"], s["growth"]["reason"],
             [(f.get("file"), f.get("line")) for f in s["frames"] if f.get("line")][:2])
            for s in report["sites"] if s.get("class") in ("LEAK", "BOUNDED_GROWTH")])
        # The line's rate is the rate since the leak began, not the window's
        # average (half of it): the named sites' widened intervals, summed,
        # reach the truth's range.
        hi = sum(s["growth_bytes_per_step"] + z * (s["growth_ci"][1] - s["growth_bytes_per_step"])
                 for s in named)
        self.assertGreaterEqual(hi, lo_truth, [s["growth"] for s in named])
        self.assertTrue(any("inside the window" in s["growth"]["reason"] for s in named),
                        [s["growth"]["reason"] for s in named])

    def test_explicit_markers_win(self):
        report = self.run_train("--explicit")
        steps = steps_of(report)
        self.assertEqual([s["step"] for s in steps], list(range(self.EPOCHS * self.BATCHES)))
        full = [s for s in steps if {"forward", "backward", "optimizer"} <= set(s["stage_peaks"])]
        self.assertGreaterEqual(len(full), len(steps) - 1)

    def test_hooks_off(self):
        # (Time-window steps may still appear: no automatic stage does.)
        report = self.run_train(hooks=False)
        for s in steps_of(report):
            self.assertNotIn("forward", s["stage_peaks"])
            self.assertNotIn("optimizer", s["stage_peaks"])


if __name__ == "__main__":
    unittest.main()
