"""PyTorch CUDA caching-allocator statistics as memstep counters.

Contract:
  * `push(counter)` is called right before each step END marker that memstep's
    Python side emits (memstep.step()/step_end(), the zero-code optimizer
    hooks), and by memstep.torch_cuda_counters(). `counter` is the C
    function memstep_counter(name: bytes, value: int).
  * It records, for every device the program uses, counters named
    `torch.cuda:<dev>.<stat>` (see STATS), in STATS order. By default it
    never resets the program's peak statistics (the numbers the program's own
    logging reports stay its own), and records no *_peak counter (it would
    cover the run, not the step). Only with MEMSTEP_TORCH_CUDA_STATS=reset
    does it call torch.cuda.reset_peak_memory_stats(dev) after reading, so
    that the *_peak counters are per step.
  * It never imports torch and never initialises CUDA: it reads
    sys.modules["torch.cuda"] (present only once the program imported torch;
    looking it up never triggers an import) and does nothing unless
    torch.cuda.is_initialized() (False on CPU-only builds, before the first
    CUDA use, and in a forked child).
  * Used devices: every visible device whose caching allocator has reserved
    memory (reserved_bytes current or peak > 0) at a step end, and from then
    on at every step end (so that its series has no holes after an
    empty_cache()). A device the program never used gets no counters, no
    reset, and therefore no CUDA context.
  * Keys missing from memory_stats() (older torch has no requested_bytes; the
    cudaMallocAsync backend leaves some out) are skipped.
  * Failure: the first exception raised inside is swallowed, one
    "memstep: warning:" line goes to stderr (not with MEMSTEP_QUIET=1), and
    the statistics stay off for the rest of the process.
  * MEMSTEP_TORCH_CUDA_STATS (read once, at the first push): "0" turns this
    off; "reset" (opt-in) also resets the peaks after each read and records
    the per-step *_peak counters; anything else (default "1"; "noreset", its
    old spelling): the current values, no reset.
"""

import os
import sys

# (counter suffix, path in torch.cuda.memory_stats_as_nested_dict(dev)), in the
# order they are recorded. The flat memory_stats() key is the path joined by ".".
STATS = (
    ("allocated_bytes", ("allocated_bytes", "all", "current")),
    ("reserved_bytes", ("reserved_bytes", "all", "current")),
    ("inactive_split_bytes", ("inactive_split_bytes", "all", "current")),
    ("requested_bytes", ("requested_bytes", "all", "current")),
    ("num_alloc_retries", ("num_alloc_retries",)),
    ("num_ooms", ("num_ooms",)),
    ("allocated_bytes_peak", ("allocated_bytes", "all", "peak")),
    ("reserved_bytes_peak", ("reserved_bytes", "all", "peak")),
)
_PEAKS = ("allocated_bytes_peak", "reserved_bytes_peak")

OFF, ON, RESET = "off", "on", "reset"
NO_RESET = ON  # the default since the peaks are no longer reset unasked


def mode_from_env(environ=os.environ):
    value = environ.get("MEMSTEP_TORCH_CUDA_STATS", "1").strip().lower()
    if value in ("0", "off", "false", "no"):
        return OFF
    if value == RESET:
        return RESET
    return ON


def _lookup(stats, path):
    """stats[path[0]][path[1]]..., or None when a key is missing."""
    value = stats
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
        if value is None:
            return None
    return value if isinstance(value, int) else None


class Collector:
    """The state of one process: mode, devices seen, counter names."""

    def __init__(self, mode=None):
        self.mode = mode            # None until the first push reads the environment
        self.failed = False
        self.used = set()           # device indices reported so far
        self.names = {}             # device -> [(STATS entry, encoded name)]

    def push(self, counter, device=None):
        """Records the statistics of `device` (default: every used device)."""
        if self.failed or counter is None:
            return
        if self.mode is None:
            self.mode = mode_from_env()
        if self.mode == OFF:
            return
        cuda = sys.modules.get("torch.cuda")
        if cuda is None:
            return
        try:
            if not cuda.is_initialized():
                return
            if device is None:
                for dev in range(cuda.device_count()):
                    self._device(counter, cuda, dev, explicit=False)
            else:
                self._device(counter, cuda, _index(cuda, device), explicit=True)
        except Exception as err:  # never change the program's behaviour
            self.failed = True
            if os.environ.get("MEMSTEP_QUIET") != "1":
                sys.stderr.write("memstep: warning: PyTorch CUDA statistics off after an "
                                 "error: %r\n" % (err,))

    def _device(self, counter, cuda, dev, explicit):
        stats = cuda.memory_stats_as_nested_dict(dev)
        if not stats:
            return
        if not explicit and dev not in self.used:
            current = _lookup(stats, ("reserved_bytes", "all", "current"))
            peak = _lookup(stats, ("reserved_bytes", "all", "peak"))
            if not current and not peak:
                return  # not used (yet): no reset, no context
        self.used.add(dev)
        for (_, path), name in self._names(dev):
            value = _lookup(stats, path)
            if value is not None:
                counter(name, value)
        if self.mode == RESET:
            cuda.reset_peak_memory_stats(dev)

    def _names(self, dev):
        names = self.names.get(dev)
        if names is None:
            names = [(entry, ("torch.cuda:%d.%s" % (dev, entry[0])).encode())
                     for entry in STATS
                     if self.mode == RESET or entry[0] not in _PEAKS]
            self.names[dev] = names
        return names


def _index(cuda, device):
    """The device index of an int, a torch.device or "cuda:N"."""
    if isinstance(device, str):  # (str has an `index` method: not getattr)
        index = device.rpartition(":")[2] if ":" in device else None
    elif isinstance(device, int):
        index = device
    else:
        index = getattr(device, "index", None)
    return cuda.current_device() if index is None else int(index)


collector = Collector()  # this process's (tests may replace it)


def push(counter, device=None):
    collector.push(counter, device)
