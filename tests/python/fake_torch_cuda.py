"""A stand-in for the `torch.cuda` module (CI has no GPU, Debian's torch no
CUDA): the functions memstep/_torch_cuda.py calls, with the real names and
signatures, recording every call and returning planted statistics.

The program under test sets `fake.round` (its step number) before each step
end; the planted statistics of device `dev` in round `k` are `planted(dev, k)`:
every recorded value is distinct, so a wrong name, order or device shows.
Device 1 exists; it has memory reserved only in the rounds in `dev1_rounds`
(all zero statistics otherwise).

    fake = FakeCuda()
    fake.install()          # sys.modules["torch.cuda"] = fake
"""

import sys

# The functions of torch.cuda the collector may call (checked against the
# real module by torch_cuda_stats_test.py). Nothing else exists here: a call
# to anything more (is_available(), which may initialise the driver, say)
# raises AttributeError, which the collector reports as a warning, and the
# tests fail on any warning.
API = ("is_initialized", "device_count", "current_device", "memory_stats_as_nested_dict",
       "reset_peak_memory_stats")

# counter suffix -> offset of its planted value (see planted())
OFFSETS = {
    "allocated_bytes": 1, "reserved_bytes": 2, "inactive_split_bytes": 3, "requested_bytes": 4,
    "num_alloc_retries": 5, "num_ooms": 6, "allocated_bytes_peak": 7, "reserved_bytes_peak": 8,
}
ORDER = ("allocated_bytes", "reserved_bytes", "inactive_split_bytes", "requested_bytes",
         "num_alloc_retries", "num_ooms", "allocated_bytes_peak", "reserved_bytes_peak")


def value(dev, k, stat):
    """The planted value of `stat` on device `dev` in round `k`."""
    return (dev + 1) * 1000000 + k * 1000 + OFFSETS[stat]


def planted(dev, k, used=True, missing=()):
    """memory_stats_as_nested_dict(dev) in round k (keys in `missing` left out)."""
    def v(stat):
        return value(dev, k, stat) if used else 0

    def pools(current, peak):
        one = {"current": current, "peak": peak, "allocated": 10 * current, "freed": 9 * current}
        return {"all": dict(one), "large_pool": dict(one), "small_pool": dict(one)}

    stats = {
        "allocated_bytes": pools(v("allocated_bytes"), v("allocated_bytes_peak")),
        "reserved_bytes": pools(v("reserved_bytes"), v("reserved_bytes_peak")),
        "inactive_split_bytes": pools(v("inactive_split_bytes"), 99),
        "requested_bytes": pools(v("requested_bytes"), 98),
        "active_bytes": pools(97, 96),
        "segment": pools(3, 4),
        "num_alloc_retries": v("num_alloc_retries"),
        "num_ooms": v("num_ooms"),
        "num_sync_all_streams": 95,
        "max_split_size": -1,
    }
    for key in missing:
        stats.pop(key, None)
    return stats


def expected(dev, k, peaks=True, missing=()):
    """The (name, value) counters the collector records for `dev` in round k."""
    return [("torch.cuda:%d.%s" % (dev, stat), value(dev, k, stat)) for stat in ORDER
            if (peaks or not stat.endswith("_peak")) and stat not in missing]


class FakeCuda:
    def __init__(self, devices=2, initialized=True, dev1_rounds=(), missing=(), fail_in=None):
        self.__name__ = "torch.cuda"
        self.devices = devices
        self.initialized = initialized
        self.dev1_rounds = dev1_rounds   # rounds in which device 1 holds memory
        self.missing = missing           # keys memory_stats leaves out
        self.fail_in = fail_in           # name of a function that raises
        self.round = 0
        self.calls = []                  # ("name", args...)

    def install(self):
        self.saved = sys.modules.get("torch.cuda")
        sys.modules["torch.cuda"] = self
        return self

    def uninstall(self):
        if self.saved is None:
            sys.modules.pop("torch.cuda", None)
        else:
            sys.modules["torch.cuda"] = self.saved

    def _call(self, name, *args):
        self.calls.append((name,) + args)
        if name == self.fail_in:
            raise RuntimeError("planted failure in torch.cuda.%s" % name)

    def is_initialized(self):
        self._call("is_initialized")
        return self.initialized

    def device_count(self):
        self._call("device_count")
        return self.devices

    def current_device(self):
        self._call("current_device")
        return 0

    def memory_stats_as_nested_dict(self, device=None):
        self._call("memory_stats_as_nested_dict", device)
        used = device == 0 or self.round in self.dev1_rounds
        return planted(device, self.round, used, self.missing)

    def reset_peak_memory_stats(self, device=None):
        self._call("reset_peak_memory_stats", device)
