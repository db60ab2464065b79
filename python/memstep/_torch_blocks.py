"""Tensor blocks inside PyTorch's CUDA caching allocator, as memstep records.

With PyTorch's caching allocator, cudaMalloc sees only segments (2 MiB and
>= 20 MiB pieces that the allocator keeps); tensors are blocks carved out of
them. This module records every block as an inner device layer (kind
`tensor_block`, docs/gpu.md "Tensor blocks inside the caching allocator"):

Contract:
  * `install(torch)` (from _torch_hooks.install, right after `import torch`)
    queues `enable()` with torch.cuda._lazy_call: it runs when the program
    itself initialises CUDA (at once if it already did). It never imports
    torch, never initialises CUDA and never raises into torch's lazy init.
  * `enable()` asks PyTorch to keep, for each live block, the Python stack of
    its allocation: torch.cuda.memory._record_memory_history(enabled="state",
    context="alloc", stacks="python") (torch >= 2.1: no history ring, no
    C++ frames; torch 1.13 and 2.0: the boolean _record_memory_history(True)).
    PyTorch then captures that stack on every block allocation (its own
    cost, which PyTorch documents as about 2 us; not measured here).
    MEMSTEP_TORCH_BLOCKS=nolines skips it (blocks counted, no lines);
    MEMSTEP_TORCH_BLOCKS=0 turns all of this off. A program that
    calls _record_memory_history itself later keeps what it asked for.
  * `push(api)` runs at each step end (with the torch.cuda counters, see
    _torch_cuda.push): it reads torch.cuda.memory._snapshot(), keeps the
    blocks in a live state (LIVE_STATES), and compares
    them with the previous step end's, by (device, address, size): each block
    gone is one memstep_torch_block(0, ...), each new block one
    memstep_torch_block(1, ...). Every block is counted exactly (at step-end
    granularity: a block allocated and freed between two step ends is not
    seen, nor one freed and allocated again at the same address and size).
    A new block is sampled by the device sampler (memstep_torch_block_sample:
    the same Poisson byte countdown and mean interval as device allocations);
    only a sampled one gets its frames (innermost first) passed to C.
  * With PyTorch's cudaMallocAsync backend (get_allocator_backend() other
    than "native"), every tensor is already a device_pool allocation of the
    CUDA interception: the blocks turn themselves off, silently.
  * Failure: the first exception is swallowed, one "memstep: warning:" line
    goes to stderr (not with MEMSTEP_QUIET=1) and the blocks stay off for
    the rest of the process. A torch without the APIs gets one
    "memstep: note:" line saying what is missing and what is recorded instead.
"""

import os
import sys

OFF, ON, NOLINES = "off", "on", "nolines"
# Block states that hold memory for a tensor (PyTorch's snapshot states).
LIVE_STATES = ("active_allocated", "active_awaiting_free", "active_pending_free")


def mode_from_env(environ=os.environ):
    value = environ.get("MEMSTEP_TORCH_BLOCKS", "1").strip().lower()
    if value in ("0", "off", "false", "no"):
        return OFF
    if value == NOLINES:
        return NOLINES
    return ON


def _say(kind, text):
    if os.environ.get("MEMSTEP_QUIET") != "1":
        sys.stderr.write("memstep: %s: %s\n" % (kind, text))


def _memory_module():
    """torch.cuda.memory, as the loaded torch.cuda module holds it (None
    before torch is imported, or when torch.cuda is something else)."""
    return getattr(sys.modules.get("torch.cuda"), "memory", None)


def frames_bytes(frames):
    """b"name\\0file\\0line\\0" per frame, in the order given (innermost first)."""
    parts = []
    for f in frames:
        if not isinstance(f, dict):
            continue
        parts.append(b"%s\0%s\0%d\0" % (str(f.get("name", "?")).encode("utf-8", "replace"),
                                         str(f.get("filename", "?")).encode("utf-8", "replace"),
                                         int(f.get("line", 0) or 0)))
    return b"".join(parts)


def _block_frames(block):
    frames = block.get("frames")
    if frames is None:  # torch 2.0: the allocation's history entry
        history = block.get("history")
        if history:
            frames = history[-1].get("frames")
    return frames or ()


