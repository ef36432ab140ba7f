"""The optional C extension lpattn._fastcall (python/lpattn/_fastcall.c): the
hot path of lpattn.attention, KVPool.decode and the plans' runs on torch
tensors without ctypes (issue 32 item 1). It takes the library's functions
from the ctypes-loaded one (_lib.lib), so LPATTN_LIBRARY still picks it.

Found, in order: $LPATTN_FASTCALL (a path; "0" turns it off), inside the
package (pip install), next to the loaded library's build (build/python/).
Without it (or with sizes that disagree with _lib's structs) every call
takes the ctypes path; with it, a call it does not take (answer None) does
too, so both paths raise and return the same."""
import ctypes
import glob
import importlib.util
import os
import threading

from . import _lib

mod = None  # the module in use, or None: the ctypes path only
_loaded = None  # the module once bound (disabled() clears mod only)


def _candidates():
    env = os.environ.get("LPATTN_FASTCALL")
    if env is not None:
        if env not in ("", "0"):
            yield env
        return
    yield None  # lpattn._fastcall, installed in the package
    if os.sep in _lib.path:  # a build's library (not a name the linker found)
        yield from sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(_lib.path)),
                                                 "python", "_fastcall*.so")))


def _load():
    for path in _candidates():
        try:
            if path is None:
                from . import _fastcall as m
            else:
                spec = importlib.util.spec_from_file_location("lpattn._fastcall", path)
                m = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(m)
        except Exception:  # noqa: BLE001 (a bad LPATTN_FASTCALL path: no spec, no file)
            continue
        if m.sizes() == (ctypes.sizeof(_lib.Tensor), ctypes.sizeof(_lib.Batch)):
            return m
    return None


def _addr(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


class _Where:
    """The device of a fast call, as _context.context reads a view."""

    def __init__(self, device_type, device_id):
        self.device_type, self.device_id, self.name = device_type, device_id, "q"
        self.on_gpu = device_type != 1


def _resolve(backend, device_type, device_id):
    from ._context import context
    return context(backend, _Where(device_type, device_id))


def bind(no_rows):
    """Load and bind the module (once, from _api: `no_rows` is the shared
    lpattn_attn_aux of calls without lse/entropy)."""
    global mod, _loaded
    m = _load()
    if m is None:
        return
    from . import _context
    fns = {n: _addr(getattr(_lib.lib, n)) for n in
           ("lpattn_attention", "lpattn_paged_decode", "lpattn_kv_batch_init")}
    fns["no_rows"] = ctypes.addressof(no_rows)
    names = tuple(sorted(_lib.BACKENDS, key=_lib.BACKENDS.get))  # by lpattn_backend
    m.bind(fns, names, _lib.BACKENDS[_context.host_backend()], _context._local, _resolve)
    mod = _loaded = m


def bind_torch(torch):
    """torch's types and dtypes (once torch is in use: _dlpack._torch_dtypes)."""
    if _loaded is None:
        return
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    stream = raw if raw is not None else (lambda d: torch.cuda.current_stream(d).cuda_stream)
    _loaded.bind_torch(torch.Tensor, torch.nn.Parameter,
                   (torch.float32, torch.float16, torch.bfloat16, torch.int32), torch.strided,
                   stream, bool(torch.version.hip))


def enabled():
    return mod is not None


_switch = threading.Lock()


class disabled:
    """with _fast.disabled(): the ctypes path only (tests compare the two)."""

    def __enter__(self):
        global mod
        _switch.acquire()
        self._m, mod = mod, None

    def __exit__(self, *exc):
        global mod
        mod = self._m
        _switch.release()
