"""lpattn: low-precision attention kernels (FP4/FP8/f16) for Python.

Tensors cross zero-copy through DLPack (torch, NumPy, CuPy, JAX);
results come back in the caller's kind, on the caller's current CUDA stream.
Failures raise LpattnError with the C status and a precise detail.

    import lpattn
    out = lpattn.attention(q, k, v, causal=True)   # exact ("high") by default
    out, lse = lpattn.attention(q, k, v, causal=True, precision="nvfp4", return_lse=True)
    out = lpattn.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=True)  # ragged

Serving: lpattn.KVPool (the paged pool; its precision is a required
argument) and lpattn.serving (FlashInfer-style page tables). Plans do a
layout's host work once and run with pointer updates only (CUDA-graph
capturable): KVPool.plan_decode(...).run(q, out), lpattn.attention_plan(...).

PyTorch: `import lpattn.torch` registers the ops with torch.library (they
trace under torch.compile) and offers scaled_dot_product_attention."""
from . import _lib
from ._api import attention, attention_backward, merge_states, pasa_beta, thrift_k
from ._quant import QuantizedTensor, dequantize, quantize
from ._context import available_backends
from ._kv import KVPool, pool_bytes
from ._plan import AttentionPlan, DecodePlan, attention_plan
from ._varlen import attention_varlen
from .errors import LpattnError, UnsupportedError

__version__ = _lib.lib.lpattn_version_string().decode()
library_path = _lib.path

__all__ = ["attention", "attention_varlen", "attention_backward", "merge_states", "quantize", "dequantize", "QuantizedTensor", "thrift_k",
           "pasa_beta", "KVPool", "pool_bytes", "attention_plan", "AttentionPlan", "DecodePlan",
           "LpattnError", "UnsupportedError",
           "available_backends", "last_error", "__version__"]


def last_error():
    """lpattn_last_error() of this thread: the detail of the last failed call."""
    return (_lib.lib.lpattn_last_error() or b"").decode(errors="replace")
