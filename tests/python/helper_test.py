"""Tests of the memstep Python helper and the start-up hook that need no torch."""

import os
import subprocess
import sys
import textwrap
import unittest

import common


def run_python(code, env, cwd=None):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


class HelperWithoutProfilerTest(unittest.TestCase):
    """Every function is a no-op when libmemstep.so is not loaded."""

    def setUp(self):
        sys.path.insert(0, common.PYDIR)
        self.addCleanup(sys.path.remove, common.PYDIR)
        import memstep
        self.memstep = memstep

    def test_no_ops(self):
        m = self.memstep
        self.assertFalse(m.enabled())
        self.assertIsNone(m.step(3))
        self.assertIsNone(m.step())
        self.assertIsNone(m.step_end())
        self.assertIsNone(m.epoch(1))
        self.assertIsNone(m.counter("x", 5))
        self.assertIsNone(m.torch_cuda_counters())
        with m.stage("forward") as s:
            self.assertEqual(s.name, "forward")

    def test_stage_passes_results_and_exceptions(self):
        m = self.memstep

        @m.stage("forward")
        def f(a, b=1):
            return a + b

        self.assertEqual(f(2, b=3), 5)
        self.assertEqual(f.__name__, "f")
        with self.assertRaises(KeyError):
            with m.stage("data"):
                raise KeyError("k")


class HelperWithProfilerTest(unittest.TestCase):
    """The helper's markers reach the trace (memstep report --format json)."""

    def test_markers_recorded(self):
        out = common.temp_dir(self)
        code = """
            import memstep
            assert memstep.enabled()
            keep = []
            memstep.epoch(0)
            for i in range(5):
                memstep.step(i)
                with memstep.stage("forward"):
                    keep.append(bytearray(256 * 1024))
                memstep.counter("i", i)
            memstep.step_end(4)
            print("ok")
        """
        env = common.clean_env()
        env["PYTHONPATH"] = common.PYDIR
        env["LD_PRELOAD"] = common.LIB
        env["MEMSTEP_DIR"] = out
        r = run_python(code, env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ok", r.stdout)
        report = common.report_json(out)
        steps = [s for s in report["steps"] if s["step"] < 5]
        self.assertEqual([s["step"] for s in steps], list(range(5)))
        for s in steps:
            self.assertIn("forward", s["stage_peaks"])
        live = [s["live_bytes_end"] for s in steps]
        for a, b in zip(live, live[1:]):
            self.assertGreaterEqual(b - a, 256 * 1024)


class StartupHookTest(unittest.TestCase):
    """python/startup/sitecustomize.py: off unless asked, cheap, chains."""

    PROBE = """
        import sys
        finders = [type(f).__name__ for f in sys.meta_path]
        print("finder=%d" % ("_TorchFinder" in finders))
        print("heavy=%s" % sorted(m for m in ("torch", "ctypes", "memstep", "numpy")
                                   if m in sys.modules))
        print("chained=%s" % getattr(__import__("builtins"), "_memstep_test_chained", 0))
    """

    def probe(self, env):
        r = run_python(self.PROBE, env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        return r.stdout

    def test_off_without_env(self):
        self.assertIn("finder=0", self.probe(common.hook_env(hooks=False)))
        env = common.hook_env(hooks=True)
        env["MEMSTEP_PYTHON_HOOKS"] = "0"
        self.assertIn("finder=0", self.probe(env))

    def test_on_installs_only_a_finder(self):
        out = self.probe(common.hook_env(hooks=True))
        self.assertIn("finder=1", out)
        self.assertIn("heavy=[]", out)

    def test_chains_to_next_sitecustomize(self):
        other = common.temp_dir(self)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("import builtins\nbuiltins._memstep_test_chained = 1\n")
        for hooks in (True, False):
            out = self.probe(common.hook_env(hooks=hooks, extra_path=[other]))
            self.assertIn("chained=1", out)

    def test_failing_next_sitecustomize_reported_like_site(self):
        other = common.temp_dir(self)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("raise RuntimeError('boom')\n")
        r = run_python("print('ran')", common.hook_env(extra_path=[other]))
        self.assertEqual(r.returncode, 0)
        self.assertIn("ran", r.stdout)
        self.assertIn("RuntimeError: boom", r.stderr)


if __name__ == "__main__":
    unittest.main()
