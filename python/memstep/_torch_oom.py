"""PyTorch out-of-memory errors as memstep memory snapshots.

Contract:
  * `install(torch, api)` is called once by _torch_hooks.install (so under
    `memstep run`, right after `torch` finished importing). `api` is the
    resolved C API (memstep._Api); without its `out_of_memory` function
    (memstep_out_of_memory, an older library) nothing is installed.
  * Where torch offers it (torch._C._cuda_attach_out_of_memory_observer,
    PyTorch 2.0 and later), an observer is attached: the caching allocator
    calls it with (device, requested bytes, the device's total memory (or the
    limit set by torch.cuda.set_per_process_memory_fraction), bytes free on
    the device) when it is about to raise OutOfMemoryError, whether or not
    the program catches the error. Each call becomes one
    memstep_out_of_memory(device, requested, free, total).
    Attaching it never initialises CUDA.
  * Otherwise (older torch, or the observer cannot be attached), sys.excepthook
    is wrapped: an OutOfMemoryError (torch.cuda.OutOfMemoryError, or any
    exception whose type is named OutOfMemoryError) that ends the program
    writes one snapshot (device and sizes unknown) before the original hook
    prints it. Errors the program catches are not seen on this path.
  * Behaviour is unchanged: the observer returns None and swallows its own
    errors; the wrapped excepthook always calls the original one.
"""

import sys

_installed = False


def _snapshot(api, device, requested, free, total):
    try:
        api.out_of_memory(int(device), int(requested), int(free), int(total))
    except Exception:
        pass


def _is_oom(exc_type, torch):
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    try:
        if isinstance(oom, type) and issubclass(exc_type, oom):
            return True
    except TypeError:
        pass
    return getattr(exc_type, "__name__", "") == "OutOfMemoryError"


def install(torch, api):
    """Returns "observer", "excepthook" or None (nothing installed)."""
    global _installed
    if _installed or api is None or getattr(api, "out_of_memory", None) is None:
        return None
    _installed = True
    attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    if attach is not None:
        def observer(device, alloc, device_total, device_free):
            _snapshot(api, device, alloc, device_free, device_total)

        try:
            attach(observer)
            return "observer"
        except Exception:
            pass
    original = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            if _is_oom(exc_type, torch):
                _snapshot(api, -1, 0, 0, 0)
        except Exception:
            pass
        original(exc_type, exc, tb)

    sys.excepthook = excepthook
    return "excepthook"
