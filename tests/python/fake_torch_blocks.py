"""A test double of PyTorch's CUDA caching allocator, as memstep's
python/memstep/_torch_blocks.py sees it (CI has no GPU and no CUDA torch).

It provides the modules `torch.cuda` and `torch.cuda.memory` with the names,
signatures and semantics of the real ones that _torch_blocks and
_torch_cuda use (API below; torch_blocks_test.py checks the signatures
against the real torch 2.x module):

  torch.cuda._lazy_call(callable, **kwargs)   queued until CUDA initialises
                                              (here: the first allocation),
                                              called at once afterwards
  torch.cuda.is_initialized()
  torch.cuda.device_count(), current_device(), memory_stats_as_nested_dict(
      device=None), reset_peak_memory_stats(device=None)   (the counters)
  torch.cuda.memory._record_memory_history(enabled="all", context="all",
      stacks="all", max_entries=sys.maxsize, device=None, clear_history=False,
      compile_context=False, global_record_annotations=False,
      skip_actions=None)
  torch.cuda.memory._snapshot(device=None, augment_with_fx_traces=False)

The allocator follows PyTorch's rules where memstep can tell: sizes rounded
up to 512 B; blocks of at most 1 MiB come from 2 MiB "small" segments, larger
ones from 20 MiB "large" segments (above 10 MiB: the size rounded up to
2 MiB); best fit among the inactive blocks of the right pool (smallest, then
lowest address); a block is split when the rest is at least 512 B (small) or
more than 1 MiB (large); a freed block merges with its inactive neighbours;
segments are never returned (no empty_cache). With history on and context
not None, each block keeps the Python stack of its allocation, innermost
frame first, as dicts {"filename", "line", "name"} (stacks="python"), and
_snapshot() returns it as the block's "frames"; otherwise "frames" is [].

Segments: with `cudart` (a ctypes CDLL of a libcudart), each segment is a
real cudaMalloc of that library, so that memstep records it as the device
layer around the blocks; otherwise addresses come from a counter.

    fake = FakeTorch().install()     # sys.modules torch, torch.cuda, torch.cuda.memory
    t = fake.empty(4096)             # a "tensor": its block is freed when t is collected
"""

import ctypes
import sys
import types

KB = 1024
MB = 1024 * 1024
MIN_BLOCK = 512
SMALL_SIZE = 1 * MB         # blocks up to this come from small segments
SMALL_BUFFER = 2 * MB       # a small segment
LARGE_BUFFER = 20 * MB      # a large segment for blocks up to MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 * MB
ROUND_LARGE = 2 * MB

API_CUDA = ("_lazy_call", "is_initialized", "device_count", "current_device",
            "memory_stats_as_nested_dict", "reset_peak_memory_stats")
API_MEMORY = ("_record_memory_history", "_snapshot")


