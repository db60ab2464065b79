"""A minimal NVTX client in Python (ctypes), for tests: does what an nvtx3
instance does on its first call (and what torch.cuda.nvtx does on a CUDA build
of torch, which CI lacks): dlopen(NVTX_INJECTION64_PATH), call its
InitializeInjectionNvtx2 with an export-table getter, then call whatever the
tool installed in the CORE callback table (null slots are no-ops).

    import nvtx_client
    nvtx_client.range_push("train_step 3")
    ...
    nvtx_client.range_pop()
"""

import ctypes
import os

_CORE = 1                    # NVTX_CB_MODULE_CORE
_ETID_CALLBACKS = 1          # NVTX_ETID_CALLBACKS
_RANGE_PUSH_A, _RANGE_POP = 9, 11  # NVTX_CBID_CORE_RangePushA / RangePop
_SLOTS = 16

_GetModule = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                              ctypes.POINTER(ctypes.c_uint))
_GetTable = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
_PushA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)
_Pop = ctypes.CFUNCTYPE(ctypes.c_int)


class _Callbacks(ctypes.Structure):  # NvtxExportTableCallbacks
    _fields_ = [("struct_size", ctypes.c_size_t), ("get_module", _GetModule)]


_core = (ctypes.c_void_p * _SLOTS)()  # what the tool installed
_core_slots = (ctypes.c_void_p * _SLOTS)(
    *[ctypes.addressof(_core) + i * ctypes.sizeof(ctypes.c_void_p) for i in range(_SLOTS)])
_state = {"init": False, "push": None, "pop": None, "attached": False}


@_GetModule
def _get_module(module, out, size):
    if module != _CORE:
        return 0
    out[0] = ctypes.addressof(_core_slots)
    size[0] = _SLOTS
    return 1


_callbacks = _Callbacks(ctypes.sizeof(_Callbacks), _get_module)


@_GetTable
def _get_table(table_id):
    return ctypes.addressof(_callbacks) if table_id == _ETID_CALLBACKS else None


def _init():
    _state["init"] = True
    path = os.environ.get("NVTX_INJECTION64_PATH")
    if not path:
        return
    lib = ctypes.CDLL(path)  # the preloaded library: dlopen returns the same object
    init = getattr(lib, "InitializeInjectionNvtx2", None)
    if init is None:
        return
    init.argtypes = [_GetTable]
    init.restype = ctypes.c_int
    if init(_get_table) == 0:
        return
    _state["attached"] = True
    if _core[_RANGE_PUSH_A]:
        _state["push"] = _PushA(_core[_RANGE_PUSH_A])
    if _core[_RANGE_POP]:
        _state["pop"] = _Pop(_core[_RANGE_POP])


def attached():
    """True when an injection library took the callbacks."""
    if not _state["init"]:
        _init()
    return _state["attached"]


def range_push(name):
    if not _state["init"]:
        _init()
    push = _state["push"]
    return push(name.encode()) if push is not None else -1


def range_pop():
    if not _state["init"]:
        _init()
    pop = _state["pop"]
    return pop() if pop is not None else -1
