#!/usr/bin/env python3
"""`memstep report --format perfetto|pprof|folded|csv` through the CLI, checked
by code independent of memstep's writers:

  * pprof: Python's gzip module and a protobuf wire-format decoder written
    here from the encoding's specification decode the file; the samples of
    a call site (one per step and stage of allocation for host sites) must
    sum to the JSON report's numbers for it, the planted leak must carry its
    step and stage labels, and every id a sample, location or line refers
    to must exist.
  * perfetto: the file parses as JSON (the json module), every event is one
    of the phases the writer promises, slices of a thread nest, the counter
    tracks and instant events the trace plants are there.
  * -o FILE writes the same bytes as stdout; bad --format / --view values are
    usage errors (exit 1, nothing written).

  * the pprof tool itself (`go tool pprof`, Debian's golang-go) reads the
    profile: totals per sample type and tag filters on stage, step, class.
  * `memstep report --help` and docs/cli.md agree on the options and formats.

usage: export_cli_test.py MEMSTEP EXPORT_TRACE_WRITER SOURCE_DIR
"""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

MEMSTEP = TRACE_WRITER = SOURCE_DIR = None


def run(*args, check=True):
    p = subprocess.run([MEMSTEP, "report", *args], capture_output=True)
    if check and p.returncode != 0:
        raise AssertionError(f"memstep report {args}: exit {p.returncode}: {p.stderr.decode()}")
    return p


# --- protobuf wire format ----------------------------------------------------

