"""memstep: training step / stage markers for the memstep memory profiler.

Contract:
  * Pure Python (ctypes), no compilation. The functions call the C API of
    libmemstep.so (include/memstep/memstep.h), which `memstep run` preloads,
    so its symbols are in the process's global namespace.
  * When the profiler is not loaded every function is a harmless no-op (one
    global lookup and a compare); `enabled()` says which case holds.
  * Nothing here changes what the program sees: markers raise nothing (bad
    arguments aside); return values of decorated functions and exceptions
    inside `with stage(...)` pass through unchanged.
  * Explicit markers win: the first explicit `step()`/`step_end()` turns off
    the automatic PyTorch step markers of `memstep run` (python/startup), the
    first explicit `stage()` the automatic stages, the first `epoch()` the
    automatic epochs.
  * PyTorch CUDA statistics: right before every step END it emits (`step()`
    ending the open step, `step_end()`), the helper records the caching
    allocator's statistics as counters `torch.cuda:<dev>.<stat>`, without
    resetting the program's peaks unless MEMSTEP_TORCH_CUDA_STATS=reset
    (memstep/_torch_cuda.py; only when the program already initialised CUDA
    in torch; MEMSTEP_TORCH_CUDA_STATS=0 turns it off).

Usage:
    import memstep
    for e in range(epochs):
        memstep.epoch(e)
        for batch in loader:
            memstep.step()                # ends the previous step, begins the next
            with memstep.stage("forward"):
                loss = model(batch)
            memstep.counter("loss_x1000", int(loss.item() * 1000))
    memstep.step_end()
"""

import functools
import threading

from memstep import _torch_blocks
from memstep import _torch_cuda

__all__ = [
    "step", "step_end", "epoch", "stage", "counter", "enabled", "torch_cuda_counters",
    "snapshot",
]

_UNSET = object()
_api = _UNSET          # _Api once resolved, None when the profiler is not loaded
_lock = threading.Lock()
_next_step = 0         # step() without an argument
_step_open = False     # a step begun by step() and not yet ended by the helper
# Which kinds of markers the program set itself (read by _torch_hooks).
explicit = {"step": False, "stage": False, "epoch": False}
# Called with the kind on the first explicit marker of that kind (set by _torch_hooks).
_on_explicit = None


class _Api:
    """The resolved C functions (ctypes), each None when absent."""

    def __init__(self, lib, ctypes):
        def fn(name, argtype):
            f = getattr(lib, name, None)
            if f is not None:
                f.argtypes = [argtype]
                f.restype = None
            return f

        self.step_begin = fn("memstep_step_begin", ctypes.c_uint64)
        self.step_end = fn("memstep_step_end", ctypes.c_uint64)
        self.stage_begin = fn("memstep_stage_begin", ctypes.c_char_p)
        self.stage_end = fn("memstep_stage_end", ctypes.c_char_p)
        self.epoch_begin = fn("memstep_epoch_begin", ctypes.c_uint64)
        self.counter = getattr(lib, "memstep_counter", None)
        if self.counter is not None:
            self.counter.argtypes = [ctypes.c_char_p, ctypes.c_int64]
            self.counter.restype = None
        # memstep_out_of_memory(device, requested, free, total): a memory
        # snapshot at an out-of-memory error (memstep/_torch_oom.py).
        self.out_of_memory = getattr(lib, "memstep_out_of_memory", None)
        if self.out_of_memory is not None:
            self.out_of_memory.argtypes = [ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64,
                                           ctypes.c_uint64]
            self.out_of_memory.restype = None
        self.snapshot = getattr(lib, "memstep_snapshot", None)
        if self.snapshot is not None:
            self.snapshot.argtypes = []
            self.snapshot.restype = None
        # Tensor blocks of PyTorch's caching allocator (memstep/_torch_blocks.py);
        # absent from older libraries.
        self.torch_block_sample = getattr(lib, "memstep_torch_block_sample", None)
        if self.torch_block_sample is not None:
            self.torch_block_sample.argtypes = [ctypes.c_uint64]
            self.torch_block_sample.restype = ctypes.c_int64
        self.torch_block = getattr(lib, "memstep_torch_block", None)
        if self.torch_block is not None:
            self.torch_block.argtypes = [ctypes.c_int, ctypes.c_int32, ctypes.c_uint64,
                                         ctypes.c_uint64, ctypes.c_int64, ctypes.c_char_p,
                                         ctypes.c_uint64]
            self.torch_block.restype = None
        # Non-zero once an NVTX range marked a step (python/memstep/_torch_hooks
        # then stops marking steps); absent from older libraries.
        self.nvtx_steps_seen = getattr(lib, "memstep_nvtx_steps_seen", None)
        if self.nvtx_steps_seen is not None:
            self.nvtx_steps_seen.argtypes = []
            self.nvtx_steps_seen.restype = ctypes.c_int


