#!/usr/bin/env python3
"""Device sampling and memory snapshots on the CUDA test doubles (no GPU).

usage: sampling_test.py MEMSTEP APP_SAMPLE FAKEDRV_DIR WORK

Runs apps/app_sample.cc under `memstep run` with the default device sampling
interval (T_dev = 8 MiB, warm-up 2 MiB) and MEMSTEP_SEED=1, sends it the
snapshot signal (SIGUSR2, opted in with MEMSTEP_SNAPSHOT_SIGNAL=USR2) when it
says "ready", lets it make its planted out-of-memory call, and checks `memstep report --format json`:

  - device totals are exact (allocated bytes and count, live at the end);
  - the sampler unwound a small share of the allocations (few stacks);
  - the churning site's estimated allocated bytes are within a tolerance
    derived from its Horvitz-Thompson variance: the 256 KiB blocks are much
    smaller than T, so Var ~ B * T per part of the run (B bytes at T); with
    320 MiB at T_warm = 2 MiB and 640 MiB at T <= 8 MiB the standard error is
    at most sqrt(320*2 + 640*8) MiB = 76 MiB, 7.9 % of the 960 MiB planted;
    4.5 standard errors (a false failure about once in 150 000 seeds) is 36 %;
  - the device leak hunt ran (a HUNT record with memory 1);
  - two memory snapshots: the signal's (no out of memory; taken by the
    writer thread at its next wake-up, so in step 59 or 60) and the failed
    call's ("out of memory at step 60, stage forward, requested 1 TiB, free
    ... of 4 GiB"), whose exact resident bytes equal what the program had live
    and whose top device sites name the planted sites;
  - the text report prints that line.
Then again with SIGUSR2 ignored by the parent: memstep must leave the signal
alone (no snapshot, a notice), and the program runs on.
"""

import json
import os
import signal
import subprocess
import sys

MiB = 1 << 20


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cli, app, drv, out, ignore_usr2):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMSTEP_") and not k.startswith("FAKECUDA_")
           and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    env.update({"LD_LIBRARY_PATH": drv, "FAKECUDA_MEM_LIMIT": str(4 << 30), "MEMSTEP_SEED": "1",
                "MEMSTEP_HUNT_BUDGET": "100", "MEMSTEP_WINDOW": "0",
                # The snapshot signal is opt-in (docs/gpu.md).
                "MEMSTEP_SNAPSHOT_SIGNAL": "USR2"})

    def pre():
        if ignore_usr2:
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)

    p = subprocess.Popen([cli, "run", "--out", out, "--", app], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                         preexec_fn=pre)
    line = p.stdout.readline().split()
    if len(line) != 2 or line[0] != "ready":
        p.kill()
        fail("app did not get ready: %r %s" % (line, p.stderr.read()))
    os.kill(int(line[1]), signal.SIGUSR2)
    stdout, stderr = p.communicate("go\n", timeout=90)
    if p.returncode != 0:
        fail("app under memstep exited %d: %s %s" % (p.returncode, stdout, stderr))
    facts = dict(kv.split("=") for kv in stdout.split("facts", 1)[1].split())
    return {k: int(v) for k, v in facts.items()}


