#!/usr/bin/env python3
"""Prometheus' own checker on what docs/monitoring.md documents.

  * The alerting rules are the YAML block under "## Alerting rules" of
    docs/monitoring.md, extracted here (so the page stays true):
    `promtool check rules` accepts them and finds every `- alert:` of the
    block, and `promtool test rules` runs them on synthetic series: a rank
    that leaks 2 MiB per step while stepping fires TrainingHostMemoryLeak
    (with the documented labels and summary), a rank whose steps stopped
    fires TrainingStalled and not the leak, a healthy rank fires nothing.
  * A real `memstep run --metrics-file` output (a planted job that leaks
    64 KiB per step and raises a growth alert) passes
    `promtool check metrics`, and every memstep_* metric the rules use is in
    it (a renamed metric would silently never fire).
promtool comes with Debian 12's `prometheus` package (scripts/install-deps.sh
installs it): the test FAILS, it does not skip, when promtool is absent.

usage: promtool_test.py MEMSTEP LIVE_PLANTED DOCS_DIR
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

MEMSTEP = PLANTED = DOCS = None


def rules_from_doc(path):
    with open(path) as f:
        text = f.read()
    section = text.split("\n## Alerting rules\n", 1)
    if len(section) != 2:
        raise AssertionError(f"{path}: no '## Alerting rules' section")
    m = re.search(r"```yaml\n(.*?)```", section[1], re.S)
    if m is None:
        raise AssertionError(f"{path}: no ```yaml block under '## Alerting rules'")
    return m.group(1)


# Synthetic series for `promtool test rules`: one sample a minute.
# host n1: leaks 2 MiB/step and steps 10 times a minute; n2: steps stopped
# (same growth figure, frozen); n3: healthy (64 KiB/step). Nodes n1 and n3
# have 1 GiB available: n1 fills it in 1 GiB / (2 MiB x 10/60 s) = 3072 s,
# under the rule's hour; n3 would take 27 h.
RULE_TESTS = """
rule_files:
  - rules.yml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'memstep_growth_bytes_per_step{host="n1",rank="3",pid="42"}'
        values: '2097152x40'
      - series: 'memstep_steps_completed_total{host="n1",rank="3",pid="42"}'
        values: '0+10x40'
      - series: 'memstep_process_running{host="n1",rank="3",pid="42"}'
        values: '1x40'
      - series: 'memstep_growth_bytes_per_step{host="n2",rank="0",pid="7"}'
        values: '2097152x40'
      - series: 'memstep_steps_completed_total{host="n2",rank="0",pid="7"}'
        values: '100x40'
      - series: 'memstep_process_running{host="n2",rank="0",pid="7"}'
        values: '1x40'
      - series: 'memstep_growth_bytes_per_step{host="n3",rank="1",pid="9"}'
        values: '65536x40'
      - series: 'memstep_steps_completed_total{host="n3",rank="1",pid="9"}'
        values: '0+10x40'
      - series: 'memstep_process_running{host="n3",rank="1",pid="9"}'
        values: '1x40'
      - series: 'node_memory_MemAvailable_bytes{host="n1",instance="n1:9100"}'
        values: '1073741824x40'
      - series: 'node_memory_MemAvailable_bytes{host="n3",instance="n3:9100"}'
        values: '1073741824x40'
      - series: 'memstep_alerts_total{host="n1",rank="3",pid="42",rule="growth"}'
        values: '0x20 1x20'
    alert_rule_test:
      - eval_time: 5m
        alertname: TrainingHostMemoryLeak
        exp_alerts: []
      - eval_time: 20m
        alertname: TrainingHostMemoryLeak
        exp_alerts:
          - exp_labels:
              severity: warning
              host: n1
              rank: "3"
              pid: "42"
            exp_annotations:
              summary: "rank 3 on n1 leaks 2MiB/step"
      - eval_time: 20m
        alertname: TrainingRunsOutOfHostMemory
        exp_alerts:
          - exp_labels:
              severity: critical
              host: n1
              rank: "3"
              pid: "42"
      - eval_time: 30m
        alertname: TrainingStalled
        exp_alerts:
          - exp_labels:
              host: n2
              rank: "0"
              pid: "7"
      - eval_time: 25m
        alertname: TrainingMemstepAlert
        exp_alerts:
          - exp_labels:
              severity: warning
              host: n1
              rank: "3"
              pid: "42"
              rule: growth
