"""Automatic PyTorch step / stage / epoch markers (zero code changes).

Contract:
  * `install(torch)` is called once, right after the top-level `torch` module
    finished importing (python/startup/sitecustomize.py arranges it under
    `memstep run`). It never imports torch itself and does nothing when the
    profiler is not loaded. It returns True when the hooks are in place.
  * What it hooks (every torch version from 1.9 on):
      - steps and the "optimizer" stage: the `step` method of every
        torch.optim.Optimizer subclass, wrapped (once per class) when its
        first instance is constructed; only the outermost call of nested
        steps (a subclass calling super().step()) counts;
      - the "forward" stage: global module forward pre/post hooks
        (torch.nn.modules.module.register_module_forward_pre_hook /
        register_module_forward_hook); only a ROOT module call (not nested in
        another module's forward, on the same thread) begins/ends it;
      - "backward": from the end of a root forward with grad enabled to the
        optimizer step (or the next forward: gradient accumulation);
      - "data": the rest: from the step's start (optimizer end) to the forward;
      - epochs: torch.utils.data.DataLoader.__iter__: the first iteration of
        any loader begins epoch 0; then each new iteration of the training
        loader (the one being iterated when the first optimizer step ran)
        begins the next epoch.
  * Steps: step 0 begins at the first DataLoader iteration, grad-enabled root
    forward or optimizer step; step k ends when the optimizer step returns and
    step k+1 begins at once, except when the training loader's iterator is
    exhausted: then it begins at the next training-loader iteration (after the
    epoch marker) or forward/optimizer. The open step ends at exit (atexit),
    unless no forward or optimizer step ran in it (the program left its loop:
    it is no step, and stays open).
  * Explicit markers win: an explicit memstep.step()/stage()/epoch() call
    turns the matching automatic markers off (the open automatic step and
    stage are ended first).
  * NVTX step ranges win too: once libmemstep.so reports that an NVTX range
    marked a step (memstep_nvtx_steps_seen()), the automatic steps stop for
    good, without a marker of their own (the first NVTX step already ended the
    open automatic step); stages and epochs go on. Checked when an automatic
    step would begin or end: one C call per step.
  * PyTorch CUDA statistics (memstep/_torch_cuda.py) are recorded right
    before each automatic step END; when NVTX marks the steps, at the end of
    each outermost optimizer step instead; when the program marks steps
    itself, by memstep.step()/step_end().
  * torch.compile and CUDA graphs (docs/python.md "torch.compile and CUDA
    graphs"):
      - no graph breaks: every hook first asks torch.compiler.is_compiling()
        (torch._dynamo.is_compiling on 2.0; nothing on 1.13, which has no
        compiler) and, while Dynamo traces, does nothing but call through, so
        a traced hook is a constant branch: no graph break, no guard;
      - compiled steps: torch.compile is wrapped (when it exists); a compiled
        FUNCTION gets an eager wrapper. If an optimizer step was traced
        during one of its calls (a torch._dynamo.comptime callback, run at
        trace time only), every later call of it is a step: the step
        (stage "compiled") is open during the call and ends when it returns,
        like an optimizer step. A compiled MODULE is left alone: its forward
        hooks run eagerly;
      - CUDA graphs: torch.cuda.CUDAGraph.capture_begin/capture_end/replay
        are wrapped; an optimizer step that runs while a graph is being
        captured marks nothing but the graph; each replay of a graph that
        captured an optimizer step is a step (stage "graph").
  * PyTorch's OutOfMemoryError becomes a memory snapshot
    (memstep/_torch_oom.py), installed at the end of install().
  * Tensor blocks of the caching allocator (memstep/_torch_blocks.py): its
    install() queues their set-up for when the program initialises CUDA;
    the block events are written with the CUDA statistics, at each step end.
  * Behaviour is unchanged: wrapped functions return what the originals
    return and raise what they raise; hook failures are swallowed.
"""

import atexit
import functools
import os
import sys
import threading
import weakref