def varint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def fields(buf):
    """[(field number, wire type, value)]: ints for type 0, bytes for type 2."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 2:
            n, pos = varint(buf, pos)
            value = buf[pos:pos + n]
            if len(value) != n:
                raise ValueError("length past the end")
            pos += n
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def packed(value, wire):
    if wire == 0:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        v, pos = varint(value, pos)
        out.append(v)
    return out


def signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_profile(data):
    """profile.proto (github.com/google/pprof proto/profile.proto) -> dict."""
    p = {"sample_type": [], "sample": [], "mapping": {}, "location": {}, "function": {},
         "string_table": [], "scalars": {}}
    for number, wire, value in fields(data):
        if number == 1:
            vt = dict((n, v) for n, _, v in fields(value))
            p["sample_type"].append((vt.get(1, 0), vt.get(2, 0)))
        elif number == 2:
            s = {"location_id": [], "value": [], "label": []}
            for n, w, v in fields(value):
                if n == 1:
                    s["location_id"] += packed(v, w)
                elif n == 2:
                    s["value"] += [signed(x) for x in packed(v, w)]
                elif n == 3:
                    lab = dict((k, x) for k, _, x in fields(v))
                    s["label"].append(lab)
            p["sample"].append(s)
        elif number == 3:
            m = dict((n, v) for n, _, v in fields(value))
            p["mapping"][m[1]] = m
        elif number == 4:
            loc = {"line": []}
            for n, w, v in fields(value):
                if n == 4:
                    loc["line"].append(dict((k, x) for k, _, x in fields(v)))
                else:
                    loc[n] = v
            p["location"][loc[1]] = loc
        elif number == 5:
            f = dict((n, v) for n, _, v in fields(value))
            p["function"][f[1]] = f
        elif number == 6:
            p["string_table"].append(value.decode("utf-8"))
        else:
            p["scalars"][number] = value
    return p


class ExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.trace = os.path.join(cls.tmp.name, "export.trace")
        subprocess.run([TRACE_WRITER, cls.trace], check=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_pprof_round_trips_the_sites(self):
        out = os.path.join(self.tmp.name, "profile.pb.gz")
        run(self.trace, "--no-symbolize", "--format", "pprof", "-o", out)
        with open(out, "rb") as f:
            p = decode_profile(gzip.decompress(f.read()))
        st = p["string_table"]
        self.assertEqual(st[0], "")
        self.assertEqual([(st[t], st[u]) for t, u in p["sample_type"]],
                         [("alloc_objects", "count"), ("alloc_space", "bytes"),
                          ("inuse_objects", "count"), ("inuse_space", "bytes")])
        self.assertEqual(st[p["scalars"][14]], "inuse_space")

        def frames_of(sample):
            names = []
            for lid in sample["location_id"]:
                loc = p["location"][lid]
                if 2 in loc:
                    self.assertIn(loc[2], p["mapping"])
                for line in loc["line"]:
                    names.append(st[p["function"][line[1]][2]])
            return names

        def labels_of(sample):
            return {st[l[1]]: (st[l[2]] if 2 in l else l.get(3)) for l in sample["label"]}

        # Host sites come as one sample per (step, stage) of allocation: summed
        # per stack they are the JSON report's numbers (every allocation of
        # this trace is recorded, so nothing is lost to rounding).
        report = json.loads(run(self.trace, "--no-symbolize", "--format", "json").stdout)
        by_key = {}
        for s in p["sample"]:
            lab = labels_of(s)
            key = (lab["pid"], lab["kind"], tuple(frames_of(s)))
            total, samples = by_key.setdefault(key, ([0, 0, 0, 0], []))
            for i, v in enumerate(s["value"]):
                total[i] += v
            samples.append(lab)
        self.assertEqual(len(by_key), len(report["sites"]))
        leak_key = None
        for site in report["sites"]:
            key = (site["pid"], site["kind"], tuple(f["function"] for f in site["frames"]))
            self.assertIn(key, by_key)
            total, labels = by_key[key]
            expected = [round(site[k]) for k in
                        ("alloc_count", "alloc_bytes", "live_count_end", "live_bytes_end")]
            self.assertEqual(total, expected, key)
            for lab in labels:
                self.assertEqual(lab["class"], site["class"])
                self.assertEqual(lab["rank"], "3")
            if site["class"] == "LEAK":
                leak_key = key
        # The planted leak: 64 KiB live from each of the 40 steps, in stage
        # "forward"; the model (before the first step) has no step label.
        leak = [(s["value"], labels_of(s)) for s in p["sample"]
                if (labels_of(s)["pid"], labels_of(s)["kind"], tuple(frames_of(s))) == leak_key]
        self.assertEqual(sorted(lab["step"] for _, lab in leak), list(range(40)))
        for values, lab in leak:
            self.assertEqual(values, [1, 65536, 1, 65536])
            self.assertEqual(lab["stage"], "forward")
        model = [labels_of(s) for s in p["sample"] if s["value"][3] == 10 << 20]
        self.assertEqual(len(model), 1)
        self.assertNotIn("step", model[0])
        self.assertNotIn("stage", model[0])
        churn = [labels_of(s) for s in p["sample"] if s["value"] == [1, 1 << 20, 0, 0]]
        self.assertEqual(len(churn), 40)
        files = {st[m[5]]: m for m in p["mapping"].values()}
        self.assertEqual(files["/opt/app/train"][2], 0x400000)

    def test_perfetto_is_a_valid_trace(self):
        out = run(self.trace, "--format", "perfetto").stdout
        doc = json.loads(out)
        events = doc["traceEvents"]
        self.assertTrue(events)
        slices, counters, instants = {}, {}, []
        for e in events:
            self.assertIn(e["ph"], "MXCi", e)
            self.assertIsInstance(e["pid"], int)
            if e["ph"] == "X":
                self.assertGreaterEqual(e["dur"], 0)
                slices.setdefault((e["pid"], e["tid"]), []).append(e)
            elif e["ph"] == "C":
                self.assertEqual(list(e["args"]), ["bytes"])
                self.assertIsInstance(e["args"]["bytes"], int)
                counters.setdefault(e["name"], []).append(e)
            elif e["ph"] == "i":
                instants.append(e)
        # Slices of one thread nest (or follow each other).
        for track, xs in slices.items():
            xs.sort(key=lambda e: (e["ts"], -e["dur"]))
            stack = []
            for e in xs:
                while stack and stack[-1] <= e["ts"]:
                    stack.pop()
                end = e["ts"] + e["dur"]
                if stack:
                    self.assertLessEqual(end, stack[-1] + 1e-6, (track, e))
                stack.append(end)
        steps = [e for xs in slices.values() for e in xs if e["cat"] == "step"]
        stages = [e for xs in slices.values() for e in xs if e["cat"] == "stage"]
        self.assertEqual(len(steps), 40)
        self.assertEqual(sorted({e["name"] for e in stages}), ["forward", 'opt;im,"zer"'])
        self.assertEqual(len(stages), 80)
        for name in ("host live", "RSS", "device 0 live"):
            self.assertIn(name, counters)
            ts = [e["ts"] for e in counters[name]]
            self.assertEqual(ts, sorted(ts), name)
        self.assertEqual(counters["device 0 live"][-1]["args"]["bytes"], 256 << 20)
        self.assertEqual(sorted(e["name"] for e in instants), ["ALERT growth", "device OOM"])

    def test_output_file_and_usage_errors(self):
        out = os.path.join(self.tmp.name, "stacks.folded")
        stdout = run(self.trace, "--format", "folded", "--view", "class:LEAK").stdout
        run(self.trace, "--format=folded", "--view=class:LEAK", "--output", out)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), stdout)
        self.assertTrue(stdout.endswith(b" 2621440\n"), stdout)
        csv = run(self.trace, "--format", "csv").stdout.decode()
        self.assertEqual(len(csv.split("\r\n")), 1 + 40 + 1)
        for args, message in (
                (["--format", "svg"],
                 "--format must be text, json, folded, csv, perfetto, pprof or html"),
                (["--view", "peak"], "--view applies to --format folded only"),
                (["--format", "folded", "--view", "top"], "is not a view"),
                (["--format", "folded", "--view", "stage:nope"], "no stage 'nope'"),
                (["-o"], "-o needs a value"),
                (["--format", "csv", "-o", os.path.join(self.tmp.name, "no", "such", "dir")],
                 "cannot create")):
            p = run(self.trace, *args, check=False)
            self.assertEqual(p.returncode, 1, args)
            self.assertEqual(p.stdout, b"", args)
            self.assertIn(message, p.stderr.decode(), args)


class GoPprofTest(unittest.TestCase):
    """The pprof tool itself (Debian's golang-go: `go tool pprof`) reads the
    export: sample types, totals per sample type, tag filters on stage and
    step (step 0 included)."""

    @classmethod
    def setUpClass(cls):
        cls.go = shutil.which("go") or "/usr/lib/go/bin/go"
        if not os.access(cls.go, os.X_OK):
            raise AssertionError("go not found: apt-get install golang-go (scripts/install-deps.sh)")
        cls.tmp = tempfile.TemporaryDirectory()
        trace = os.path.join(cls.tmp.name, "export.trace")
        subprocess.run([TRACE_WRITER, trace], check=True)
        cls.profile = os.path.join(cls.tmp.name, "profile.pb.gz")
        run(trace, "--no-symbolize", "--format", "pprof", "-o", cls.profile)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def pprof(self, *args):
        env = dict(os.environ, HOME=self.tmp.name, PPROF_TMPDIR=self.tmp.name)
        p = subprocess.run([self.go, "tool", "pprof", "-symbolize=none", *args, self.profile],
                           capture_output=True, env=env)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return p.stdout.decode()

    def total(self, *args):
        out = self.pprof("-top", "-unit=B", *args)
        m = re.search(r"accounting for (\d+)B, [\d.]+% of (\d+)B total", out)
        self.assertIsNotNone(m, out)
        return int(m.group(1))  # what the filters keep (group 2: the whole profile)

    def test_sample_types_and_totals(self):
        raw = self.pprof("-raw")
        self.assertIn("alloc_objects/count alloc_space/bytes inuse_objects/count "
                      "inuse_space/bytes[dflt]", raw)
        # In use at the end: 256 MiB on device 0, the 10 MiB model, the leak.
        self.assertEqual(self.total(), (256 << 20) + (10 << 20) + 40 * 65536)
        self.assertEqual(self.total("-sample_index=alloc_space"),
                         (256 << 20) + (10 << 20) + 40 * (65536 + (1 << 20)))

    def test_tag_filters(self):
        forward = self.total("-sample_index=alloc_space", "-tagfocus=stage=forward")
        self.assertEqual(forward, 40 * (65536 + (1 << 20)))
        self.assertEqual(self.total("-sample_index=alloc_space", "-tagfocus=step=0"),
                         65536 + (1 << 20))
        self.assertEqual(self.total("-tagfocus=class=LEAK"), 40 * 65536)
        self.assertEqual(self.total("-tagfocus=device=0"), 256 << 20)


class DocsTest(unittest.TestCase):
    """`memstep report --help` and docs/cli.md name the same options and
    formats; the export docs link only to files in the repository."""

    def test_help_matches_cli_md(self):
        import re
        help_text = subprocess.run([MEMSTEP, "report", "--help"], capture_output=True,
                                   check=True).stdout.decode()
        with open(os.path.join(SOURCE_DIR, "docs", "cli.md")) as f:
            cli_md = f.read()
        options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-o)\b", help_text))
        self.assertIn("--view", options)
        for option in options - {"--help"}:
            self.assertTrue(f"`{option}" in cli_md, f"{option} of --help not in docs/cli.md")
        for fmt in ("text", "json", "folded", "csv", "perfetto", "pprof", "html"):
            self.assertIn(f"`--format {fmt}`", cli_md, fmt)
            self.assertRegex(help_text, rf"\n +{fmt} ", fmt)
        self.assertNotIn("reserved", cli_md.split("## Exit status")[1].split("##")[0])

    def test_links_are_to_repository_files(self):
        import re
        docs = os.path.join(SOURCE_DIR, "docs")
        for name in ("export.md", "cli.md"):
            with open(os.path.join(docs, name)) as f:
                text = f.read()
            for target in re.findall(r"\]\(([^)]+)\)", text):
                self.assertFalse(re.match(r"[a-z]+:", target), f"{name}: external link {target}")
                path = target.split("#")[0]
                if path:
                    self.assertTrue(os.path.exists(os.path.join(docs, path)), f"{name}: {target}")


if __name__ == "__main__":
    MEMSTEP, TRACE_WRITER, SOURCE_DIR = sys.argv[1], sys.argv[2], sys.argv[3]
    unittest.main(argv=sys.argv[:1], verbosity=2)
