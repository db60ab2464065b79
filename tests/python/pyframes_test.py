"""Python frames in sampled stacks (preload/python/pyframes.cc, CPython 3.10
to 3.13).

A plain Python program (no torch) keeps 40 bytearrays of 2 MiB, each always
recorded (>= S_always), from a function at a known line; the report's site for
them must name that function, file and line, and its Python callers, in place
of the interpreter's native frames. MEMSTEP_PYTHON_FRAMES=0 turns it off.
CTest runs it with Debian's python3 (3.11); tests/python/cpython_versions.sh
with each version it checks.

UnsupportedTest runs programs that look like a CPython memstep must not read
(3.14, 3.9, a free-threaded 3.13, a 3.12 whose code objects have another
size; tests/python/fake_python.c): memstep says why once, on stderr and in
the trace, and the program's output and exit status are its own.
"""

import glob
import os
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SCRIPT = textwrap.dedent("""\
    import os
    kept = []

    def planted_py_leak(step):
        kept.append(bytearray(2 * 1024 * 1024 + step))

    def train(steps):
        for s in range(steps):
            planted_py_leak(s)

    train(40)
    os._exit(0)  # what is kept stays live at the end of the trace
    """)
LEAK_LINE, TRAIN_LINE, MODULE_LINE = 5, 9, 11

# A generator (its frame owned by the generator object from 3.11 on) run in a
# second Python thread.
GEN_SCRIPT = textwrap.dedent("""\
    import os, threading
    kept = []

    def planted_gen_leak(n):
        for i in range(n):
            yield bytearray(2 * 1024 * 1024 + i)

    def consume():
        for b in planted_gen_leak(20):
            kept.append(b)

    t = threading.Thread(target=consume)
    t.start()
    t.join()
    os._exit(0)
    """)
GEN_LINE, CONSUME_LINE = 6, 9  # the consumer is at its `for` (FOR_ITER resumes the generator)

# Functions made by exec and dropped at once: their code objects are freed and
# the next ones often take the same addresses (with the same bytecode, so the
# same offsets). Each keeps a 2 MiB bytearray (always recorded) from its one
# line; the frame must name that function, its file and its line, never a dead
# predecessor's (pyframes.cc caches frames by code address, with a check).
REUSE_SCRIPT = textwrap.dedent("""\
    import os
    kept = []
    for k in range(N):
        src = "\\n" * (k % 7) + "def gen_%d():\\n    return bytearray(%d)\\n" % (k, 2 << 20 | k)
        ns = {}
        exec(compile(src, "<gen-%d>" % k, "exec"), ns)
        kept.append(ns["gen_%d" % k]())
        del ns
    os._exit(0)
    """)
REUSE_FUNCTIONS = 120