import memstep as _ms
from memstep import _torch_blocks
from memstep import _torch_cuda
from memstep import _torch_oom

_get_ident = threading.get_ident


def _never():
    return False


# torch.compiler.is_compiling (or the 2.0 spelling) once torch is imported;
# Dynamo folds a call of it to a constant while it traces.
_is_compiling = _never
# torch._dynamo.comptime.comptime, looked up when a compiled function is first
# called (Dynamo is imported then); None before.
_comptime = None
_tls = threading.local()  # .compiled: the compiled call running; .capturing: the graph
_step_graphs = weakref.WeakSet()  # CUDA graphs that captured an optimizer step


def _compiling_probe(torch):
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if fn is None:  # torch 2.0
        fn = getattr(sys.modules.get("torch._dynamo"), "is_compiling", None)
    return fn if callable(fn) else _never


class _State:
    def __init__(self, api, torch):
        self.api = api
        self.torch = torch
        self.step = None         # number of the open automatic step
        self.step_worked = False  # a forward or optimizer step ran in it
        self.next_step = 0
        self.stage = None        # open automatic stage (bytes)
        self.fwd_depth = 0       # module call depth inside the root forward
        self.fwd_tid = None      # thread of the root forward
        self.fwd_root = None     # id() of the root module (no reference kept)
        self.opt_depth = 0       # nesting of wrapped optimizer steps
        self.epoch = None        # last automatic epoch
        self.train_loader = None  # weakref: loader iterated at the first optimizer step
        self.last_loader = None   # weakref: loader iterated last
        self.last_iter = None     # weakref: its iterator
        self.train_iter = None    # weakref: the training loader's current iterator
        self.steps_on = not _ms.explicit["step"]
        self.stages_on = not _ms.explicit["stage"]
        self.epochs_on = not _ms.explicit["epoch"]
        self.nvtx_steps = False   # NVTX step ranges took the steps over
        self.nvtx_query = getattr(api, "nvtx_steps_seen", None)
        self.opt_steps = 0        # eager optimizer steps ended (compiled calls check it)
        self.lock = threading.RLock()
        self.worker_pid = None    # a DataLoader worker's pid, once it fetched (on_worker_fetch)

    # -- primitives (lock held) ------------------------------------------

    def set_stage(self, name):
        if not self.stages_on or self.stage == name:
            return
        if self.stage is not None:
            self.api.stage_end(self.stage)
        self.stage = name
        if name is not None:
            self.api.stage_begin(name)

    def nvtx_took_steps(self):
        """True (and the automatic steps off) once NVTX ranges mark steps."""
        query = self.nvtx_query
        if query is None or not query():
            return False
        self.nvtx_steps = True
        self.steps_on = False
        self.step = None  # NVTX's first step ended it in libmemstep.so
        return True

    def push_cuda_stats(self):
        _torch_blocks.push(self.api)
        _torch_cuda.push(self.api.counter)

    def open_step(self):
        if not self.steps_on or self.step is not None or self.nvtx_took_steps():
            return
        self.set_stage(None)  # a stage opened between steps ends outside them
        self.step = self.next_step
        self.step_worked = False
        self.next_step += 1
        self.api.step_begin(self.step)
        self.set_stage(b"data")

    def close_step(self):
        if self.step is None:
            return
        self.set_stage(None)
        if self.nvtx_took_steps():
            return
        self.push_cuda_stats()
        self.api.step_end(self.step)
        self.step = None

    def train_iter_exhausted(self):
        it = self.train_iter() if self.train_iter is not None else None
        if it is None:
            return False
        try:
            return it._num_yielded >= len(it)
        except Exception:  # iterable-style dataset: no length
            return False

    # -- events ------------------------------------------------------------

    def on_optimizer_begin(self):
        with self.lock:
            self.fwd_depth = 0
            self.open_step()
            self.step_worked = True
            self.set_stage(b"optimizer")

    def on_replayed_begin(self, stage):
        """A compiled step or CUDA-graph replay begins: the step is open."""
        with self.lock:
            self.fwd_depth = 0
            self.open_step()
            self.step_worked = True
            self.set_stage(stage)

    def on_optimizer_end(self):
        with self.lock:
            self.opt_steps += 1
            if self.train_loader is None and self.last_loader is not None:
                self.train_loader = self.last_loader
                self.train_iter = self.last_iter
            if self.steps_on and self.step is not None:
                self.close_step()
                if self.steps_on:
                    if not self.train_iter_exhausted():
                        self.open_step()
                    return
            if self.nvtx_steps and not _ms.explicit["step"]:
                # NVTX ends the step soon after: the statistics go between
                # stages, as before an automatic step END.
                self.set_stage(None)
                self.push_cuda_stats()
            self.set_stage(b"data")

    def on_loader_iter(self, loader):
        with self.lock:
            self.fwd_depth = 0
            is_train = self.train_loader is not None and self.train_loader() is loader
            if self.epochs_on and (self.epoch is None or is_train):
                self.epoch = 0 if self.epoch is None else self.epoch + 1
                if self.step is None:
                    self.set_stage(None)
                if self.api.epoch_begin is not None:
                    self.api.epoch_begin(self.epoch)
            if is_train or (self.train_loader is None and self.next_step == 0):
                self.open_step()

    def on_worker_fetch(self, begin):
        """A DataLoader worker process fetches a batch: each fetch is a step
        of the worker (it runs no optimizer), so growth across the batches a
        worker makes, such as a dataset that caches what it loads, is
        classified per worker. The worker was forked with its parent's state:
        its steps start from 0 in its own trace."""
        pid = os.getpid()
        if self.worker_pid != pid:
            # The worker's first fetch, on its only thread that runs hooks: a
            # lock of its own (another thread of the parent may have held the
            # inherited one when it forked) and steps from 0.
            self.lock = threading.RLock()
            self.worker_pid = pid
            self.step, self.stage, self.next_step = None, None, 0
            self.fwd_depth, self.opt_depth = 0, 0
        with self.lock:
            if not self.steps_on:
                return
            if begin:
                self.open_step()
            else:
                self.close_step()

    def on_loader_iterator(self, loader, it):
        try:
            loader_ref, it_ref = weakref.ref(loader), weakref.ref(it)
        except TypeError:
            return
        with self.lock:
            self.last_loader, self.last_iter = loader_ref, it_ref
            if self.train_loader is not None and self.train_loader() is loader:
                self.train_iter = it_ref

    def on_explicit(self, kind):
        with self.lock:
            if kind == "step":
                # The program's step_begin() that called us ends the open
                # automatic step, or continues it when it has the same
                # number: ending it here would leave a short extra step.
                self.set_stage(None)
                self.step = None
                self.steps_on = False
            elif kind == "stage":
                self.set_stage(None)
                self.stages_on = False
            elif kind == "epoch":
                self.epochs_on = False

    def at_exit(self):
        with self.lock:
            if self.step is not None and not self.step_worked:
                # The step opened when the last optimizer step returned, and
                # no forward or optimizer step came: the program left its
                # loop. Not a step: it stays open (no row), so what the
                # program frees on its way out (a list of kept tensors, say)
                # is in no step, and the last step end is the last real one.
                return
            self.close_step()
            self.set_stage(None)


