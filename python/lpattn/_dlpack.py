"""Zero-copy views of any DLPack producer (torch, NumPy, CuPy, JAX) as
lpattn_tensor, and output arrays of the caller's kind."""
import ctypes

from . import _lib

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


_get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_get_ptr.restype, _get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

# DLPack (code, bits) -> lpattn dtype, and the names of errors.
_DTYPES = {(2, 32): _lib.F32, (2, 16): _lib.F16, (4, 16): _lib.BF16, (0, 32): _lib.I32,
           (1, 8): None}
NAMES = {_lib.F32: "float32", _lib.F16: "float16", _lib.BF16: "bfloat16", _lib.I32: "int32"}


class View:
    """A DLPack view of `obj`: device, dtype (lpattn's), shape, strides in
    elements, data pointer. Keeps the capsule (and so the buffer) alive."""

    def __init__(self, obj, name, stream=None):
        if namespace_of(obj) == "torch" and obj.requires_grad:
            obj = obj.detach()  # same memory; torch exports no tensor that requires grad
        self.obj, self.name = obj, name
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"{name}: expected a DLPack tensor (torch, NumPy, CuPy, JAX), "
                            f"got {type(obj).__name__}")
        try:
            cap = obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
        except TypeError:
            cap = obj.__dlpack__()
        except BufferError:  # NumPy exports neither read-only nor bfloat16 arrays: use its buffer
            if namespace_of(obj) != "numpy":
                raise
            self._from_numpy(obj)
            return
        self._cap = cap
        t = _Managed.from_address(_get_ptr(cap, b"dltensor")).dl_tensor
        self.device_type, self.device_id = t.device.device_type, t.device.device_id
        if t.dtype.lanes != 1 or (t.dtype.code, t.dtype.bits) not in _DTYPES:
            raise TypeError(f"{name}: dtype (code {t.dtype.code}, {t.dtype.bits} bits) is not "
                            "float32, float16, bfloat16, int32 or uint8")
        self.dtype = _DTYPES[(t.dtype.code, t.dtype.bits)]
        self.itemsize = t.dtype.bits // 8
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        if t.strides:
            self.strides = tuple(t.strides[i] for i in range(t.ndim))
        else:
            st, acc = [], 1
            for n in reversed(self.shape):
                st.append(acc)
                acc *= n
            self.strides = tuple(reversed(st))
        self.ptr = (t.data or 0) + t.byte_offset
        if self.ptr == 0 and all(self.shape):
            raise ValueError(f"{name}: NULL data")

    def _from_numpy(self, a):
        codes = {"f4": _lib.F32, "f2": _lib.F16, "i4": _lib.I32, "u1": None}
        key = "bf16" if a.dtype.name == "bfloat16" else a.dtype.str[1:]  # ml_dtypes
        codes["bf16"] = _lib.BF16
        if key not in codes:
            raise TypeError(f"{self.name}: dtype {a.dtype} is not float32, float16, int32 or uint8")
        self.dtype, self.itemsize = codes[key], a.dtype.itemsize
        self.device_type, self.device_id = CPU, 0
        self.shape = tuple(a.shape)
        self.strides = tuple(st // a.dtype.itemsize for st in a.strides)
        self.ptr = a.__array_interface__["data"][0]
        self._cap = None

    @property
    def on_gpu(self):
        return self.device_type in (CUDA, ROCM)

    def tensor(self, perm=None, shape4=None):
        """lpattn_tensor of this view; perm maps lpattn's B, H, S, D axes to
        this view's axes (a layout), shape4 pads fewer dimensions."""
        shape, strides = self.shape, self.strides
        if shape4 is not None:
            pad = 4 - len(shape)
            shape, strides = (1,) * pad + shape, (0,) * pad + strides
        if perm is not None:
            shape = tuple(shape[i] for i in perm)
            strides = tuple(strides[i] for i in perm)
        if len(shape) != 4:
            raise ValueError(f"{self.name}: expected 4 dimensions, got shape {self.shape}")
        dt = _lib.E4M3 if self.dtype is None else self.dtype
        return _lib.Tensor(self.ptr, dt, _lib.c_i64_4(*shape), _lib.c_i64_4(*strides))


def namespace_of(obj):
    """'torch', 'numpy', 'cupy', 'jax' or 'other' for an array object."""
    mod = type(obj).__module__.split(".")[0]
    return {"torch": "torch", "numpy": "numpy", "cupy": "cupy", "jaxlib": "jax",
            "jax": "jax"}.get(mod, "other")


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
        return torch.cuda.current_stream(view.device_id).cuda_stream
    if kind == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    # JAX has no user-visible stream: its arrays are exported ready (DLPack),
    # lpattn runs on the legacy default stream (0), which torch/CuPy outputs
    # handed back to JAX are ordered after
    return 0
