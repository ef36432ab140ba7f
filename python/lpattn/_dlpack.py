"""Zero-copy views of any DLPack producer (torch, NumPy, CuPy, JAX) as
lpattn_tensor, and output arrays of the caller's kind."""
import ctypes
import struct

from . import _lib

_TENSOR = struct.Struct("@Pi4q4q")  # lpattn_tensor's layout (native alignment)
assert _TENSOR.size == ctypes.sizeof(_lib.Tensor)

CPU, CUDA, CUDA_HOST, ROCM = 1, 2, 3, 10


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int),
                ("dtype", _DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _ManagedVersioned(ctypes.Structure):  # DLPack >= 1.0: carries the read-only flag
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


READ_ONLY, IS_COPIED = 1, 2  # DLPACK_FLAG_BITMASK_*

_get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_get_ptr.restype, _get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype, _get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]

# DLPack (code, bits) -> lpattn dtype, and the names of errors.
_DTYPES = {(2, 32): _lib.F32, (2, 16): _lib.F16, (4, 16): _lib.BF16, (0, 32): _lib.I32,
           (1, 8): None, (0, 64): "int64",
           (10, 8): _lib.E4M3}  # kDLFloat8_e4m3fn: torch.float8_e4m3fn (static FP8, SPEC 11)
_TORCH = []


def _torch_dtypes():
    """(torch, {torch dtype: (lpattn dtype as _DTYPES has it, itemsize, name)}): View's torch path."""
    if not _TORCH:
        import torch
        names = {"float32": (_lib.F32, 4), "float16": (_lib.F16, 2), "bfloat16": (_lib.BF16, 2),
                 "int32": (_lib.I32, 4), "uint8": (None, 1), "int64": ("int64", 8),
                 "float8_e4m3fn": (_lib.E4M3, 1)}
        _TORCH[:] = [torch, {getattr(torch, n): (dt, size, n) for n, (dt, size) in names.items()
                             if hasattr(torch, n)}]
        from . import _fast
        _fast.bind_torch(torch)
    return _TORCH[0], _TORCH[1]


NAMES = {_lib.F32: "float32", _lib.F16: "float16", _lib.BF16: "bfloat16", _lib.I32: "int32"}
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}
# What each kind of argument takes (View's `kind`), for the messages.
KINDS = {"float": ("float32, float16 or bfloat16", (_lib.F32, _lib.F16, _lib.BF16)),
         "index": ("int32 (or int64 within int32's range)", (_lib.I32, "int64")),
         "bytes": ("uint8", (None,)),
         # attention's q, k, v: also float8_e4m3fn (static FP8, SPEC 11), named in its docstring
         "qkv": ("float32, float16 or bfloat16", (_lib.F32, _lib.F16, _lib.BF16, _lib.E4M3)),
         "any": ("float32, float16, bfloat16, int32 or uint8",
                 (_lib.F32, _lib.F16, _lib.BF16, _lib.I32, None))}


def _dtype_name(code, bits, lanes=1):
    if (code, bits) == (6, 8):
        return "bool"
    name = f"{_CODE_NAMES.get(code, f'dtype code {code} of ')}{bits}"
    return name + (f"x{lanes}" if lanes != 1 else "")