_state = None  # the _State of this process (tests may replace it)


def _on_explicit(kind):
    _state.on_explicit(kind)


def _at_exit():
    try:
        _state.at_exit()
    except Exception:
        pass


def _forward_pre_hook(module, inputs):
    if _is_compiling():  # traced by Dynamo: a constant branch, no graph break
        return None
    st = _state
    # Nested call; a new call of the root module itself means that its last
    # forward raised (no post hooks ran): start over.
    if st.fwd_depth and id(module) != st.fwd_root:
        if _get_ident() == st.fwd_tid:
            st.fwd_depth += 1
        return None
    try:
        with st.lock:
            st.fwd_tid = _get_ident()
            st.fwd_root = id(module)
            st.fwd_depth = 1
            if st.torch.is_grad_enabled():
                st.open_step()
            st.step_worked = True
            st.set_stage(b"forward")
    except Exception:
        pass
    return None


def _forward_hook(module, inputs, output):
    if _is_compiling():
        return None
    st = _state
    if st.fwd_depth and _get_ident() == st.fwd_tid:
        st.fwd_depth -= 1
        if st.fwd_depth == 0:
            try:
                with st.lock:
                    st.set_stage(b"backward" if st.torch.is_grad_enabled() else b"data")
            except Exception:
                pass
    return None


