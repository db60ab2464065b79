"""memstep's Python start-up hook (zero-code PyTorch step/stage markers).

Contract:
  * `memstep run` puts this directory and its parent (which holds the
    `memstep` package) at the front of PYTHONPATH and sets
    MEMSTEP_PYTHON_HOOKS=1; Python's `site` then imports this module.
  * It does nothing unless MEMSTEP_PYTHON_HOOKS=1 (and not MEMSTEP_DISABLE=1):
    then it only appends a finder to sys.meta_path. It never imports torch,
    ctypes or the memstep package at start-up.
  * The finder answers for the top-level `torch` module only: it asks the
    other finders for torch's spec and wraps its loader so that, after torch's
    own code ran, `memstep._torch_hooks.install(torch)` registers the hooks
    (a no-op when libmemstep.so is not loaded). The original loader is then
    put back on the module and its spec, and the finder removes itself.
    Import errors propagate unchanged.
  * Any other `sitecustomize` further along sys.path (the user's, the
    distribution's) still runs, after this one, as before.
  * Python's allocator: when libmemstep.so is preloaded (LD_PRELOAD names
    it), not MEMSTEP_DISABLE=1 and not MEMSTEP_PYMEM=0, it first calls the
    library's memstep_pymem_install() through ctypes.PyDLL(None) (the GIL
    held), which hooks pymalloc's domains and arenas (docs/python.md), before
    any other code of the program runs. This is independent of
    MEMSTEP_PYTHON_HOOKS. Any failure is silent here (the library says why
    on stderr when it refuses).
  * CPython 3.12 and 3.13, the library preloaded: os.fork and os.forkpty
    are wrapped so that CPython's "This process is multi-threaded, use of
    fork() may lead to deadlocks" warning is left out when the only other
    threads are memstep's own (memstep_own_threads() through ctypes); it
    stands, attributed to the caller as before, whenever the program has
    threads of its own.
"""

import os
import sys


class _TorchLoader:
    """Delegates to torch's loader; installs memstep's hooks after exec."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            # Put the real loader back: nothing of memstep stays visible.
            try:
                if module.__dict__.get("__loader__") is self:
                    module.__loader__ = self._loader
                spec = module.__dict__.get("__spec__")
                if spec is not None and spec.loader is self:
                    spec.loader = self._loader
            except Exception:
                pass
        try:
            from memstep import _torch_hooks
            _torch_hooks.install(module)
        except Exception as e:  # never break the program
            if os.environ.get("MEMSTEP_QUIET") != "1":
                sys.stderr.write("memstep: warning: PyTorch hooks not installed: %r\n" % (e,))


class _TorchFinder:
    """sys.meta_path entry that wraps the loader of the top-level `torch`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or path is not None:
            return None
        try:
            sys.meta_path.remove(self)  # one shot; also avoids recursion
        except ValueError:
            pass
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _TorchLoader(spec.loader)
        return spec


def _library_function(name):
    """The preloaded library's `int name(void)` through ctypes, or None: not
    preloaded, MEMSTEP_DISABLE=1, an older library without it, no ctypes."""
    env = os.environ
    if "libmemstep" not in env.get("LD_PRELOAD", "") or env.get("MEMSTEP_DISABLE") == "1":
        return None
    try:
        import ctypes
        fn = getattr(ctypes.PyDLL(None), name)
    except Exception:
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = []
    return fn


def _install_pymem():
    if os.environ.get("MEMSTEP_PYMEM") == "0":
        return
    install = _library_function("memstep_pymem_install")
    if install is not None:  # else Python's allocator stays unhooked
        install()


def _quiet_fork_warning():
    """CPython 3.12 and 3.13 warn at os.fork() (and os.forkpty()) when the
    process has other threads, counted by the kernel (/proc/self/stat);
    memstep's own (its writer, its keeper) are among them. Both are wrapped
    so that the program sees what it would see without memstep: no warning
    when the only other threads are memstep's; when it has threads of its
    own, CPython's warning, attributed to the caller's module and line as
    CPython attributes it (the call runs in a frame with the caller's
    globals, file and line)."""
    if sys.version_info[:2] not in ((3, 12), (3, 13)) or not hasattr(os, "fork"):
        return
    own = _library_function("memstep_own_threads")
    if own is None:  # the warning stays
        return
    import warnings

    def only_memstep_threads():
        try:
            with open("/proc/self/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return int(fields[17]) - own() <= 1  # field 20: num_threads
        except Exception:
            return False

    call = compile("_memstep_result = _memstep_real()", "<memstep>", "exec")

    def wrap(real):
        def fork():
            if only_memstep_threads():
                # No other Python thread runs: changing the filters is safe.
                with warnings.catch_warnings():
                    warnings.filterwarnings(
                        "ignore", category=DeprecationWarning,
                        message=r"This process \(pid=\d+\) is multi-threaded, use of fork")
                    return real()
            try:
                caller = sys._getframe(1)
                code = call.replace(co_filename=caller.f_code.co_filename,
                                    co_firstlineno=caller.f_lineno or 1)
                globs = caller.f_globals
            except Exception:
                return real()
            scope = {"_memstep_real": real}
            exec(code, globs, scope)
            return scope["_memstep_result"]

        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                setattr(fork, attr, getattr(real, attr))
            except Exception:
                pass
        return fork

    os.fork = wrap(os.fork)
    if hasattr(os, "forkpty"):
        os.forkpty = wrap(os.forkpty)


def _install():
    if os.environ.get("MEMSTEP_PYTHON_HOOKS") != "1":
        return
    if os.environ.get("MEMSTEP_DISABLE") == "1":
        return
    if "torch" in sys.modules:  # cannot happen at start-up; be safe
        return
    sys.meta_path.insert(0, _TorchFinder())


def _chain():
    """Runs the next `sitecustomize` on sys.path after this directory."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = []
    seen = False
    for entry in sys.path:
        try:
            absolute = os.path.abspath(entry or os.curdir)
        except Exception:
            continue
        if seen:
            if absolute != here:
                rest.append(entry)
        elif absolute == here:
            seen = True
    if not rest:
        return
    finder = None
    for f in sys.meta_path:
        if getattr(f, "__name__", "") == "PathFinder":
            finder = f
            break
    if finder is None:
        return
    spec = finder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = type(sys)("sitecustomize")
    module.__spec__ = spec
    module.__loader__ = spec.loader
    if spec.origin and spec.has_location:
        module.__file__ = spec.origin
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # as site.py reports a failing sitecustomize
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             "%s: %s\n" % (err.__class__.__name__, err))
    finally:
        if ours is not None:
            sys.modules["sitecustomize"] = ours


try:
    _install_pymem()
except Exception:
    pass
try:
    _quiet_fork_warning()
except Exception:
    pass
_install()
_chain()