"""


class PromtoolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.promtool = shutil.which("promtool")
        if cls.promtool is None:
            raise AssertionError("promtool is not installed (Debian's `prometheus` package; "
                                 "scripts/install-deps.sh installs it)")
        cls.work = tempfile.mkdtemp(prefix="memstep-promtool-")
        cls.rules_text = rules_from_doc(os.path.join(DOCS, "monitoring.md"))
        cls.rules = os.path.join(cls.work, "rules.yml")
        with open(cls.rules, "w") as f:
            f.write(cls.rules_text)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def promtool_run(self, *args, stdin=None):
        return subprocess.run([self.promtool, *args], input=stdin, capture_output=True, text=True,
                              cwd=self.work, timeout=120)

    def test_1_check_rules(self):
        alerts = len(re.findall(r"^\s*- alert:", self.rules_text, re.M))
        self.assertGreaterEqual(alerts, 4)
        p = self.promtool_run("check", "rules", self.rules)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(f"SUCCESS: {alerts} rules found", p.stdout + p.stderr)

    def test_2_bad_rules_fail(self):
        # The check can fail: a rule with a broken expression is refused.
        bad = os.path.join(self.work, "bad.yml")
        with open(bad, "w") as f:
            f.write(self.rules_text.replace("> 1048576", "> > 1048576", 1))
        p = self.promtool_run("check", "rules", bad)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_3_rules_fire_on_synthetic_series(self):
        tests = os.path.join(self.work, "tests.yml")
        with open(tests, "w") as f:
            f.write(RULE_TESTS)
        p = self.promtool_run("test", "rules", tests)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCESS", p.stdout + p.stderr)

    def test_4_metrics_file_passes_check_metrics(self):
        metrics = os.path.join(self.work, "memstep.prom")
        stop = os.path.join(self.work, "stop")
        p = subprocess.run(
            [MEMSTEP, "run", "--out", os.path.join(self.work, "run"), "--flush-ms", "50",
             "--sample-interval", "16K", "--warmup", "3", "--alert-growth", "16K",
             "--metrics-file", metrics, "--", PLANTED, "20", "20", "65536", stop],
            capture_output=True, text=True, timeout=180)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(metrics) as f:
            text = f.read()
        self.assertRegex(text, r"memstep_steps_completed_total\{[^}]*\} 20\b")
        c = self.promtool_run("check", "metrics", stdin=text)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        self.assertEqual((c.stdout + c.stderr).strip(), "", "lint findings")
        # Every memstep metric the documented rules use is exported.
        used = set(re.findall(r"\bmemstep_[a-z_]+", self.rules_text))
        exported = set(re.findall(r"^# TYPE (memstep_[a-z_]+) ", text, re.M))
        self.assertTrue(used, "the rules use no memstep metric")
        self.assertEqual(used - exported, set(), f"exported: {sorted(exported)}")
        # The check can fail: a sample of an undeclared type is refused.
        broken = text.replace("# TYPE memstep_alerts_total counter",
                              "# TYPE memstep_alerts_total countr", 1)
        self.assertNotEqual(broken, text)
        c = self.promtool_run("check", "metrics", stdin=broken)
        self.assertNotEqual(c.returncode, 0, c.stdout + c.stderr)


if __name__ == "__main__":
    MEMSTEP, PLANTED, DOCS = sys.argv[1], sys.argv[2], sys.argv[3]
    unittest.main(argv=[sys.argv[0], "-v"])
