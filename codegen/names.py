"""Kernel names: a variant's fixed axes spelled out, parsable back.

    lpattn_<backend>_<op>[_d<D>][_<dtype>]

An omitted token means the axis is chosen at run time. Tokens of different
axes never collide, so parse() needs no position bookkeeping beyond order.
"""
from manifest import Variant, OPS, DTYPES, BACKENDS


def name(v):
    parts = ["lpattn", v.backend, v.op]
    if v.head_dim is not None:
        parts.append("d%d" % v.head_dim)
    if v.dtype is not None:
        parts.append(v.dtype)
    return "_".join(parts)


def parse(s):
    toks = s.split("_")
    if len(toks) < 3 or toks[0] != "lpattn" or toks[1] not in BACKENDS or toks[2] not in OPS:
        raise ValueError("not a kernel name: %r" % s)
    fields = {"backend": toks[1], "op": toks[2]}
    # Each axis may appear at most once and in the canonical order.
    order = ["head_dim", "dtype"]
    pos = 0
    for t in toks[3:]:
        if t.startswith("d") and t[1:].isdigit():
            field, val = "head_dim", int(t[1:])
        elif t in DTYPES:
            field, val = "dtype", t
        else:
            raise ValueError("unknown token %r in %r" % (t, s))
        idx = order.index(field)
        if idx < pos:
            raise ValueError("token %r out of order in %r" % (t, s))
        pos = idx + 1
        fields[field] = val
    return Variant(**fields)
