#!/usr/bin/env python3
"""Refactors of GPU kernels that must not change the machine code: compare SASS.

  sass_compare.py OLD_BUILD NEW_BUILD [--match REGEX] [--show N]

For every object of a CUDA unit whose name matches REGEX (default: the
attention and backward units, `_(attn|bwd)_d`) in both meson build dirs,
each kernel's SASS (cuobjdump -sass) and resources (cuobjdump -res-usage:
REG, STACK, SHARED (static), LOCAL) are compared. The SASS is normalized:
addresses and encodings dropped, register, predicate and barrier numbers
and branch targets replaced by their class, so a register renaming compares
equal. Per kernel it prints the instruction count old/new, the changed
lines of the normalized listing (difflib), whether the opcode histograms
match, the resources and the STL/LDL (spill) counts; `same` when the
normalized listing is the same. Exit 1 if any kernel differs in anything.
Dynamic shared memory is a launch argument (the kernels' cfg structs),
not in the image: compare those by reading the code.

Build both sides first, e.g. (sm_90a only; ~2 min a unit on 2 cores):
  meson setup /tmp/A -Dcuda=enabled -Dnvidia_archs=90a -Dcpu=disabled --buildtype=release
  ninja -C /tmp/A $(ninja -C /tmp/A -t targets all | grep -E '_(attn|bwd)_d.*\\.o:' | cut -d: -f1)
CUOBJDUMP (env) names the tool; default: cuobjdump on PATH, else triton's.
"""
import collections
import difflib
import glob
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'bench', 'cuda'))
import sass_loop  # noqa: E402 (the one cuobjdump -sass parser)

TRITON = '/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/triton/backends/nvidia/bin/cuobjdump'


def tool():
    return os.environ.get('CUOBJDUMP') or shutil.which('cuobjdump') or TRITON


def run(*args):
    return subprocess.run([tool(), *args], check=True, capture_output=True, text=True).stdout


NORM = [(re.compile(r'\bU?R(\d+|Z)\b'), 'R'), (re.compile(r'\bU?P[0-6T]\b'), 'P'),
        (re.compile(r'\bB\d+\b'), 'B'), (re.compile(r'0x[0-9a-f]+'), 'X'),
        (re.compile(r'\s+'), ' ')]


def sass(obj):
    """kernel -> list of normalized instructions (bench/cuda/sass_loop.py's parse)"""
    out = {}
    for kernel, listing in sass_loop.functions(run('-sass', obj)).items():
        norm = []
        for _, ins in listing:
            for rx, rep in NORM:
                ins = rx.sub(rep, ins)
            norm.append(ins.strip())
        out[kernel] = norm
    return out


def res(obj):
    out, cur = {}, None
    for line in run('-res-usage', obj).splitlines():
        m = re.match(r'\s*Function (\S+):', line)
        if m:
            cur = m.group(1)
        elif cur and 'REG:' in line:
            out[cur] = dict(re.findall(r'(REG|STACK|SHARED|LOCAL):(\d+)', line))
            cur = None
    return out


def opcode(ins):
    words = ins.split()
    return words[1] if words and words[0].startswith('@') and len(words) > 1 else (words[0] if words else '')


def main(argv):
    args = [a for a in argv if not a.startswith('--')]
    match = re.compile(argv[argv.index('--match') + 1] if '--match' in argv else r'_(attn|bwd)_d')
    show = int(argv[argv.index('--show') + 1]) if '--show' in argv else 0
    if '--match' in argv:
        args.remove(argv[argv.index('--match') + 1])
    if '--show' in argv:
        args.remove(argv[argv.index('--show') + 1])
    if len(args) != 2:
        sys.exit(__doc__)
    old, new = args
    bad = 0
    print(f'{"kernel":46} {"instr old/new":>15} {"diff":>5} {"hist":>4} {"REG":>7} {"STACK":>7} '
          f'{"SHARED":>9} {"LOCAL":>5} {"STL/LDL":>9}')
    for po in sorted(glob.glob(os.path.join(old, '**', '*.o'), recursive=True)):
        name = os.path.basename(po)
        if not match.search(name) or not name.endswith('.cu.o'):
            continue
        pn = glob.glob(os.path.join(new, '**', name), recursive=True)
        if not pn:
            print(f'{name}: missing in {new}')
            bad = 1
            continue
        so, sn, ro, rn = sass(po), sass(pn[0]), res(po), res(pn[0])
        for k in sorted(set(so) | set(sn)):
            a, b = so.get(k, []), sn.get(k, [])
            d = [l for l in difflib.unified_diff(a, b, lineterm='', n=0) if l[:1] in '+-' and l[:3] not in ('+++', '---')]
            ha, hb = collections.Counter(map(opcode, a)), collections.Counter(map(opcode, b))
            ra, rb = ro.get(k, {}), rn.get(k, {})
            sp = lambda s: sum(1 for i in s if opcode(i).startswith(('STL', 'LDL')))
            same = a == b and ra == rb
            bad |= not same
            pair = lambda f: f'{ra.get(f, "-")}/{rb.get(f, "-")}' if ra.get(f) != rb.get(f) else ra.get(f, '-')
            print(f'{k:46} {len(a):>7}/{len(b):<7} {len(d):>5} {"=" if ha == hb else "DIFF":>4} {pair("REG"):>7} '
                  f'{pair("STACK"):>7} {pair("SHARED"):>9} {pair("LOCAL"):>5} {sp(a):>4}/{sp(b):<4}'
                  + ('  same' if same else ''))
            if d and show:
                print('\n'.join('    ' + l for l in d[:show]))
                for op in sorted(set(ha) | set(hb)):
                    if ha[op] != hb[op]:
                        print(f'    {op}: {ha[op]} -> {hb[op]}')
    return bad


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