class PythonFramesTest(unittest.TestCase):
    def run_script(self, extra_env=None, source=SCRIPT, planted="planted_py_leak"):
        self.assertIn(sys.version_info[:2], [(3, 10), (3, 11), (3, 12), (3, 13)],
                      "memstep reads the frames of CPython 3.10 to 3.13")
        d = common.temp_dir(self)
        script = os.path.join(d, "planted_leak.py")
        with open(script, "w") as f:
            f.write(source)
        out = os.path.join(d, "run")
        r = common.run_profiled([sys.executable, script], out, hooks=False, window=0,
                                extra_env=extra_env)
        self.assertEqual(r.returncode, 0, r.stderr)
        report = common.report_json(out)
        sites = [s for s in report["sites"]
                 if any(f["function"] == planted for f in s["frames"])]
        return script, report, sites

    def test_frames_name_the_planted_lines(self):
        script, report, sites = self.run_script()
        self.assertEqual(len(sites), 1, [s["frames"][:6] for s in report["sites"][:5]])
        site = sites[0]
        self.assertAlmostEqual(site["live_bytes_end"], 40 * 2 * 1024 * 1024 + 780, delta=4096)
        py = [(f["function"], f["file"], f["line"]) for f in site["frames"]
              if f["module"] == "<python>"]
        self.assertEqual(py, [("planted_py_leak", script, LEAK_LINE),
                              ("train", script, TRAIN_LINE),
                              ("<module>", script, MODULE_LINE)])
        # The Python frames replace the interpreter loop: none of its native
        # frames follow them.
        last_py = max(i for i, f in enumerate(site["frames"]) if f["module"] == "<python>")
        self.assertEqual(last_py, len(site["frames"]) - 1)

    def test_generator_in_a_thread(self):
        script, report, sites = self.run_script(source=GEN_SCRIPT, planted="planted_gen_leak")
        self.assertEqual(len(sites), 1, [s["frames"][:6] for s in report["sites"][:5]])
        py = [(f["function"], f["file"], f["line"]) for f in sites[0]["frames"]
              if f["module"] == "<python>"]
        # Then threading's own frames (Thread.run, _bootstrap_inner, _bootstrap).
        self.assertEqual(py[:2], [("planted_gen_leak", script, GEN_LINE),
                                  ("consume", script, CONSUME_LINE)])
        self.assertTrue(any(f[0].endswith("run") and f[1].endswith("threading.py")
                            for f in py[2:]), py)

    def test_functions_at_reused_addresses(self):
        source = REUSE_SCRIPT.replace("range(N)", "range(%d)" % REUSE_FUNCTIONS)
        _, report, _ = self.run_script(source=source)
        seen = {}
        for site in report["sites"]:
            for f in site["frames"]:
                if f["module"] == "<python>" and f["file"].startswith("<gen-"):
                    k = int(f["file"][len("<gen-"):-1])
                    if f["function"] == "<module>":
                        # The exec'd module's own line (its def): a sampled
                        # function object or the like, since pymalloc's
                        # blocks are all counted (arenas mapped before the
                        # install too).
                        self.assertEqual(f["line"], k % 7 + 1, f)
                        continue
                    self.assertEqual((f["function"], f["line"]), ("gen_%d" % k, k % 7 + 2), f)
                    seen[k] = site["live_bytes_end"]
        self.assertEqual(sorted(seen), list(range(REUSE_FUNCTIONS)))
        for k, live in seen.items():
            self.assertAlmostEqual(live, (2 << 20 | k), delta=4096, msg="gen_%d" % k)

    def test_off_switch(self):
        _, report, sites = self.run_script({"MEMSTEP_PYTHON_FRAMES": "0"})
        self.assertEqual(sites, [])
        self.assertFalse(any(f["module"] == "<python>"
                             for s in report["sites"] for f in s["frames"]))


class UnsupportedTest(unittest.TestCase):
    CASES = {
        "py314": "CPython 3.14 is not supported",
        "py39": "CPython 3.9 is not supported",
        "py313t": "CPython 3.13: it is a free-threaded build",
        "py312debug": "its code objects are not laid out as memstep expects",
    }

    def test_says_why_once_and_the_program_is_unharmed(self):
        for name, why in self.CASES.items():
            with self.subTest(name):
                exe = os.environ.get("MEMSTEP_TEST_FAKE_" + name, "")
                self.assertTrue(exe, "tests/python/CMakeLists.txt sets MEMSTEP_TEST_FAKE_*")
                plain = subprocess.run([exe], capture_output=True, text=True, timeout=60)
                self.assertEqual(plain.returncode, 0, plain.stderr)
                d = common.temp_dir(self)
                env = common.clean_env()
                env.update(LD_PRELOAD=common.LIB, MEMSTEP_DIR=d, MEMSTEP_SEED="1")
                r = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout, plain.stdout)
                said = [line for line in r.stderr.splitlines() if "Python frames not read" in line]
                self.assertEqual(len(said), 1, r.stderr)
                self.assertIn(why, said[0])
                self.assertIn("keep their native frames", said[0])
                check = os.environ.get("MEMSTEP_TEST_CHECK", "")
                self.assertTrue(check, "tests/python/CMakeLists.txt sets MEMSTEP_TEST_CHECK")
                traces = glob.glob(os.path.join(d, "*.trace"))
                self.assertEqual(len(traces), 1, traces)
                dump = subprocess.run([check, traces[0], "--dump"], capture_output=True,
                                      text=True, timeout=60)
                self.assertEqual(dump.returncode, 0, dump.stderr)
                notices = [line for line in dump.stdout.splitlines()
                           if line.startswith("NOTICE") and "Python frames not read" in line]
                self.assertEqual(len(notices), 1, notices)
                self.assertIn(why, notices[0])


if __name__ == "__main__":
    unittest.main()
