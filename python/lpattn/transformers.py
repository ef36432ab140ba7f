"""Hugging Face transformers integration: an attention implementation named
"lpattn" (transformers' AttentionInterface) and a Cache whose layers keep
K/V in lpattn.KVPool pools (SPEC 9: pages quantized as they complete).

    import lpattn.transformers as lt
    model = LlamaForCausalLM.from_pretrained(..., attn_implementation="lpattn")
    cache = lt.LpattnCache(model.config, max_cache_len=4096, precision="nvfp4")
    out = model.generate(input_ids, cache=cache, max_new_tokens=64)  # past_key_values= before 5.x

With an LpattnCache each layer's new tokens are appended to its pool and
attended there, causally, to the cached ones and each other (KVPool.prefill
on host backends; append + decode in page-aligned chunks on GPUs). Without
one (use_cache=False, or another Cache) "lpattn" attends to the K/V it gets
with lpattn.torch.attention (causal, bottom-right aligned) at the precision
given to register ("high", exact, for the name "lpattn").

Precision is opt-in by name: LpattnCache(precision=...) takes KVPool's
("high", "fp8", "nvfp4", "mxfp4", "thrift"; "high" by default, its pages in
the model's dtype). Not supported (a clear error, nothing computed): padding
masks (batches of prompts of different lengths), custom or packed-sequence
masks, sliding windows, dropout, beam search (reorder_cache) and crop.
Needs transformers >= 5 (written and tested against 5.24) and PyTorch."""
import inspect

import torch
import transformers as _hf

if int(_hf.__version__.split(".")[0]) < 5:
    raise ImportError(f"lpattn.transformers needs transformers >= 5 (its cache-layer API); "
                      f"found {_hf.__version__}")

from transformers import AttentionInterface  # noqa: E402
from transformers.cache_utils import Cache, CacheLayerMixin  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface  # noqa: E402

from ._kv import KVPool  # noqa: E402
from .torch import attention as _torch_attention  # noqa: E402

__all__ = ["LpattnCache", "LpattnLayer", "register", "attention_forward", "cache_kwarg"]

_HIGH_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_TAG = "_lpattn_layer"


