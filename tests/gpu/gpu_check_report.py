"""Checks of tests/gpu/real_gpu_check.sh: a program's planted facts
(tests/gpu/gpu_train.py) against `memstep report --format json`.

usage:
  gpu_check_report.py leak FACTS REPORT VARIANT
  gpu_check_report.py oom FACTS REPORT
  gpu_check_report.py overhead WORKDIR MAX_RATIO
  gpu_check_report.py compile PLAIN_FACTS FACTS REPORT
Prints one PASS/FAIL line per check; exits 1 when any failed.
"""

import glob
import json
import os
import statistics
import sys

MB = 1024 * 1024
failed = []


def check(ok, what):
    print("%s: %s" % ("PASS" if ok else "FAIL", what))
    if not ok:
        failed.append(what)
    return ok


def load(path):
    with open(path) as f:
        return json.load(f)


def device_rows(report):
    """{step: device-0 step row} of the report's one process."""
    out = {}
    for row in report["steps"]:
        for d in row.get("devices", []):
            if d.get("device") == 0:
                out[row["step"]] = d
    return out


def site_at(report, kind, function, line):
    for s in report["sites"]:
        if s["kind"] != kind:
            continue
        for f in s.get("frames", []):
            if f.get("function", "").split(".")[-1] == function and f.get("line") == line:
                return s
    return None


def leak(facts_path, report_path, variant):
    facts, report = load(facts_path), load(report_path)
    rows = device_rows(report)
    steps = len(facts["reserved"])
    check(len(rows) >= steps, "%s: %d device step rows for %d steps" % (variant, len(rows),
                                                                          steps))
    # 1. Every cudaMalloc / cuMemCreate (the caching allocator's segments) and
    # cuMemAlloc_v2 byte: live device bytes at each step end. The libraries
    # allocate device memory of their own, outside PyTorch's allocator, once,
    # at their first use (cuBLAS its workspaces: 2 x 64 MiB on an H200 with
    # CUDA 13): what is left over must be the same at every step end.
    cu = 0
    bad_blocks, extra = [], []
    for k in range(steps):
        if k % 10 == 0:
            cu += facts["cu_mem_alloc"][k // 10]
        row = rows.get(k)
        if row is None:
            extra.append((k, None))
            continue
        extra.append((k, row["live_bytes_end"] - facts["reserved"][k] - cu))
        tb = row.get("tensor_blocks")
        if not tb or tb["allocated_bytes"] != facts["allocated"][k]:
            bad_blocks.append((k, tb and tb["allocated_bytes"], facts["allocated"][k]))
    values = {v for _, v in extra}
    const = next(iter(values)) if len(values) == 1 else None
    check(const is not None and 0 <= const <= 1024 * MB,
          "%s: live device bytes == memory_reserved() + cuMemAlloc_v2 bytes + %s B of the "
          "libraries' own (the same at every step end; seen: %s)" %
          (variant, const, sorted(values, key=str)[:5]))
    libs = sorted({os.path.basename(f.get("module") or "").split(".so")[0]
                   for s in report["sites"] if s["kind"] == "device"
                   for f in s.get("frames", [])[:1]} - {""})
    print("  (device sites' innermost libraries: %s)" % ", ".join(libs))
    kinds = {kind for row in rows.values() for kind in row["live_by_kind"]}
    want_kind = "device_vmm" if variant == "expandable" else "device"
    check(want_kind in kinds, "%s: segments recorded as %s (kinds %s)" % (variant, want_kind,
                                                                           sorted(kinds)))
    # 2. Tensor blocks: allocated == memory_allocated(), the leak at its line.
    check(not bad_blocks, "%s: tensor-block bytes == memory_allocated() at every step end %s" %
          (variant, bad_blocks[:5]))
    rate = facts["device_leak_bytes"]
    s = site_at(report, "tensor_block", "leak_device", facts["device_leak_line"])
    # Device sampling T 8 MiB, 60 x 4 MiB leaked: relative SE of the rate about
    # sqrt(8/240) = 18 %; +-55 % is 3 SE.
    check(s is not None and s["class"] == "LEAK" and
          abs(s["growth_bytes_per_step"] - rate) <= 0.55 * rate,
          "%s: device leak named as a tensor_block LEAK at line %d, %s B/step (planted %d)" %
          (variant, facts["device_leak_line"], s and s["growth_bytes_per_step"], rate))
    # 3. The host leak (1 MiB blocks: always recorded).
    rate = facts["host_leak_bytes"]
    s = site_at(report, "host", "leak_host", facts["host_leak_line"])
    check(s is not None and s["class"] == "LEAK" and
          abs(s["growth_bytes_per_step"] - rate) <= 0.1 * rate,
          "%s: host leak named as a LEAK at line %d, %s B/step (planted %d)" %
          (variant, facts["host_leak_line"], s and s["growth_bytes_per_step"], rate))


def oom(facts_path, report_path):
    facts, report = load(facts_path), load(report_path)
    check(facts.get("oom") is True, "the program got its OutOfMemoryError")
    snaps = [m for m in report.get("memory_snapshots", []) if m.get("cause") == "torch_oom"]
    check(len(snaps) >= 1, "a torch_oom memory snapshot (%d)" % len(snaps))


def overhead(work, max_ratio):
    def med(pattern):
        per_run = []
        for path in sorted(glob.glob(os.path.join(work, pattern))):
            times = load(path)["step_s"][20:]  # after warm-up
            per_run.append(statistics.median(times))
        return statistics.median(per_run) if per_run else float("nan"), len(per_run)

    plain, n_plain = med("bench-plain-*.json")
    ms, n_ms = med("bench-memstep-*.json")
    ratio = ms / plain if plain > 0 else float("inf")
    check(n_plain >= 3 and n_ms >= 3 and ratio <= max_ratio,
          "overhead: median step %.3f ms under memstep, %.3f ms without: %.4fx (max %.2fx)" %
          (ms * 1e3, plain * 1e3, ratio, max_ratio))


def compiled(plain_path, facts_path, report_path):
    plain, facts, report = load(plain_path), load(facts_path), load(report_path)
    check(facts["graph_breaks"] == 0 and plain["graph_breaks"] == 0,
          "torch.compile: no graph break (%d under memstep, %d without)" %
          (facts["graph_breaks"], plain["graph_breaks"]))
    same = len(plain["losses"]) == len(facts["losses"]) and all(
        abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-6)
        for a, b in zip(plain["losses"], facts["losses"]))
    check(same, "torch.compile: the same losses under memstep")
    check(len(report["steps"]) >= len(facts["losses"]) - 1,
          "torch.compile: %d steps marked for %d optimizer steps" %
          (len(report["steps"]), len(facts["losses"])))


def main(argv):
    what = argv[1]
    if what == "leak":
        leak(argv[2], argv[3], argv[4])
    elif what == "oom":
        oom(argv[2], argv[3])
    elif what == "overhead":
        overhead(argv[2], float(argv[3]))
    elif what == "compile":
        compiled(argv[2], argv[3], argv[4])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