def live_blocks(snapshot):
    """{(device, address, size): block} of the blocks that hold tensors."""
    out = {}
    for seg in snapshot.get("segments", ()):
        device = int(seg.get("device", 0))
        addr = int(seg.get("address", 0))
        for block in seg.get("blocks", ()):
            size = int(block.get("size", 0))
            baddr = int(block.get("address", block.get("addr", addr)))
            if block.get("state") in LIVE_STATES and size > 0:
                out[(device, baddr, size)] = block
            addr = baddr + size  # blocks of a segment are in address order
    return out


class Collector:
    """The state of one process."""

    def __init__(self, mode=None):
        self.mode = mode       # None until install()/push() reads the environment
        self.failed = False
        self.enabled = False   # history asked for (or not needed)
        self.lines = False     # PyTorch records the blocks' Python stacks
        self.live = {}         # (device, address, size) -> True, as of the last push
        self.events = 0        # block events written (tests, benchmark)

    def _mode(self):
        if self.mode is None:
            self.mode = mode_from_env()
        return self.mode

    def install(self, torch):
        """Queues enable() for when the program initialises CUDA."""
        if self._mode() == OFF:
            return False
        cuda = getattr(torch, "cuda", None)
        lazy_call = getattr(cuda, "_lazy_call", None)
        if lazy_call is None:
            return False
        try:
            lazy_call(self.enable)
        except Exception as err:  # never change the program's behaviour
            self._fail(err)
            return False
        return True

    def enable(self):
        """Asks PyTorch to keep each live block's Python stack. Never raises."""
        if self.enabled or self.failed:
            return
        self.enabled = True
        if self._mode() != ON:
            return
        try:
            backend = getattr(sys.modules.get("torch.cuda"), "get_allocator_backend", None)
            if backend is not None and backend() != "native":
                # cudaMallocAsync: every tensor is a device_pool allocation
                # of the CUDA interception already; no blocks to add.
                self.mode = OFF
                return
            memory = _memory_module()
            record = getattr(memory, "_record_memory_history", None)
            if record is None or getattr(memory, "_snapshot", None) is None:
                _say("note", "tensor blocks: this torch has no torch.cuda.memory."
                     "_record_memory_history/_snapshot; blocks are not recorded")
                return
            try:
                record(enabled="state", context="alloc", stacks="python")
                self.lines = True
            except TypeError:
                # torch 1.13 and 2.0: the boolean API only; each block's
                # "history" then carries the frames (and a 1-entry trace).
                try:
                    record(True)
                    self.lines = True
                except TypeError:
                    _say("note", "tensor blocks: this torch's _record_memory_history takes "
                         "neither enabled='state' nor True; blocks are recorded without "
                         "Python lines")
        except Exception as err:
            self._fail(err)

    def push(self, api):
        """Writes the block events since the previous step end."""
        if self.failed or api is None or self._mode() == OFF:
            return
        block = getattr(api, "torch_block", None)
        sample = getattr(api, "torch_block_sample", None)
        if block is None or sample is None:
            return
        cuda = sys.modules.get("torch.cuda")
        snap = getattr(_memory_module(), "_snapshot", None)
        if cuda is None or snap is None:
            return
        try:
            if not cuda.is_initialized():
                return
            if not self.enabled:  # CUDA was initialised before install()
                self.enable()
            now = live_blocks(snap())
            old = self.live
            for key in old:
                if key not in now:
                    block(0, key[0], key[1], key[2], -1, None, 0)
                    self.events += 1
            for key, b in now.items():
                if key in old:
                    continue
                interval = sample(key[2])
                frames = frames_bytes(_block_frames(b)) if interval >= 0 else b""
                block(1, key[0], key[1], key[2], interval, frames or None, len(frames))
                self.events += 1
            self.live = dict.fromkeys(now, True)
        except Exception as err:  # never change the program's behaviour
            self._fail(err)

    def _fail(self, err):
        self.failed = True
        _say("warning", "PyTorch tensor blocks off after an error: %r" % (err,))


collector = Collector()  # this process's (tests may replace it)


def install(torch):
    return collector.install(torch)


def push(api):
    collector.push(api)
