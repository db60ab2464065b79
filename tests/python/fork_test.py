"""os.fork() under memstep says what it says without memstep.

CPython 3.12 and 3.13 warn at os.fork() ("This process (pid=N) is
multi-threaded, use of fork() may lead to deadlocks in the child.", a
DeprecationWarning, shown by default when the caller is __main__) whenever the
kernel counts other threads in the process; memstep's writer and keeper are
such threads. python/startup/sitecustomize.py wraps os.fork and os.forkpty so
that the warning is left out when memstep's are the only other threads, and
given, attributed to the caller, when the program has threads of its own.

Checked, for each way of forking (from __main__, from a function of an
imported module, through pty.fork(), through a multiprocessing pool, under
`-W error::DeprecationWarning`), with and without a thread of the program's
own: the program's stdout, stderr (pids aside) and exit status under memstep
equal those of the bare run. On 3.12+ also: the bare run with a thread warns
from __main__ (so the comparison can fail), and without one nothing warns.
On 3.11 (CTest, Debian's python3) os.fork stays CPython's own function.
tests/python/cpython_versions.sh runs it with 3.12 and 3.13.
"""

import os
import re
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HELPER = textwrap.dedent("""\
    import os

    def fork_here():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    """)

PROGRAM = textwrap.dedent("""\
    import os, sys, threading
    import forkhelper

    def fork_in_main():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    def square(x):
        return x * x

    if __name__ == "__main__":
        how = sys.argv[1]
        done = threading.Event()
        if sys.argv[2] == "thread":
            threading.Thread(target=done.wait).start()
        if how == "main":
            fork_in_main()
        elif how == "module":
            forkhelper.fork_here()
        elif how == "pty":
            import pty
            pid, fd = pty.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        elif how == "pool":
            import multiprocessing
            with multiprocessing.get_context("fork").Pool(2) as pool:
                print(sum(pool.map(square, range(10))))
        done.set()
        print("forked", how, os.fork.__name__)
    """)


def normalized(text):
    lines = [l for l in text.splitlines() if not l.startswith("memstep:")]
    return re.sub(r"pid=\d+", "pid=N", "\n".join(lines))


class ForkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = __import__("tempfile").TemporaryDirectory(prefix="memstep-fork-")
        cls.script = os.path.join(cls.tmp.name, "forker.py")
        with open(cls.script, "w") as f:
            f.write(PROGRAM)
        with open(os.path.join(cls.tmp.name, "forkhelper.py"), "w") as f:
            f.write(HELPER)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_both(self, *args, flags=()):
        argv = [sys.executable] + list(flags) + [self.script] + list(args)
        env = common.clean_env()
        bare = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                              cwd=self.tmp.name)
        out = os.path.join(common.temp_dir(self), "run")
        profiled = subprocess.run([common.CLI, "run", "--out", out, "--"] + argv, env=env,
                                  capture_output=True, text=True, timeout=120, cwd=self.tmp.name)
        self.assertEqual(bare.returncode, 0, bare.stderr)
        self.assertEqual(profiled.returncode, bare.returncode, profiled.stderr)
        self.assertEqual(profiled.stdout, bare.stdout)
        self.assertEqual(normalized(profiled.stderr), normalized(bare.stderr), (args, flags))
        return bare, profiled

    def test_same_output_as_without_memstep(self):
        warns = sys.version_info[:2] >= (3, 12)
        for how in ("main", "module", "pty", "pool"):
            for thread in ("none", "thread"):
                with self.subTest(how=how, thread=thread):
                    bare, profiled = self.run_both(how, thread)
                    n = profiled.stderr.count("is multi-threaded, use of fork")
                    if how == "main" and thread == "thread" and warns:
                        self.assertEqual(n, 1, profiled.stderr)  # the program's own thread
                    elif how != "pool":
                        self.assertEqual(n, 0, profiled.stderr)
        # An error filter: CPython drops the warning it could not give.
        for thread in ("none", "thread"):
            self.run_both("main", thread, flags=("-W", "error::DeprecationWarning"))

    def test_fork_is_wrapped_only_where_cpython_warns(self):
        code = "import os, posix; print(os.fork is posix.fork)"
        out = os.path.join(common.temp_dir(self), "run")
        r = subprocess.run([common.CLI, "run", "--out", out, "--", sys.executable, "-c", code],
                           env=common.clean_env(), capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        wrapped = sys.version_info[:2] in ((3, 12), (3, 13))
        self.assertEqual(r.stdout.strip(), str(not wrapped), r.stderr)


if __name__ == "__main__":
    if not common.CLI:
        sys.stderr.write("MEMSTEP_TEST_CLI not set\n")
        sys.exit(common.MISSING)
    unittest.main()
