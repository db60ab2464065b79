"""Planted-fact PyTorch CUDA programs for tests/gpu/real_gpu_check.sh.

usage: gpu_train.py MODE FACTS_JSON [STEPS]
  leak     a small MLP trained on cuda:0 with a planted device leak (a CUDA
           tensor kept every step, line DEVICE_LEAK), a planted host leak (a
           bytearray kept every step, line HOST_LEAK) and, through the driver
           API, planted cuMemAlloc_v2 blocks; FACTS_JSON gets the planted lines
           and sizes and torch.cuda.memory_reserved()/memory_allocated() at
           each step end (right after optimizer.step(), where memstep's
           zero-code hooks end the step)
  oom      asks for more memory than the GPU has, catches the OutOfMemoryError
  bench    a real model (a 6-layer transformer encoder, batch 32 x 256 tokens)
           trained STEPS steps; FACTS_JSON gets each step's wall time
  compile  the MLP under torch.compile for 20 steps; FACTS_JSON gets the graph
           break count and the losses
Steps are marked by memstep's zero-code hooks (optimizer.step()): the program
has no memstep code.
"""

import ctypes
import json
import sys
import time

import torch

MB = 1024 * 1024


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                               torch.nn.Linear(4096, 1024)).cuda()


def step_facts(facts):
    torch.cuda.synchronize()
    facts["reserved"].append(torch.cuda.memory_reserved())
    facts["allocated"].append(torch.cuda.memory_allocated())


def mode_leak(facts, steps):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    kept_dev, kept_host = [], []
    facts.update(reserved=[], allocated=[], device_leak_bytes=4 * MB, host_leak_bytes=MB,
                 cu_mem_alloc=[])
    facts["device_leak_line"] = leak_device.__code__.co_firstlineno + 1
    facts["host_leak_line"] = leak_host.__code__.co_firstlineno + 1
    libcuda = ctypes.CDLL("libcuda.so.1")
    for k in range(steps):
        x = torch.randn(256, 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        leak_device(kept_dev)
        leak_host(kept_host)
        if k % 10 == 0:  # driver API: planted sizes, never freed
            size = (3 + k // 10) * MB + 4096
            ptr = ctypes.c_uint64()
            err = libcuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
            if err != 0:
                raise SystemExit("cuMemAlloc_v2 failed: %d" % err)
            facts["cu_mem_alloc"].append(size)
        opt.step()  # memstep's zero-code hooks end the step when this returns
        step_facts(facts)
        opt.zero_grad(set_to_none=True)


def leak_device(kept):
    kept.append(torch.empty(4 * MB, dtype=torch.uint8, device="cuda"))  # DEVICE_LEAK


def leak_host(kept):
    kept.append(bytearray(MB))  # HOST_LEAK


def mode_oom(facts, steps):
    free, total = torch.cuda.mem_get_info()
    facts["total"] = total
    try:
        torch.empty(total * 2, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        facts["oom"] = True


def transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                             batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=6).cuda()


def mode_bench(facts, steps):
    torch.manual_seed(0)
    model = transformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(32, 256, 512, device="cuda")
    times = []
    for k in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    facts["step_s"] = times


def mode_compile(facts, steps):
    import torch._dynamo
    torch.manual_seed(0)
    model = torch.compile(mlp())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for k in range(steps):
        x = torch.randn(256, 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    breaks = torch._dynamo.utils.counters.get("graph_break", {})
    facts["graph_breaks"] = sum(breaks.values())
    facts["losses"] = losses


def main():
    mode, out = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    facts = {"mode": mode, "torch": torch.__version__}
    {"leak": mode_leak, "oom": mode_oom, "bench": mode_bench,
     "compile": mode_compile}[mode](facts, steps)
    with open(out, "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    main()