def _resolve():
    """Returns the _Api of the loaded profiler, or None (cached)."""
    global _api
    if _api is _UNSET:
        with _lock:
            if _api is _UNSET:
                api = None
                try:
                    import ctypes
                    lib = ctypes.CDLL(None)  # the global namespace: LD_PRELOADed libraries
                    if getattr(lib, "memstep_step_begin", None) is not None:
                        api = _Api(lib, ctypes)
                except Exception:  # no ctypes, no dlopen(NULL): stay a no-op
                    api = None
                _api = api
    return _api


def _mark_explicit(kind):
    if not explicit[kind]:
        explicit[kind] = True
        cb = _on_explicit
        if cb is not None:
            try:
                cb(kind)
            except Exception:
                pass


def _encode(name):
    if isinstance(name, bytes):
        return name
    return str(name).encode("utf-8", "replace")


def enabled():
    """True when libmemstep.so is loaded in this process (markers are recorded)."""
    return _resolve() is not None


def step(n=None):
    """Ends the open step (if any) and begins step `n` (default: previous + 1)."""
    global _next_step, _step_open
    if n is None:
        n = _next_step
    n = int(n)
    _next_step = n + 1
    api = _api if _api is not _UNSET else _resolve()
    if api is None:
        return
    if not explicit["step"]:
        _mark_explicit("step")
    if _step_open:  # this call ends the open step: its statistics first
        _torch_blocks.push(api)
        _torch_cuda.push(api.counter)
    api.step_begin(n)
    _step_open = True


def step_end(n=None):
    """Ends step `n` (default: the step begun last)."""
    global _step_open
    if n is None:
        n = _next_step - 1 if _next_step > 0 else 0
    api = _api if _api is not _UNSET else _resolve()
    if api is None:
        return
    if not explicit["step"]:
        _mark_explicit("step")
    _torch_blocks.push(api)
    _torch_cuda.push(api.counter)
    api.step_end(int(n))
    _step_open = False


def epoch(n):
    """Begins epoch `n`: the steps that follow belong to it."""
    api = _api if _api is not _UNSET else _resolve()
    if api is None:
        return
    if not explicit["epoch"]:
        _mark_explicit("epoch")
    if api.epoch_begin is not None:
        api.epoch_begin(int(n))


def counter(name, value):
    """Records a named integer value (e.g. an allocator statistic) at this moment."""
    api = _api if _api is not _UNSET else _resolve()
    if api is None or api.counter is None:
        return
    api.counter(_encode(name), int(value))


class stage:
    """A stage of the current step: `with memstep.stage("forward"): ...` or
    `@memstep.stage("forward")` on a function. Stages nest (16 levels)."""

    __slots__ = ("name", "_raw")

    def __init__(self, name):
        self.name = str(name)
        self._raw = _encode(name)

    def __enter__(self):
        api = _api if _api is not _UNSET else _resolve()
        if api is not None:
            if not explicit["stage"]:
                _mark_explicit("stage")
            api.stage_begin(self._raw)
        return self

    def __exit__(self, exc_type, exc, tb):
        api = _api
        if api is not None and api is not _UNSET:
            api.stage_end(self._raw)
        return False  # exceptions propagate

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return wrapper

    def __repr__(self):
        return "memstep.stage(%r)" % self.name


def torch_cuda_counters(device=None):
    """Records PyTorch's CUDA caching-allocator statistics now, as at a step
    end: counters `torch.cuda:<dev>.<stat>` for `device` (default: every device
    the program uses); resets the peak statistics only with
    MEMSTEP_TORCH_CUDA_STATS=reset. For steps memstep does
    not see from Python (C++ or NVTX markers without the zero-code hooks):
    call it right before the step ends. No-op without the profiler, without
    torch imported or CUDA initialised; never imports torch."""
    api = _api if _api is not _UNSET else _resolve()
    if api is not None:
        _torch_cuda.push(api.counter, device)


def snapshot():
    """Records a memory snapshot now (a MEM_SNAPSHOT record: `memstep report`
    shows what was live by site, host and device, at this moment)."""
    api = _resolve()
    if api is not None and api.snapshot is not None:
        api.snapshot()
