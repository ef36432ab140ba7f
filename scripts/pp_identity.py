#!/usr/bin/env python3
"""Refactors that must not change a kernel: compare what the compiler sees.

  pp_identity.py snap BUILD_DIR OUT_DIR   preprocess every backend source of a
                                          configured meson build (its compile
                                          commands with -E) into OUT_DIR
  pp_identity.py diff OLD_DIR NEW_DIR [--map FILE]
                                          exit 1 unless each unit's token
                                          stream is the same; print the first
                                          differing tokens of each. FILE: lines
                                          "old new", tokens of OLD renamed
                                          first (a rename is then no change)

Line markers and whitespace are dropped, so moving code between files or
re-indenting it compares equal; anything that reaches the compiler
differently does not. Limit: nvcc -E on a multi-arch command preprocesses
only the first arch's device pass (sm_80 here), so sm_90a/sm_120a-only and
host-only branches are not compared by this script; for those run every
pass that `nvcc --dryrun` lists. Issue 30's move of the GPU kernels from
templates/ into plain headers was checked both ways (all 118 passes of the
CUDA units the same).
"""
import hashlib
import os
import re
import shlex
import subprocess
import sys

TOK = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|\w+|\S')


def units(build):
    out = subprocess.run(["ninja", "-C", build, "-t", "commands"], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        if " -c " not in line:
            continue
        argv = shlex.split(line)
        src = next((a for a in argv if re.search(r"/backends/.*\.(cu|hip|cc|c)$", a)), None)
        if src and " -o " in line:
            yield src, argv


def pp_argv(argv, dst):
    out, skip = [], 0
    for i, a in enumerate(argv):
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MF", "-MQ", "-MT"):
            skip = 1
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    return out + ["-E", "-o", dst]


def tokens(path):
    text = "\n".join(l for l in open(path, errors="replace").read().splitlines()
                     if not l.startswith("#"))
    return TOK.findall(text)


def snap(build, dst):
    os.makedirs(dst, exist_ok=True)
    n = 0
    for src, argv in units(build):
        name = re.sub(r"[^\w.]+", "_", src.split("/backends/", 1)[1])
        raw = os.path.join(dst, name + ".i")
        r = subprocess.run(pp_argv(argv, raw), cwd=build, capture_output=True, text=True)
        if r.returncode:
            print("preprocess failed:", src, r.stderr[-2000:])
            return 1
        toks = tokens(raw)
        with open(os.path.join(dst, name + ".tok"), "w") as f:
            f.write("\n".join(toks))
        os.remove(raw)
        print("%s %s %d" % (hashlib.sha256("\n".join(toks).encode()).hexdigest()[:16], name, len(toks)))
        n += 1
    print("%d units" % n)
    return 0


def diff(a, b, ren=None):
    names_a = {f for f in os.listdir(a) if f.endswith(".tok")}
    names_b = {f for f in os.listdir(b) if f.endswith(".tok")}
    bad = 0
    for n in sorted(names_a ^ names_b):
        print("only in %s: %s" % (a if n in names_a else b, n))
        bad = 1
    for n in sorted(names_a & names_b):
        ta = open(os.path.join(a, n)).read().split("\n")
        if ren:
            ta = [ren.get(t, t) for t in ta]
        tb = open(os.path.join(b, n)).read().split("\n")
        if ta == tb:
            print("same %s (%d tokens)" % (n, len(ta)))
            continue
        bad = 1
        i = next(i for i in range(min(len(ta), len(tb)) + 1)
                 if i == min(len(ta), len(tb)) or ta[i] != tb[i])
        print("DIFF %s at token %d:\n  old: %s\n  new: %s" % (
            n, i, " ".join(ta[max(0, i - 20):i + 30]), " ".join(tb[max(0, i - 20):i + 30])))
    return bad


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "snap":
        sys.exit(snap(sys.argv[2], sys.argv[3]))
    if len(sys.argv) in (4, 6) and sys.argv[1] == "diff":
        ren = None
        if len(sys.argv) == 6 and sys.argv[4] == "--map":
            ren = dict(l.split() for l in open(sys.argv[5]) if l.strip() and not l.startswith("#"))
        sys.exit(diff(sys.argv[2], sys.argv[3], ren))
    sys.exit(__doc__)