def cache_kwarg(model):
    """The keyword model.generate() takes a Cache by: "cache" (transformers
    5.x, where "past_key_values" is deprecated) or "past_key_values"."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class LpattnLayer(CacheLayerMixin):
    """One decoder layer's cache: a KVPool of batch_size sequences of up to
    max_cache_len tokens (made on the first update, with the K/V's dtype and
    device). update() records the new K/V and returns them as they are; the
    "lpattn" attention appends them to the pool and attends there."""

    is_compileable = False
    is_sliding = False
    is_croppable = False
    supports_early_init = True

    def __init__(self, max_cache_len, num_q_heads, *, precision="high", page_size=64,
                 backend="auto", use_prefill=None, pool_kwargs=None):
        super().__init__()
        self.max_cache_len = int(max_cache_len)
        self.num_q_heads = int(num_q_heads)
        self.precision, self.page_size, self.backend = precision, int(page_size), backend
        self.use_prefill = use_prefill  # None: KVPool.prefill where the backend has it
        self.pool_kwargs = dict(pool_kwargs or {})
        self.pool = None
        self.length = 0    # tokens held (after update: including the pending ones)
        self._pending = None  # (k, v, length before) between update and attention

    def lazy_initialization(self, key_states, value_states):
        B, hkv, _, d = key_states.shape
        if key_states.dtype not in _HIGH_DTYPES:
            raise TypeError(f"LpattnCache: K/V dtype {key_states.dtype} is not one of "
                            "float32, float16, bfloat16")
        self.device, self.dtype = key_states.device, key_states.dtype
        self.batch_size, self.num_kv_heads, self.head_dim = B, hkv, d
        self.head_dim_v = value_states.shape[-1]
        pages = -(-self.max_cache_len // self.page_size)
        kw = {"high_dtype": _HIGH_DTYPES[self.dtype], **self.pool_kwargs}
        if self.head_dim_v != d:
            kw["head_dim_v"] = self.head_dim_v
        self.pool = KVPool(B * pages, B, hkv, self.num_q_heads, d, precision=self.precision,
                           page_size=self.page_size, like=key_states, backend=self.backend, **kw)
        i32 = dict(dtype=torch.int32, device=self.device)
        self.slots = torch.arange(B, **i32)
        self.page_table = torch.arange(B * pages, **i32).reshape(B, pages)
        if self.use_prefill is None:
            self.use_prefill = self.pool.backend in ("ref", "cpu")
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self._pending is not None:
            raise RuntimeError(
                "LpattnCache: the previous update of this layer was never attended; the model must "
                "run with attn_implementation=\"lpattn\" (import lpattn.transformers registers it)")
        B, n = key_states.shape[0], key_states.shape[-2]
        if B != self.batch_size:
            raise ValueError(f"LpattnCache: batch size {B}, the cache was made for "
                             f"{self.batch_size} (one LpattnCache per batch)")
        if self.length + n > self.max_cache_len:
            raise ValueError(f"LpattnCache: {self.length} + {n} tokens exceed max_cache_len = "
                             f"{self.max_cache_len}")
        self._pending = (key_states, value_states, self.length)
        self.length += n
        setattr(key_states, _TAG, self)  # how the attention function finds this layer
        return key_states, value_states

    def attend(self, q, k, v, sm_scale, softcap=None):
        """Append the pending k, v [B, Hkv, n, D] and attend q [B, Hq, n, D]
        to the cache: out [B, Hq, n, Dv]."""
        pk, pv, before = self._pending
        self._pending = None
        if k is not pk or v is not pv:
            raise RuntimeError("LpattnCache: the attention got other K/V than the cache "
                               "returned (the model changed them after cache.update)")
        q, k, v = q.detach(), k.detach(), v.detach()
        B, n = q.shape[0], q.shape[2]
        kw = dict(sm_scale=sm_scale, softcap=softcap)
        lens = torch.full((B,), before, dtype=torch.int32, device=self.device)
        if self.use_prefill:
            return self.pool.prefill(q, k, v, self.slots, lens, self.page_table,
                                     max_length=before, **kw)
        # GPU backends: chunks that end on page boundaries, each appended and
        # then decoded (rows of the newest tiles; bitwise what prefill gives).
        outs, a, P = [], 0, self.page_size
        while a < n:
            c = min(n - a, P - (before + a) % P)
            qc, kc, vc = (x[:, :, a:a + c].contiguous() for x in (q, k, v))
            at = before + a
            lens_at = lens if a == 0 else torch.full_like(lens, at)
            self.pool.append(kc, vc, self.slots, lens_at, self.page_table, q=qc, max_length=at)
            outs.append(self.pool.decode(qc, self.slots, torch.full_like(lens, at + c),
                                         self.page_table, max_length=at + c, **kw))
            a += c
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

    def get_mask_sizes(self, query_length):
        return self.length + query_length, 0

    def get_seq_length(self):
        return self.length

    def get_max_length(self):
        return self.max_cache_len

    def reset(self):
        self.length, self._pending = 0, None  # length 0 restarts each slot (KVPool.append)

    def offload(self):
        raise NotImplementedError("LpattnCache: offloading is not supported")

    def prefetch(self):
        pass

    def reorder_cache(self, beam_idx):
        raise NotImplementedError("LpattnCache: beam search (reorder_cache) is not supported")

    def crop(self, tokens_to_remove):
        raise NotImplementedError("LpattnCache: crop is not supported")

    def batch_repeat_interleave(self, repeats):
        raise NotImplementedError("LpattnCache: batch_repeat_interleave is not supported")

    def batch_select_indices(self, indices):
        raise NotImplementedError("LpattnCache: batch_select_indices is not supported")


class LpattnCache(Cache):
    """A Cache of LpattnLayer (one KVPool per decoder layer) for a batch of
    sequences that start together and grow together (no padding), of up to
    max_cache_len tokens. config: the model's (its text config gives the
    layer count and query heads). precision: KVPool's, by name ("high" by
    default: pages in the model's dtype). page_size: a multiple of 32 in
    [32, 256]. backend: "auto", "cpu", "ref", "cuda", ... use_prefill: None
    (KVPool.prefill on host backends, append + decode on GPUs), or force one
    path. Other keywords go to KVPool (thrift_low, pasa, check_finite, ...)."""

    def __init__(self, config, max_cache_len, *, precision="high", page_size=64,
                 backend="auto", use_prefill=None, **pool_kwargs):
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") \
            else config
        types = getattr(text, "layer_types", None)
        if types and any(t != "full_attention" for t in types):
            raise NotImplementedError(f"LpattnCache: layer types {sorted(set(types))}; only "
                                      "full attention layers are supported")
        layers = [LpattnLayer(max_cache_len, text.num_attention_heads, precision=precision,
                              page_size=page_size, backend=backend, use_prefill=use_prefill,
                              pool_kwargs=pool_kwargs)
                  for _ in range(text.num_hidden_layers)]
        super().__init__(layers=layers)

    def close(self):
        """Release the pools (their memory goes with the cache)."""
        for layer in self.layers:
            if layer.pool is not None:
                layer.pool.close()


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, *, precision="high", backend="auto", **kwargs):
    """transformers' attention function signature: query [B, Hq, Sq, D],
    key/value [B, Hkv, Sk, D]; returns (out [B, Sq, Hq, Dv], None)."""
    if dropout:
        raise NotImplementedError("lpattn attention: dropout is not supported")
    if kwargs.get("sliding_window") is not None:
        raise NotImplementedError("lpattn attention: sliding windows are not supported here")
    if kwargs.get("output_attentions"):
        raise NotImplementedError("lpattn attention: output_attentions is not supported")
    if attention_mask is not None:
        raise NotImplementedError("lpattn attention: explicit attention masks are not supported "
                                  "(lpattn attends causally; no padding)")
    softcap = kwargs.get("softcap")
    layer = key.__dict__.pop(_TAG, None)
    if layer is not None:
        out = layer.attend(query, key, value, scaling, softcap)
    else:
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        out = _torch_attention(query, key, value, causal=bool(causal), precision=precision,
                               sm_scale=scaling, backend=backend, softcap=softcap)
    return out.transpose(1, 2), None


def _mask(*, attention_mask=None, allow_is_causal_skip=True, **kwargs):
    """The mask function of "lpattn": None (lpattn applies the causal mask),
    or an error where the mask would say more (padding, custom masks)."""
    if not allow_is_causal_skip:
        raise NotImplementedError("lpattn attention: this mask (custom, packed sequences or "
                                  "block overlays) is not supported; lpattn attends causally")
    if attention_mask is not None and not bool(attention_mask.all()):
        raise NotImplementedError("lpattn attention: padding is not supported (give prompts of "
                                  "equal length, or one at a time)")
    return None


def register(name="lpattn", *, precision="high", backend="auto"):
    """Register attention implementation `name` (attn_implementation=name):
    with an LpattnCache it attends in the cache's pools; otherwise at
    `precision` (by name, "high" exact by default) with lpattn.torch.attention."""
    def fn(module, query, key, value, attention_mask, **kw):
        return attention_forward(module, query, key, value, attention_mask,
                                 precision=precision, backend=backend, **kw)
    fn.__name__ = f"lpattn_attention_{name}"
    AttentionInterface.register(name, fn)
    AttentionMaskInterface.register(name, _mask)
    return fn


register()
