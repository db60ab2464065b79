"""Shared helpers of memstep's Python tests (run by ctest with /usr/bin/python3).

Environment (set by tests/python/CMakeLists.txt):
  MEMSTEP_TEST_PYDIR  the build-tree copy of python/ (<build>/python)
  MEMSTEP_TEST_LIB    libmemstep.so
  MEMSTEP_TEST_CLI    the memstep executable
  MEMSTEP_TEST_CHECK  memstep_trace_check (tests/preload), for trace dumps
A test whose dependency is missing FAILS (exit 1): scripts/install-deps.sh installs
Debian's python3 (3.11) and python3-torch, so a missing one is a broken machine.
"""

import glob
import json
import os
import subprocess
import sys
import tempfile

MISSING = 1
HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.environ.get("MEMSTEP_TEST_PYDIR", os.path.join(HERE, "..", "..", "python"))
LIB = os.environ.get("MEMSTEP_TEST_LIB", "")
CLI = os.environ.get("MEMSTEP_TEST_CLI", "")


def require_torch():
    """Fails the test (exit 1) when PyTorch cannot be imported."""
    r = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if r.returncode != 0:
        sys.stderr.write("FAIL: torch is not importable by %s (scripts/install-deps.sh installs "
                         "python3-torch)\n%s\n" % (sys.executable, r.stderr.decode()[-2000:]))
        sys.exit(MISSING)


def clean_env():
    """The test's environment without anything memstep or Python-path related,
    but MEMSTEP_SEED=1: a test that preloads the library draws its samples
    from a fixed seed, never from the clock (docs/testing.md)."""
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("MEMSTEP_") or key in ("LD_PRELOAD", "PYTHONPATH", "PYTHONSTARTUP"):
            del env[key]
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["MEMSTEP_SEED"] = "1"
    return env


def hook_env(hooks=True, extra_path=()):
    """The environment `memstep run` gives a Python command, without the preload."""
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(PYDIR, "startup"), PYDIR] + list(extra_path))
    env["MEMSTEP_PYTHON_DIR"] = os.path.realpath(PYDIR)  # recorded in the trace, as `memstep run` does
    if hooks:
        env["MEMSTEP_PYTHON_HOOKS"] = "1"
    return env


def cli_has_python_hooks():
    if not CLI:
        return False
    r = subprocess.run([CLI, "run", "--help"], capture_output=True, text=True)
    return "--no-python-hooks" in (r.stdout + r.stderr)


def run_profiled(argv, out_dir, hooks=True, timeout=120, sample_interval=None, window=None,
                 extra_env=None):
    """Runs `argv` under libmemstep.so as `memstep run` does; returns the
    CompletedProcess. Uses `memstep run` itself once it sets up Python.
    window=0: no time-window steps, even when torch is slow to import.
    extra_env: more variables for the command (e.g. MEMSTEP_PYTHON_FRAMES)."""
    if cli_has_python_hooks():
        cmd = [CLI, "run", "--out", out_dir]
        if not hooks:
            cmd.append("--no-python-hooks")
        if sample_interval is not None:
            cmd += ["--sample-interval", str(sample_interval)]
        if window is not None:
            cmd += ["--window", str(window)]
        cmd += ["--"] + list(argv)
        env = clean_env()
    else:
        cmd = list(argv)
        env = hook_env(hooks)
        env["LD_PRELOAD"] = LIB
        env["MEMSTEP_DIR"] = out_dir
        env["NVTX_INJECTION64_PATH"] = LIB
        if sample_interval is not None:
            env["MEMSTEP_SAMPLE_INTERVAL"] = str(sample_interval)
        if window is not None:
            env["MEMSTEP_WINDOW"] = str(window)
    env["MEMSTEP_SEED"] = "1"  # samples from a fixed seed, never from the clock
    env.update(extra_env or {})
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def trace_markers(test, run_dir, counters="torch.cuda"):
    """The STEP, STAGE and EPOCH lines of `memstep_trace_check --dump` of the
    one trace in run_dir, and its COUNTER lines whose name starts with
    `counters`, in trace order. The rest is left out: peak-composition
    snapshots and alerts come wherever sampling puts them, and the periodic
    counters (rss_bytes, mallinfo2.*) wherever the writer thread does."""
    check = os.environ.get("MEMSTEP_TEST_CHECK", "")
    test.assertTrue(check, "MEMSTEP_TEST_CHECK is not set (tests/python/CMakeLists.txt sets it)")
    traces = glob.glob(os.path.join(run_dir, "*.trace"))
    test.assertEqual(len(traces), 1, traces)
    r = subprocess.run([check, traces[0], "--dump"], capture_output=True, text=True, timeout=60)
    test.assertEqual(r.returncode, 0, r.stderr)
    return [line for line in r.stdout.splitlines()
            if line.split(" ", 1)[0] in ("STEP", "STAGE", "EPOCH")
            or line.startswith("COUNTER " + counters)]