class View:
    """A DLPack view of `obj`: device, dtype (lpattn's), shape, strides in
    elements, data pointer. Keeps the capsule (and so the buffer) alive.
    kind: the dtypes the argument takes (KINDS); write: the call writes it
    (a read-only or copied array is refused: ValueError)."""

    def __init__(self, obj, name, stream=None, *, kind="any", write=False):
        is_torch = namespace_of(obj) == "torch"
        if is_torch and obj.requires_grad:
            obj = obj.detach()  # same memory; torch exports no tensor that requires grad
        self.obj, self.name, self.kind = obj, name, kind
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"{name}: expected a DLPack tensor (torch, NumPy, CuPy, JAX), "
                            f"got {type(obj).__name__}")
        if write:
            _check_writable(obj, name)
        if is_torch and self._from_torch(obj):
            return
        if is_torch and stream is None:
            # No stream handshake: lpattn runs on the caller's current stream, where the
            # data is ready. torch's default (None) makes the legacy default stream wait
            # on an event of the current one, which invalidates a CUDA graph capture.
            stream = -1
        flags = 0
        try:
            cap = _export(obj, stream)
        except BufferError:  # NumPy exports no bfloat16 (ml_dtypes) array: use its buffer
            if namespace_of(obj) != "numpy":
                raise
            self._from_numpy(obj, write)
            return
        self._cap = cap
        if _get_name(cap) == b"dltensor_versioned":
            m = _ManagedVersioned.from_address(_get_ptr(cap, b"dltensor_versioned"))
            t, flags = m.dl_tensor, m.flags
        else:
            t = _Managed.from_address(_get_ptr(cap, b"dltensor")).dl_tensor
        if write and flags & (READ_ONLY | IS_COPIED):
            raise ValueError(f"{name}: the array is {'read-only' if flags & READ_ONLY else 'a copy'}"
                             ", but this call writes it")
        self.device_type, self.device_id = t.device.device_type, t.device.device_id
        key = (t.dtype.code, t.dtype.bits)
        self._set_dtype(_DTYPES.get(key, "?") if t.dtype.lanes == 1 else "?",
                        _dtype_name(t.dtype.code, t.dtype.bits, t.dtype.lanes),
                        t.dtype.bits // 8)
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        if t.strides:
            self.strides = tuple(t.strides[i] for i in range(t.ndim))
        else:
            self.strides = _dense(self.shape)
        self.ptr = (t.data or 0) + t.byte_offset
        if self.ptr == 0 and all(self.shape):
            raise ValueError(f"{name}: NULL data")

    def _from_torch(self, t):
        """The view straight from a strided torch tensor of a known dtype on
        the CPU or a CUDA/ROCm device (what its DLPack export would say, at a
        fraction of the cost); False: take the DLPack path."""
        torch, dtypes = _torch_dtypes()
        dt = dtypes.get(t.dtype)  # real dtypes only: no conjugate bit to check
        if dt is None or t.layout is not torch.strided or t.is_neg():
            return False
        # is_cuda / is_cpu / get_device: a fifth of the cost of t.device.type
        if t.is_cuda:
            self.device_type = ROCM if torch.version.hip else CUDA
            self.device_id = t.get_device()
        elif t.is_cpu:
            self.device_type, self.device_id = CPU, 0
        else:
            return False
        self._set_dtype(dt[0], dt[2], dt[1])
        self.shape = tuple(t.shape)
        self.strides = t.stride()
        self.ptr = t.data_ptr()
        if self.ptr == 0 and all(self.shape):
            raise ValueError(f"{self.name}: NULL data")
        self._cap = None
        return True

    def _set_dtype(self, dt, dtname, itemsize):
        want, ok = KINDS[self.kind]
        if dt not in ok:
            raise TypeError(f"{self.name}: {dtname} is not accepted; use {want}")
        self.dtype, self.dtype_name, self.itemsize = dt, dtname, itemsize

    def _from_numpy(self, a, write):
        if write and not a.flags.writeable:
            raise ValueError(f"{self.name}: the array is read-only, but this call writes it")
        codes = {"float32": _lib.F32, "float16": _lib.F16, "int32": _lib.I32, "uint8": None,
                 "bfloat16": _lib.BF16, "int64": "int64", "float8_e4m3fn": _lib.E4M3}
        self._set_dtype(codes.get(a.dtype.name, "?"), a.dtype.name, a.dtype.itemsize)
        self.device_type, self.device_id = CPU, 0
        self.shape = tuple(a.shape)
        for st, n in zip(a.strides, a.shape):
            if st % a.dtype.itemsize and n > 1:
                raise ValueError(f"{self.name}: byte strides {a.strides} are not multiples of the "
                                 f"{a.dtype.itemsize}-byte element ({a.dtype.name})")
        self.strides = tuple(st // a.dtype.itemsize for st in a.strides)
        self.ptr = a.__array_interface__["data"][0]
        self._cap = None

    @property
    def on_gpu(self):
        return self.device_type in (CUDA, ROCM)

    def contiguous(self):
        """Row-major dense (dimensions of extent 1 may have any stride)."""
        return all(s == w for s, w, n in zip(self.strides, _dense(self.shape), self.shape) if n > 1)

    def need_rank(self, rank, layout):
        """ValueError naming this argument unless it has `rank` dimensions."""
        if len(self.shape) != rank:
            raise ValueError(f"{self.name}: expected a {rank}-D array {layout}, got "
                             f"{len(self.shape)}-D with shape {tuple(self.shape)}")

    def tensor(self, perm=None, shape4=None, layout="[B, H, S, D]"):
        """lpattn_tensor of this view; perm maps lpattn's B, H, S, D axes to
        this view's axes (a layout), shape4 pads fewer dimensions."""
        shape, strides = self.shape, self.strides
        if shape4 is not None and len(shape) <= 4:
            pad = 4 - len(shape)
            shape, strides = (1,) * pad + shape, (0,) * pad + strides
        if len(shape) != 4:
            self.need_rank(4, layout)
        if perm is not None and perm != _IDENTITY:
            a, b, c, d = perm
            shape = (shape[a], shape[b], shape[c], shape[d])
            strides = (strides[a], strides[b], strides[c], strides[d])
        dt = _lib.E4M3 if self.dtype is None else self.dtype
        if dt == "int64":
            raise TypeError(f"{self.name}: int64 is not accepted here; use int32")
        # packed in one go: a few times cheaper than the Structure's constructor
        return _lib.Tensor.from_buffer_copy(_TENSOR.pack(self.ptr, dt, *shape, *strides))


_IDENTITY = (0, 1, 2, 3)


def _dense(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))


def _export(obj, stream):
    """obj's DLPack capsule: versioned (with flags) when the producer can."""
    kw = {"stream": stream} if stream is not None else {}
    try:
        return obj.__dlpack__(max_version=(1, 0), **kw)
    except TypeError:
        pass
    try:
        return obj.__dlpack__(**kw)
    except TypeError:
        return obj.__dlpack__()


def _check_writable(obj, name):
    """ValueError for an array the call would write but must not."""
    kind = namespace_of(obj)
    bad = None
    if kind == "numpy" and not obj.flags.writeable:
        bad = "read-only (flags.writeable is False)"
    elif kind == "jax":
        bad = "a JAX array (immutable)"
    elif kind == "torch":
        import torch
        if obj.is_inference() and not torch.is_inference_mode_enabled():
            bad = "an inference tensor outside torch.inference_mode"
    if bad:
        raise ValueError(f"{name}: the array is {bad}, but this call writes it")


_NAMESPACES = {}  # type -> namespace_of's answer


def namespace_of(obj):
    """'torch', 'numpy', 'cupy', 'jax' or 'other' for an array object."""
    t = type(obj)
    ns = _NAMESPACES.get(t)
    if ns is None:
        mod = t.__module__.split(".")[0]
        ns = _NAMESPACES[t] = {"torch": "torch", "numpy": "numpy", "cupy": "cupy",
                               "jaxlib": "jax", "jax": "jax"}.get(mod, "other")
    return ns


def _jax_gpu(like):
    """The CUDA device index of a JAX array on a GPU, else None."""
    if namespace_of(like) != "jax":
        return None
    dev = next(iter(like.devices()))
    return dev.id if dev.platform == "gpu" else None


def empty(like, shape, dtype_name):
    """An uninitialised array of `like`'s kind and device. JAX arrays are
    immutable: a JAX array on a GPU gets a torch (or CuPy) buffer on its
    device, which finish() hands to JAX zero-copy."""
    kind = namespace_of(like)
    gpu = _jax_gpu(like)
    if gpu is not None:
        try:
            import torch
            return torch.empty(shape, dtype=getattr(torch, dtype_name), device=f"cuda:{gpu}")
        except ImportError:
            import cupy
            with cupy.cuda.Device(gpu):
                return cupy.empty(shape, dtype=dtype_name)
    if kind == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype_name), device=like.device)
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=dtype_name)
    import numpy as np
    if dtype_name == "bfloat16":
        import ml_dtypes
        return np.empty(shape, dtype=ml_dtypes.bfloat16)
    return np.empty(shape, dtype=dtype_name)


def finish(like, arr):
    """Hand an output made by empty() back in `like`'s kind (JAX on the CPU: copied;
    on a GPU: zero-copy)."""
    if namespace_of(like) == "jax":
        if _jax_gpu(like) is not None:  # written on the legacy default stream: see current_stream
            import jax.dlpack
            return jax.dlpack.from_dlpack(arr)
        import jax.numpy as jnp
        return jnp.asarray(arr)
    return arr


def current_stream(like, view):
    """The caller's current stream on `view`'s device, as an int (0 = default)."""
    if not view.on_gpu:
        return None
    kind = namespace_of(like)
    if kind == "torch":
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the same int, cheaper
        if raw is not None:
            return raw(view.device_id)
        return torch.cuda.current_stream(view.device_id).cuda_stream
    if kind == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    # JAX has no user-visible stream: its arrays are exported ready (DLPack),
    # lpattn runs on the legacy default stream (0), which torch/CuPy outputs
    # handed back to JAX are ordered after
    return 0