def _wrap_step(func):
    @functools.wraps(func)
    def step(*args, **kwargs):
        if _is_compiling():
            if _comptime is not None:
                _comptime(_traced_optimizer_step)  # runs at trace time only
            return func(*args, **kwargs)
        if getattr(_tls, "capturing", None) is not None:
            _captured_optimizer_step()
            return func(*args, **kwargs)
        st = _state
        st.opt_depth += 1
        if st.opt_depth == 1:
            try:
                st.on_optimizer_begin()
            except Exception:
                pass
        try:
            return func(*args, **kwargs)
        finally:
            st.opt_depth -= 1
            if st.opt_depth == 0:
                try:
                    st.on_optimizer_end()
                except Exception:
                    pass

    step._memstep_wrapped = True
    return step


def _traced_optimizer_step(ctx=None):
    """Dynamo traced an optimizer step: the compiled call running is a step."""
    info = getattr(_tls, "compiled", None)
    if info is not None:
        info["step"] = True


def _captured_optimizer_step():
    graph = getattr(_tls, "capturing", None)
    try:
        _step_graphs.add(graph)
    except TypeError:
        pass


def _step_call(func, info, stage, args, kwargs):
    """Calls func (a compiled step or a graph replay) as one step when
    info["step"]; learns it during the call otherwise."""
    st = _state
    was_step = info["step"]
    opt_steps = st.opt_steps
    if was_step:
        try:
            st.on_replayed_begin(stage)
        except Exception:
            pass
    try:
        return func(*args, **kwargs)
    finally:
        # An eager optimizer step inside (a frame Dynamo did not compile)
        # already ended the step.
        if info["step"] and st.opt_steps == opt_steps and st.opt_depth == 0:
            try:
                st.on_optimizer_end()
            except Exception:
                pass


def _wrap_compiled(fn):
    """The eager wrapper of a function torch.compile returned."""
    info = {"step": False}

    @functools.wraps(fn)
    def compiled(*args, **kwargs):
        global _comptime
        if _is_compiling() or _state is None:
            return fn(*args, **kwargs)
        if _comptime is None:
            try:
                from torch._dynamo.comptime import comptime
                _comptime = comptime
            except Exception:  # no comptime: compiled steps go undetected
                pass
        outer = getattr(_tls, "compiled", None)
        _tls.compiled = info
        try:
            return _step_call(fn, info, b"compiled", args, kwargs)
        finally:
            _tls.compiled = outer

    compiled._memstep_compiled = True
    return compiled


def _wrap_compile(torch, orig_compile):
    nn_module = torch.nn.Module

    def wrap_result(result):
        if isinstance(result, nn_module) or not callable(result):
            return result  # a compiled module: its forward hooks run eagerly
        return _wrap_compiled(result)

    @functools.wraps(orig_compile)
    def compile(*args, **kwargs):
        result = orig_compile(*args, **kwargs)
        if args and args[0] is not None or "model" in kwargs and kwargs["model"] is not None:
            return wrap_result(result)
        decorator = result  # @torch.compile(...): wrap what the decorator returns

        @functools.wraps(decorator)
        def decorate(model):
            return wrap_result(decorator(model))

        return decorate

    compile._memstep_wrapped = True
    return compile