def report_json(run_dir):
    r = subprocess.run([CLI, "report", run_dir, "--format", "json", "--no-symbolize"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("memstep report failed (%d): %s" % (r.returncode, r.stderr))
    return json.loads(r.stdout)


def own_frames(report):
    """The Python frames of memstep's own code (files under PYDIR, as given or
    resolved) anywhere in a JSON report: sites, lines, stage peaks. The
    report leaves them out (docs/analysis.md "Stacks"), so a test asserts
    this is empty."""
    dirs = tuple({os.path.abspath(PYDIR) + os.sep, os.path.realpath(PYDIR) + os.sep})
    found = []

    def walk(o):
        if isinstance(o, dict):
            if o.get("module") == "<python>" and o.get("file", "").startswith(dirs):
                found.append((o.get("function"), o.get("file"), o.get("line")))
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(report)
    return found


def dense_series(series):
    """A per-step series of the JSON report (schema memstep.report/3), e.g. a
    site's live_bytes_by_step {"rows": N, "changes": [[row, value], ...]}, as
    one value per row: each value holds from its row to the next change, the
    rows before the first change are 0."""
    out = [0.0] * series["rows"]
    changes = series["changes"]
    for i, (row, value) in enumerate(changes):
        end = changes[i + 1][0] if i + 1 < len(changes) else series["rows"]
        out[row:end] = [value] * (end - row)
    return out


def slope(values):
    """Least-squares slope of values against their index."""
    n = len(values)
    mx = (n - 1) / 2.0
    my = sum(values) / float(n)
    num = sum((i - mx) * (v - my) for i, v in enumerate(values))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den


def run_step_script(test, text, name, steps, extra_env=None):
    """Writes `text` into a temporary file NAME and runs it with the argument
    STEPS under memstep, its steps its own (memstep.step: no Python hooks, no
    time windows). Returns (its process in the JSON report, the report, the
    script's path); fails the test unless one process marked steps."""
    d = temp_dir(test)
    script = os.path.join(d, name)
    with open(script, "w") as f:
        f.write(text)
    out = os.path.join(d, "run")
    r = run_profiled([sys.executable, script, str(steps)], out, hooks=False, window=0,
                     extra_env=extra_env)
    test.assertEqual(r.returncode, 0, r.stderr)
    report = report_json(out)
    procs = [p for p in report["processes"] if p["last_step"] >= 0]
    test.assertEqual(len(procs), 1, [p["cmdline"] for p in report["processes"]])
    return procs[0], report, script


def temp_dir(test):
    d = tempfile.TemporaryDirectory(prefix="memstep-pytest-")
    test.addCleanup(d.cleanup)
    return d.name


# ---- Acceptance bounds from a stated error rate (tests/coverage_bound.h, docs/testing.md) ----

def _binom_log_pmf(k, x, p):
    import math
    return (math.lgamma(k + 1.0) - math.lgamma(x + 1.0) - math.lgamma(k - x + 1.0)
            + x * math.log(p) + (k - x) * math.log1p(-p))


def min_covered(k, q=0.95, false_failure=1e-3):
    """The largest c with P(Binomial(k, q) < c) <= false_failure (MinCovered)."""
    import math
    cdf, c = 0.0, 0
    for x in range(k + 1):
        pmf = math.exp(_binom_log_pmf(k, x, q)) if 0 < q < 1 else float(x == (k if q >= 1 else 0))
        if cdf + pmf > false_failure:
            break
        cdf += pmf
        c = x + 1
    return c


def max_successes(n, p, false_failure):
    """The smallest c with P(Binomial(n, p) > c) <= false_failure (MaxSuccesses)."""
    return n - min_covered(n, 1 - p, false_failure)


# The stated false-LEAK rate of the growth classifier: a call site whose
# series does not grow is classified LEAK with probability at most this, per
# site the classifier tested (docs/testing.md "False LEAK sites").
FALSE_LEAK_RATE = 1e-3


def tested_sites(report):
    """Sites the growth classifier could have called LEAK: enough steps after
    warm-up, a long-lived series that reached the growth bound, and at least
    the 10 sampled allocations from the window that a LEAK needs
    (docs/analysis.md "Classes"). The others are NO_TREND or INSUFFICIENT
    whatever their samples, so they cannot be a false LEAK."""
    out = []
    for s in report["sites"]:
        g = s.get("growth", {})
        samples = g.get("window_samples")
        if s.get("class") in (None, "INSUFFICIENT") or \
                g.get("reason") == "never above the window growth threshold":
            continue
        # Fewer than 10 samples can still be enough when they are worth 10
        # (blocks recorded with p = 1: null, without bound) and were born in
        # at least 3 steps.
        worth = g.get("window_effective_samples")
        enough_worth = (worth is None or worth >= 10) and g.get("window_sample_steps", 0) >= 3
        if samples is not None and samples == samples and samples < 10 and not enough_worth:
            continue
        out.append(s)
    return out


def leak_lines(report):
    """The LEAK Python lines of every process (docs/analysis.md "Python
    lines"), each with its process's pid: a false one counts as a false LEAK
    site would."""
    return [dict(line, pid=p["pid"]) for p in report["processes"]
            for line in p.get("python_lines", []) if line["class"] == "LEAK"]


def assert_leak_free(test, seeded_reports):
    """Leak-free runs, as (seed, report): their LEAK lines and sites, at most
    max_false_leaks of what they tested: each tested site, and once more for
    the line it may be part of (only growing lines are listed: an upper
    bound)."""
    found, tested = [], 0
    for seed, report in seeded_reports:
        found += [(seed, "line", line["frames"][:2]) for line in leak_lines(report)]
        found += [(seed, "site", s["frames"][:6]) for s in report["sites"]
                  if s["class"] == "LEAK"]
        tested += 2 * len(tested_sites(report))
    test.assertLessEqual(len(found), max_false_leaks(max(tested, 1)), found)


def max_false_leaks(tested, false_failure=1e-4):
    """How many false LEAK sites `tested` tested sites may show: more happens
    with probability <= false_failure at the stated FALSE_LEAK_RATE."""
    return max_successes(tested, FALSE_LEAK_RATE, false_failure)