def round_size(n):
    return MIN_BLOCK if n < MIN_BLOCK else (n + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


def segment_size(size):
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


class Block:
    __slots__ = ("segment", "address", "size", "requested", "active", "frames")

    def __init__(self, segment, address, size):
        self.segment = segment
        self.address = address
        self.size = size
        self.requested = 0
        self.active = False
        self.frames = []


class Segment:
    def __init__(self, address, size, small):
        self.address = address
        self.size = size
        self.small = small
        self.blocks = [Block(self, address, size)]  # in address order


class FakeTensor:
    """Holds one block; frees it when collected (like a tensor's storage)."""

    def __init__(self, fake, block):
        self._fake = fake
        self.block = block

    def data_ptr(self):
        return self.block.address

    def __del__(self):
        try:
            self._fake.free(self.block)
        except Exception:
            pass


class FakeTorch:
    def __init__(self, cudart=None, devices=1):
        self.cudart = cudart
        self.devices = devices
        self.initialized = False
        self.queued = []
        self.history = None          # (enabled, context, stacks) once asked
        self.history_calls = []      # the arguments of every _record_memory_history call
        self.segments = []
        self.next_addr = 0x7f0000000000
        self.allocated = 0
        self.allocated_peak = 0
        self.reserved = 0
        self.reserved_peak = 0
        self.snapshots = 0
        self.cuda = self._module("torch.cuda", API_CUDA)
        self.memory = self._module("torch.cuda.memory", API_MEMORY)
        self.cuda.memory = self.memory
        self.torch = types.ModuleType("torch")
        self.torch.cuda = self.cuda

    def _module(self, name, api):
        m = types.ModuleType(name)
        for fn in api:
            setattr(m, fn, getattr(self, fn))
        return m

    def install(self):
        self.saved = {k: sys.modules.get(k) for k in ("torch", "torch.cuda", "torch.cuda.memory")}
        sys.modules["torch"] = self.torch
        sys.modules["torch.cuda"] = self.cuda
        sys.modules["torch.cuda.memory"] = self.memory
        return self

    def uninstall(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    # ---- torch.cuda ----
    def _lazy_call(self, callable, **kwargs):
        if self.initialized:
            callable()
        else:
            self.queued.append(callable)

    def is_initialized(self):
        return self.initialized

    def device_count(self):
        return self.devices

    def current_device(self):
        return 0

    def memory_stats_as_nested_dict(self, device=None):
        inactive_split = sum(b.size for s in self.segments if len(s.blocks) > 1
                             for b in s.blocks if not b.active)

        def stat(current, peak):
            one = {"current": current, "peak": peak, "allocated": 0, "freed": 0}
            return {"all": dict(one), "large_pool": dict(one), "small_pool": dict(one)}

        return {
            "allocated_bytes": stat(self.allocated, self.allocated_peak),
            "reserved_bytes": stat(self.reserved, self.reserved_peak),
            "inactive_split_bytes": stat(inactive_split, inactive_split),
            "requested_bytes": stat(self.allocated, self.allocated_peak),
            "num_alloc_retries": 0,
            "num_ooms": 0,
        } if device in (None, 0) else {}

    def reset_peak_memory_stats(self, device=None):
        self.allocated_peak = self.allocated
        self.reserved_peak = self.reserved

    # ---- torch.cuda.memory ----
    def _record_memory_history(self, enabled="all", context="all", stacks="all",
                               max_entries=sys.maxsize, device=None, clear_history=False,
                               compile_context=False, global_record_annotations=False,
                               skip_actions=None):
        if isinstance(enabled, bool):
            raise TypeError("the legacy boolean API is not part of this double")
        if enabled not in (None, "state", "all") or context not in (None, "state", "alloc",
                                                                      "all"):
            raise ValueError("bad _record_memory_history arguments")
        self.history_calls.append((enabled, context, stacks))
        self.history = None if enabled is None else (enabled, context, stacks)

    def _snapshot(self, device=None, augment_with_fx_traces=False):
        self.snapshots += 1
        segments = []
        for s in self.segments:
            blocks = [{"address": b.address, "size": b.size, "requested_size": b.requested,
                       "state": "active_allocated" if b.active else "inactive",
                       "frames": list(b.frames)} for b in s.blocks]
            allocated = sum(b.size for b in s.blocks if b.active)
            segments.append({"device": 0, "address": s.address, "total_size": s.size,
                             "allocated_size": allocated, "active_size": allocated,
                             "requested_size": allocated, "stream": 0,
                             "segment_type": "small" if s.small else "large",
                             "segment_pool_id": (0, 0), "blocks": blocks})
        return {"segments": segments, "device_traces": [[]], "allocator_settings": {}}

    # ---- the allocator ----
    def _init(self):
        if self.initialized:
            return
        self.initialized = True
        queued, self.queued = self.queued, []
        for fn in queued:
            fn()

    def _new_segment(self, size, small):
        if self.cudart is not None:
            p = ctypes.c_void_p()
            err = self.cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size))
            if err != 0:
                raise RuntimeError("CUDA out of memory (cudaMalloc %d)" % err)
            addr = p.value
        else:
            addr = self.next_addr
            self.next_addr += size + 2 * MB
        seg = Segment(addr, size, small)
        self.segments.append(seg)
        self.reserved += size
        self.reserved_peak = max(self.reserved_peak, self.reserved)
        return seg

    def empty(self, nbytes, depth=1):
        """A tensor of `nbytes` bytes; its frames start at the caller `depth` up."""
        self._init()
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        best = None
        for s in self.segments:
            if s.small != small:
                continue
            for b in s.blocks:
                if not b.active and b.size >= size and (
                        best is None or (b.size, b.address) < (best.size, best.address)):
                    best = b
        if best is None:
            best = self._new_segment(segment_size(size), small).blocks[0]
        rest = best.size - size
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            seg = best.segment
            tail = Block(seg, best.address + size, rest)
            seg.blocks.insert(seg.blocks.index(best) + 1, tail)
            best.size = size
        best.active = True
        best.requested = nbytes
        best.frames = self._frames(depth + 1) if self._stacks() else []
        self.allocated += best.size
        self.allocated_peak = max(self.allocated_peak, self.allocated)
        return FakeTensor(self, best)

    def _stacks(self):
        return self.history is not None and self.history[1] is not None

    @staticmethod
    def _frames(depth):
        out = []
        f = sys._getframe(depth)
        while f is not None:
            out.append({"filename": f.f_code.co_filename, "line": f.f_lineno,
                        "name": f.f_code.co_name})
            f = f.f_back
        return out

    def free(self, block):
        if not block.active:
            return
        block.active = False
        block.frames = []
        self.allocated -= block.size
        seg = block.segment
        i = seg.blocks.index(block)
        if i + 1 < len(seg.blocks) and not seg.blocks[i + 1].active:
            block.size += seg.blocks.pop(i + 1).size
        if i > 0 and not seg.blocks[i - 1].active:
            prev = seg.blocks[i - 1]
            prev.size += block.size
            seg.blocks.pop(i)
