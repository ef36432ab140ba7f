#!/usr/bin/env python3
"""name -> variant -> name round-trips; bad names are rejected."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifest  # noqa: E402
import names  # noqa: E402

fails = 0
example = "lpattn_cuda_attn_d128_f16"
v = names.parse(example)
want = manifest.Variant("cuda", "attn", 128, "f16")
fails += v != want or names.name(v) != example
for vv in manifest.variants("all") + [v, v._replace(head_dim=None), v._replace(dtype=None)]:
    fails += names.parse(names.name(vv)) != vv
for bad in ("lpattn_cpu_attn_f16_d128", "lpattn_cpu_attn_zz", "foo_cpu_attn", "lpattn_cpu_attn_f16_bf16",
            "lpattn_cpu_paged", "lpattn_cpu_attn_d128_f16_nvfp4_causal"):
    try:
        names.parse(bad)
        fails += 1
    except ValueError:
        pass
print("codegen names: %s" % ("ok" if not fails else "%d failures" % fails))
sys.exit(1 if fails else 0)
