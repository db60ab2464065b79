#!/usr/bin/env python3
"""`memstep top` and `memstep run --metrics-file` on a real job.

A planted program (live_planted.cc) steps every 150 ms and leaks 64 KiB per
step from LivePlantedLeakSite(); `memstep run` runs it with --metrics-file.
While it runs:
  * the metrics file parses with prometheus_client's own parser (installed
    by this test with pip into a temporary directory: the test fails if it
    cannot) and with the strict grammar check below, and its step advances;
  * `memstep top` runs in a real terminal (a tmux pane): the frame's step
    advances and the planted site shows; `q` (and, in a second pane, Ctrl-C)
    ends it, and the terminal is restored (main screen, cursor, the same
    `stty -a` as before); Ctrl-Z in an interactive shell gives the screen back
    until `fg`;
  * `memstep top --once` prints one frame; a bad directory exits 1.
After the job ends: the metrics file says so, top says the run ended.
An unwritable --metrics-file is one warning and the job runs on.

usage: live_test.py MEMSTEP LIVE_PLANTED
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

MEMSTEP = PLANTED = None
DEADLINE = 90  # seconds to wait for a condition of a job that steps every 150 ms


def wait_for(what, fn, timeout=DEADLINE):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# The exposition format 0.0.4, strictly (what node_exporter's textfile
# collector accepts): HELP, TYPE, then the samples of that family.
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"({NAME})(?:\{{(?:{LABEL}(?:,{LABEL})*)?\}})? "
                    r"(-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?|NaN|[+-]Inf)")


def check_grammar(test, text):
    test.assertTrue(text.endswith("\n"))
    family = None
    seen = set()
    for line in text[:-1].split("\n"):
        m = re.fullmatch(rf"# HELP ({NAME}) .*", line)
        if m:
            test.assertNotIn(m.group(1), seen, line)
            seen.add(m.group(1))
            help_of = m.group(1)
            continue
        m = re.fullmatch(rf"# TYPE ({NAME}) (counter|gauge)", line)
        if m:
            test.assertEqual(m.group(1), help_of, line)
            family = m.group(1)
            continue
        m = SAMPLE.fullmatch(line)
        test.assertIsNotNone(m, f"not exposition format: {line!r}")
        test.assertEqual(m.group(1), family, line)
    return seen


class LiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="memstep-live-")
        py = os.path.join(cls.work, "py")
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", py,
                              "prometheus_client"], capture_output=True, text=True)
        if pip.returncode != 0:
            raise AssertionError(f"pip install prometheus_client failed: {pip.stderr}")
        sys.path.insert(0, py)
        if shutil.which("tmux") is None:
            raise AssertionError("tmux is not installed (scripts/install-deps.sh installs it)")
        cls.run_dir = os.path.join(cls.work, "run")
        cls.metrics = os.path.join(cls.work, "metrics", "memstep.prom")
        os.makedirs(os.path.dirname(cls.metrics))
        cls.stop = os.path.join(cls.work, "stop")
        cls.job = subprocess.Popen(
            [MEMSTEP, "run", "--out", cls.run_dir, "--flush-ms", "100", "--sample-interval",
             "16K", "--warmup", "3", "--alert-growth", "16K", "--metrics-file", cls.metrics, "--",
             PLANTED, "0", "150", "65536", cls.stop],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cls.sock = f"memstep-live-{os.getpid()}"

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["tmux", "-L", cls.sock, "kill-server"], capture_output=True)
        if cls.job.poll() is None:
            open(cls.stop, "w").close()
            try:
                cls.job.wait(timeout=30)
            except subprocess.TimeoutExpired:
                cls.job.kill()
                cls.job.wait()
        shutil.rmtree(cls.work, ignore_errors=True)

    # ---- helpers

    def metrics_families(self):
        from prometheus_client.parser import text_string_to_metric_families
        with open(self.metrics) as f:
            text = f.read()
        check_grammar(self, text)
        return {f.name: f for f in text_string_to_metric_families(text)}, text

    def metric(self, name, **labels):
        fams, _ = self.metrics_families()
        for fam in fams.values():
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return None

    def tmux(self, *args):
        p = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, f"tmux {args}: {p.stderr}")
        return p.stdout

    def capture(self, target):
        return self.tmux("capture-pane", "-p", "-t", target)

    def step_on_screen(self, target):
        m = re.search(r"pid \d+ e2e_live_\S*\s+running\s+(\d+)", self.capture(target))
        return int(m.group(1)) if m else None

    def top_in_tmux(self, session):
        before = os.path.join(self.work, f"{session}.stty.before")
        after = os.path.join(self.work, f"{session}.stty.after")
        # The shell survives the Ctrl-C sent to the pane's foreground group.
        script = (f"trap : INT; stty -a > {before}; {MEMSTEP} top --interval 0.3 {self.run_dir}; "
                  f"echo TOP-EXITED rc=$?; stty -a > {after}; sleep 600")
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "180", "-y", "45",
                  "sh", "-c", script)
        return before, after

    def check_restored(self, session, before, after):
        wait_for("top to exit", lambda: "TOP-EXITED rc=0" in self.capture(session))
        wait_for("stty after top", lambda: os.path.exists(after) and os.path.getsize(after) > 0)
        # The modes, without the size (test 3 resizes the window).
        def modes(path):
            with open(path) as f:
                return re.sub(r"rows \d+; columns \d+;", "", f.read())
        self.assertRegex(modes(before), r"(?<!-)\bicanon\b")
        self.assertEqual(modes(before), modes(after), "terminal modes not restored")
        self.assertEqual(self.tmux("display", "-p", "-t", session, "#{alternate_on}").strip(), "0")
        self.assertEqual(self.tmux("display", "-p", "-t", session, "#{cursor_flag}").strip(), "1")

    # ---- while the job runs

    def test_1_metrics_file_follows_the_steps(self):
        wait_for("metrics with a step", lambda: os.path.exists(self.metrics) and
                 (self.metric("memstep_step") or 0) >= 3)
        fams, text = self.metrics_families()
        for name in ("memstep_step", "memstep_host_live_bytes", "memstep_device_live_bytes",
                     "memstep_growth_bytes_per_step", "memstep_stage_peak_bytes",
                     "memstep_alerts", "memstep_steps_completed", "memstep_process_running"):
            self.assertIn(name, fams, text)
        self.assertEqual(self.metric("memstep_process_running"), 1)
        self.assertGreater(self.metric("memstep_stage_peak_bytes", stage="forward"), 0)
        self.assertGreater(self.metric("memstep_stage_peak_bytes", stage="backward"), 0)
        first = self.metric("memstep_step")
        wait_for("the step to advance in the metrics file",
                 lambda: self.metric("memstep_step") > first)
        # The planted leak: 4 blocks of 16 KiB per step, counted exactly by their usable
        # sizes (16 KiB + 8 B each with glibc), plus the vector that keeps them.
        wait_for("growth of 64 KiB/step", lambda: 65536 <= self.metric(
            "memstep_growth_bytes_per_step") <= 66 * 1024, timeout=60)
        wait_for("a growth alert", lambda: (self.metric("memstep_alerts_total", rule="growth")
                                            or 0) >= 1)

    def test_2_top_in_a_terminal_quits_on_q(self):
        before, after = self.top_in_tmux("topq")
        first = wait_for("a step on screen", lambda: self.step_on_screen("topq"))
        self.assertEqual(self.tmux("display", "-p", "-t", "topq", "#{alternate_on}").strip(), "1")
        self.assertEqual(self.tmux("display", "-p", "-t", "topq", "#{cursor_flag}").strip(), "0")
        wait_for("the step to advance on screen",
                 lambda: (self.step_on_screen("topq") or 0) > first)
        screen = wait_for("the planted site on screen", lambda: (
            lambda s: s if "LivePlantedLeakSite" in s else None)(self.capture("topq")))
        self.assertIn("GROWING SITES", screen)
        self.assertIn("STAGE PEAKS", screen)
        self.assertIn("forward", screen)
        self.tmux("send-keys", "-t", "topq", "q")
        self.check_restored("topq", before, after)

    def test_3_top_in_a_terminal_quits_on_ctrl_c(self):
        before, after = self.top_in_tmux("topc")
        wait_for("a step on screen", lambda: self.step_on_screen("topc"))
        self.tmux("resize-window", "-t", "topc", "-x", "100", "-y", "30")  # SIGWINCH
        wait_for("a redraw at 100 columns", lambda: self.step_on_screen("topc"))
        self.tmux("send-keys", "-t", "topc", "C-c")
        self.check_restored("topc", before, after)

    def test_4_once_prints_one_frame(self):
        p = subprocess.run([MEMSTEP, "top", "--once", self.run_dir], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("running: 1 of 1 process", p.stdout)
        self.assertRegex(p.stdout, r"pid \d+ e2e_live_\S*\s+running\s+\d+")
        self.assertNotIn("\x1b", p.stdout)
        p = subprocess.run([MEMSTEP, "top", "--once", os.path.join(self.work, "nope")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("memstep: error:", p.stderr)
        self.assertIn("No such file or directory", p.stderr)
        empty = os.path.join(self.work, "empty")
        os.makedirs(empty, exist_ok=True)
        p = subprocess.run([MEMSTEP, "top", "--once", empty], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no memstep traces", p.stderr)
        p = subprocess.run([MEMSTEP, "top", "--interval", "0", self.run_dir],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("--interval", p.stderr)

    def test_5_plain_frames_on_a_pipe_until_sigint(self):
        p = subprocess.Popen([MEMSTEP, "top", "--interval", "0.2", self.run_dir],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        frames = 0
        for line in p.stdout:
            if line.startswith("memstep top"):
                frames += 1
                if frames == 3:
                    break
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(frames, 3)
        self.assertNotIn("\x1b", out)

    # ---- after the job

    def test_6_after_the_end(self):
        open(self.stop, "w").close()
        out, err = self.job.communicate(timeout=60)
        self.assertEqual(self.job.returncode, 0, err)
        self.assertIn("live_planted: done", out)
        self.assertNotIn("warning", err)
        self.assertEqual(self.metric("memstep_process_running"), 0)
        step = self.metric("memstep_step")
        self.assertEqual(self.metric("memstep_steps_completed_total"), step + 1)
        p = subprocess.run([MEMSTEP, "top", "--once", self.run_dir], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("RUN ENDED", p.stdout)
        self.assertRegex(p.stdout, rf"pid \d+ e2e_live_\S*\s+exited\s+{int(step)}\b")
        # On a pipe, top prints the final frame and exits by itself.
        p = subprocess.run([MEMSTEP, "top", self.run_dir], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("RUN ENDED", p.stdout)
        # In a terminal it shows the final state until q.
        self.top_in_tmux("topend")
        wait_for("RUN ENDED on screen", lambda: "RUN ENDED" in self.capture("topend"))
        self.tmux("send-keys", "-t", "topend", "q")
        wait_for("top to exit", lambda: "TOP-EXITED rc=0" in self.capture("topend"))

    def test_8_ctrl_z_gives_the_terminal_back_until_fg(self):
        # An interactive shell in the pane, for job control.
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "topz", "-x", "150", "-y", "40",
                  "bash", "--norc", "--noprofile", "-i")
        self.tmux("send-keys", "-t", "topz", f"{MEMSTEP} top --interval 0.3 {self.run_dir}",
                  "Enter")
        alt = lambda: self.tmux("display", "-p", "-t", "topz", "#{alternate_on}").strip()
        wait_for("top on the alternate screen", lambda: alt() == "1" and
                 "memstep top" in self.capture("topz"))
        self.tmux("send-keys", "-t", "topz", "C-z")
        wait_for("the shell back after Ctrl-Z", lambda: "Stopped" in self.capture("topz"))
        # The screen and the cursor are top's to give back (the modes: bash
        # restores its own when a job stops, so they prove nothing here).
        self.assertEqual(alt(), "0")
        self.assertEqual(self.tmux("display", "-p", "-t", "topz", "#{cursor_flag}").strip(), "1")
        self.tmux("send-keys", "-t", "topz", "fg", "Enter")
        wait_for("top again after fg", lambda: alt() == "1" and
                 "memstep top" in self.capture("topz"))
        self.tmux("send-keys", "-t", "topz", "q")
        wait_for("top to exit", lambda: alt() == "0")

    def test_7_unwritable_metrics_file_is_one_warning(self):
        stop = os.path.join(self.work, "stop7")
        p = subprocess.run(
            [MEMSTEP, "run", "--out", os.path.join(self.work, "run7"), "--flush-ms", "50",
             "--metrics-file", "/proc/memstep-no-such-dir/m.prom", "--", PLANTED, "6", "50",
             "4096", stop], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("live_planted: done", p.stdout)
        self.assertEqual(p.stderr.count("memstep: warning: --metrics-file"), 1, p.stderr)


if __name__ == "__main__":
    MEMSTEP, PLANTED = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