def report(cli, out, fmt):
    r = subprocess.run([cli, "report", out, "--format", fmt], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        fail("memstep report exited %d: %s" % (r.returncode, r.stderr))
    return r.stdout


def sites_named(rep, func):
    return [s for s in rep["sites"] if any(f.get("function") == func for f in s["frames"])]


def main():
    cli, app, drv, work = sys.argv[1:5]
    subprocess.run(["rm", "-rf", work], check=True)
    os.makedirs(work)

    # ---- default sampling, the snapshot signal, the planted out of memory
    out = os.path.join(work, "run")
    facts = run(cli, app, drv, out, ignore_usr2=False)
    rep = json.loads(report(cli, out, "json"))
    proc = rep["processes"][0]
    dev0 = [d for d in proc["devices"] if d["device"] == 0]
    if not dev0:
        fail("no device 0 in the report")
    d = dev0[0]
    if d["alloc_bytes"] != facts["alloc_bytes"] or d["alloc_count"] != facts["alloc_count"]:
        fail("device totals not exact: report %d B / %d, planted %d B / %d" %
             (d["alloc_bytes"], d["alloc_count"], facts["alloc_bytes"], facts["alloc_count"]))
    if d["live_bytes_end"] != facts["live_bytes"]:
        fail("device live at end %d, planted %d" % (d["live_bytes_end"], facts["live_bytes"]))

    samples = sum(s["samples"] for s in rep["sites"] if s["kind"].startswith("device"))
    if not 0 < samples < 0.25 * facts["alloc_count"]:
        fail("%d device samples of %d allocations: not sampling" % (samples, facts["alloc_count"]))

    small = sites_named(rep, "planted_sample_small")
    if len(small) != 1:
        fail("planted_sample_small: %d sites" % len(small))
    truth = 60 * 64 * (256 << 10)
    est = small[0]["alloc_bytes"]
    if abs(est - truth) > 0.36 * truth:
        fail("planted_sample_small allocated %.0f MiB estimated, %.0f MiB planted (tolerance 36 %%)"
             % (est / MiB, truth / MiB))
    if small[0]["live_bytes_end"] != 0:
        fail("planted_sample_small is live at the end: %r" % small[0]["live_bytes_end"])

    hunts = [h for h in proc["hunts"] if h.get("memory") == "device"]
    if not hunts:
        fail("no device leak hunt in %r" % proc["hunts"])

    snaps = rep["memory_snapshots"]
    causes = sorted(s["cause"] for s in snaps)
    if causes != ["device_oom", "signal"]:
        fail("memory snapshots %r, expected the signal's and the failed call's" % causes)
    # The writer thread takes the signal's snapshot at its next wake-up: before
    # or after the program went on to its last step (either is right).
    sig = [s for s in snaps if s["cause"] == "signal"][0]
    oom = [s for s in snaps if s["cause"] == "device_oom"][0]
    if sig["out_of_memory"] or sig["step"] not in (59, 60):
        fail("signal snapshot: %r" % sig)
    if not oom["out_of_memory"] or oom["step"] != 60 or oom["stage"] != "forward":
        fail("out-of-memory snapshot: %r" % oom)
    if oom["requested_bytes"] != 1 << 40 or oom["api"] != "cudaMalloc" or oom["device"] != 0:
        fail("out-of-memory snapshot request: %r" % oom)
    if oom["total_bytes"] != 4 << 30 or oom["free_source"] != "moment" or \
            oom["free_bytes"] != (4 << 30) - facts["live_bytes"]:
        fail("out-of-memory snapshot free/total: %r (live %d)" % (oom, facts["live_bytes"]))
    if oom["device_resident_bytes"] != facts["live_bytes"]:
        fail("snapshot resident %d, planted live %d" % (oom["device_resident_bytes"],
                                                          facts["live_bytes"]))
    ids = {s["id"]: s for s in rep["sites"]}
    top = [f["function"] for s in oom["device_sites"] if s["site_id"] in ids
           for f in ids[s["site_id"]]["frames"]]
    if "planted_sample_weights" not in top or "planted_sample_leak" not in top:
        fail("out-of-memory snapshot's device sites %r lack the planted ones" % top)
    text = report(cli, out, "text")
    want = "out of memory at step 60, stage forward, requested 1.00 TiB"
    if want not in text:
        fail("text report lacks %r:\n%s" % (want, text[:3000]))

    # ---- SIGUSR2 ignored by the parent: left alone
    out2 = os.path.join(work, "ignored")
    run(cli, app, drv, out2, ignore_usr2=True)
    rep2 = json.loads(report(cli, out2, "json"))
    causes2 = [s["cause"] for s in rep2["memory_snapshots"]]
    if causes2 != ["device_oom"]:
        fail("with SIGUSR2 ignored: snapshots %r" % causes2)
    notices = rep2["processes"][0]["notices"]
    if not any("snapshot signal is already handled" in n for n in notices):
        fail("no notice about the handled snapshot signal: %r" % notices)
    print("ok: %d device samples of %d allocations; planted_sample_small %.0f MiB estimated of "
          "%.0f MiB; %d device hunt(s); snapshots %r" %
          (samples, facts["alloc_count"], est / MiB, truth / MiB, len(hunts), causes))


if __name__ == "__main__":
    main()
