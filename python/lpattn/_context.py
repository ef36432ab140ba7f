"""One lpattn context per (thread, backend, device): a context is used by one
thread at a time (lpattn.h). GPU contexts follow the caller's current stream."""
import ctypes
import functools
import threading

from . import _lib
from .errors import call

_local = threading.local()


class _Ctx:
    def __init__(self, backend, device):
        p = _lib.init(_lib.ContextParams, "lpattn_context_params_init")
        p.device = device
        self.handle = ctypes.c_void_p()
        call("create", _lib.BACKENDS[backend], ctypes.byref(p), ctypes.byref(self.handle))
        self.addr = self.handle.value  # the handle as an int (_fastcall reads it)
        self.backend = _lib.lib.lpattn_backend_name(
            _lib.lib.lpattn_context_backend(self.handle)).decode()
        self.stream = None

    def use_stream(self, stream):
        if stream is not None and stream != self.stream:
            call("set_stream", self.handle, ctypes.c_void_p(stream))
            self.stream = stream

    def __del__(self):
        try:
            if getattr(self, "handle", None):
                _lib.lib.lpattn_free(self.handle)
        except Exception:  # interpreter shutdown
            pass


@functools.lru_cache(maxsize=None)
def host_backend():
    """cpu when it was built in, else ref (asked once: the answer costs tens of
    microseconds, every host call's context lookup asks)."""
    return "cpu" if _lib.lib.lpattn_backend_available(_lib.BACKENDS["cpu"]) else "ref"


def context(backend, view, stream=None):
    """The context for `backend` ("auto" picks from the data's device)."""
    if backend == "auto":
        if view.device_type == 2:
            backend = "cuda"
        elif view.device_type == 10:
            backend = "hip"
        else:
            backend = host_backend()
    if backend not in _lib.BACKENDS or backend == "auto":
        raise ValueError(f"backend = {backend!r}, expected one of {sorted(_lib.BACKENDS)}")
    gpu = backend in ("cuda", "hip")
    if gpu != view.on_gpu:
        raise ValueError(f"backend {backend!r} needs {'device' if gpu else 'host'} tensors, "
                         f"{view.name} is on {'a GPU' if view.on_gpu else 'the host'}")
    key = (backend, view.device_id if gpu else 0)
    cache = getattr(_local, "ctxs", None)
    if cache is None:
        cache = _local.ctxs = {}
    if key not in cache:
        cache[key] = _Ctx(backend, key[1])
    ctx = cache[key]
    if gpu:
        ctx.use_stream(stream)
    return ctx


def available_backends():
    """Backends built into the loaded library that can run on this machine."""
    return [b for b, v in _lib.BACKENDS.items()
            if b != "auto" and _lib.lib.lpattn_backend_available(v)]