def _hook_cuda_graphs(torch):
    graph_cls = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    if graph_cls is None or not all(hasattr(graph_cls, m)
                                    for m in ("capture_begin", "capture_end", "replay")):
        return
    orig_begin, orig_end, orig_replay = (graph_cls.capture_begin, graph_cls.capture_end,
                                         graph_cls.replay)

    @functools.wraps(orig_begin)
    def capture_begin(self, *args, **kwargs):
        result = orig_begin(self, *args, **kwargs)
        _tls.capturing = self
        return result

    @functools.wraps(orig_end)
    def capture_end(self, *args, **kwargs):
        _tls.capturing = None
        return orig_end(self, *args, **kwargs)

    @functools.wraps(orig_replay)
    def replay(self, *args, **kwargs):
        try:
            is_step = self in _step_graphs
        except TypeError:
            is_step = False
        if not is_step or _state is None or getattr(_tls, "capturing", None) is not None:
            return orig_replay(self, *args, **kwargs)
        return _step_call(orig_replay, {"step": True}, b"graph", (self,) + args, kwargs)

    graph_cls.capture_begin = capture_begin
    graph_cls.capture_end = capture_end
    graph_cls.replay = replay


def _hook_optimizer_class(cls):
    step = getattr(cls, "step", None)
    if step is None or getattr(step, "_memstep_wrapped", False):
        return
    cls.step = _wrap_step(step)


def _hook_worker_fetch(torch):
    """Wraps the DataLoader's fetchers (one call a batch): in a worker
    process (get_worker_info() is set there only) each fetch is a step."""
    try:
        from torch.utils.data._utils import fetch as fetch_mod
        get_info = torch.utils.data.get_worker_info
    except Exception:
        return
    for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        cls = getattr(fetch_mod, name, None)
        orig = getattr(cls, "fetch", None)
        if orig is None or getattr(orig, "_memstep_wrapped", False):
            continue

        def make(orig):
            @functools.wraps(orig)
            def fetch(self, *args, **kwargs):
                if get_info() is None:  # the main process's own loading
                    return orig(self, *args, **kwargs)
                try:
                    _state.on_worker_fetch(True)
                except Exception:
                    pass
                try:
                    return orig(self, *args, **kwargs)
                finally:
                    try:
                        _state.on_worker_fetch(False)
                    except Exception:
                        pass
            fetch._memstep_wrapped = True
            return fetch

        cls.fetch = make(orig)


def install(torch):
    """Installs the hooks into the imported `torch` module (once)."""
    global _state
    if _state is not None:
        return True
    api = _ms._resolve()
    if api is None:
        return False
    import torch.nn.modules.module as module_mod
    import torch.optim
    import torch.utils.data

    _state = _State(api, torch)
    global _is_compiling
    _is_compiling = _compiling_probe(torch)

    optimizer = torch.optim.Optimizer
    orig_init = optimizer.__init__

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        try:
            _hook_optimizer_class(type(self))
        except Exception:
            pass

    optimizer.__init__ = __init__

    loader_cls = torch.utils.data.DataLoader
    orig_iter = loader_cls.__iter__

    @functools.wraps(orig_iter)
    def __iter__(self):
        try:
            _state.on_loader_iter(self)
        except Exception:
            pass
        it = orig_iter(self)
        try:
            _state.on_loader_iterator(self, it)
        except Exception:
            pass
        return it

    loader_cls.__iter__ = __iter__
    _hook_worker_fetch(torch)

    module_mod.register_module_forward_pre_hook(_forward_pre_hook)
    module_mod.register_module_forward_hook(_forward_hook)

    orig_compile = getattr(torch, "compile", None)
    if callable(orig_compile) and not getattr(orig_compile, "_memstep_wrapped", False):
        torch.compile = _wrap_compile(torch, orig_compile)
    try:
        _hook_cuda_graphs(torch)
    except Exception:
        pass

    _ms._on_explicit = _on_explicit
    atexit.register(_at_exit)
    try:
        _torch_oom.install(torch, api)
    except Exception:
        pass
    _torch_blocks.install(torch)  # never raises
    return True
