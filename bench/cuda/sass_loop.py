#!/usr/bin/env python3
"""Static SASS size of a CUDA kernel and of its tile loop: the smallest loop
(backward branch) around the first instruction whose text contains MARK
(default MOVM: the decode's P^T transposes, only in its low-tile loop; HMMA
for the prefill and high-tile loops), with the loop's opcode counts. The
figures of bench/RESULTS_cuda_h100.md "Session 6" come from this on objects
built for sm_90a (`meson setup B -Dcuda=enabled -Dnvidia_archs=90a
-Dcpu=disabled --buildtype=release`).

Usage: sass_loop.py OBJECT.o KERNEL [KERNEL ...] [--mark MOVM|HMMA|...]
(cuobjdump and nvdisasm on PATH; PyPI has them as nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm.)
"""
import collections
import re
import subprocess
import sys


def functions(sass):
    cur, out = None, {}
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def loop_of(ins, mark):
    first = next(a for a, t in ins if mark in t)
    best = None
    for a, t in ins:
        m = re.search(r"BRA\s+(?:!?U?P\w+, )?(0x[0-9a-f]+)", t)
        if m and "BRA.DIV" not in t:
            target = int(m.group(1), 16)
            if target <= first <= a and (best is None or a - target < best[1] - best[0]):
                best = (target, a)
    return [t for a, t in ins if best[0] <= a <= best[1]]


def main():
    args = sys.argv[1:]
    mark = "MOVM"
    if "--mark" in args:
        i = args.index("--mark")
        mark = args[i + 1]
        del args[i:i + 2]
    obj, kernels = args[0], args[1:]
    sass = subprocess.run(["cuobjdump", "-sass", obj], capture_output=True, text=True, check=True).stdout
    fns = functions(sass)
    for k in kernels:
        ins = fns[k]
        body = loop_of(ins, mark)
        ops = collections.Counter(opcode(t) for t in body)
        print(f"{k}: {len(ins)} instructions, tile loop {len(body)}: "
              + " ".join(f"{o}:{n}" for o, n in ops.most_common(12)))


if __name__ == "__main__":
    main()
