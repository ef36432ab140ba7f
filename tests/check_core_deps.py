#!/usr/bin/env python3
"""Fail (exit 1) when core/ depends on a backend or in a circle (issue 30).

core/ sits between include/lpattn.h and the backends (docs/ARCHITECTURE.md):
it may include its own headers, include/ and the C library, never a header of
backends/. Two graphs must have no circle:
  - includes: core/*.c and core/*.h -> the core headers they #include;
  - modules: a module is a stem (api_kv = api_kv.c + api_kv.h); module A uses
    module B when A's .c or .h names a function or object that B's .c defines
    (internal.h declares functions of many modules, so the include lines alone
    do not show who calls whom). Calls through the backend vtable are not
    edges: the backends sit below core.
Usage: check_core_deps.py [repository root]; prints the graphs with -v.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") \
    else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = os.path.join(ROOT, "core")
VERBOSE = "-v" in sys.argv

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
# A definition at file scope: a line at column 0 that is not static, ends a
# declarator with "name(" and is followed by "{" (same or a later line).
DEF_FN = re.compile(r'^(?!static\b|typedef\b|extern\b|#|\s)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*?\)\s*\{',
                    re.M | re.S)
DEF_OBJ = re.compile(r'^(?!static\b|typedef\b|extern\b|#|\s)(?:const\s+)?[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*=',
                     re.M)
IDENT = re.compile(r'\b[A-Za-z_]\w*\b')
INLINE_FN = re.compile(r'^static\s+inline\b[^;{(]*?\b([A-Za-z_]\w*)\s*\(', re.M)


def header_code(src):
    """The bodies of a header's functions and its macro definitions."""
    src = re.sub(r'#\s*ifdef\s+__cplusplus.*?#\s*endif', ' ', src, flags=re.S)  # extern "C" { }
    out, depth = [], 0
    for line in src.splitlines():
        if depth == 0 and re.match(r'\s*#\s*define\b', line):
            out.append(line.split(None, 2)[-1] if line.count(" ") >= 2 else "")
            continue
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif depth > 0:
                out.append(ch)
        out.append("\n")
    return "".join(out)


def strip(text):
    """Source without comments and string/char literals."""
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', ' ', text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan), and
    self-loops."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v), on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    files = sorted(f for f in os.listdir(CORE) if f.endswith((".c", ".h")))
    text = {f: open(os.path.join(CORE, f), encoding="utf-8").read() for f in files}
    backend_headers = set()
    for dirpath, _, names in os.walk(os.path.join(ROOT, "backends")):
        backend_headers.update(n for n in names if n.endswith((".h", ".hpp", ".cuh", ".inc")))
    core_headers = {f for f in files if f.endswith(".h")}
    public = set(os.listdir(os.path.join(ROOT, "include")))
    errors = []

    # 1. includes: no backend header, no circle among core's own headers
    inc = {f: set() for f in files}
    for f in files:
        for kind, name in INCLUDE.findall(text[f]):
            base = os.path.basename(name)
            if "backends/" in name or (base in backend_headers and base not in core_headers
                                        and base not in public):
                errors.append(f"core/{f} includes the backend header {name}")
            elif kind == '"' and base in core_headers:
                inc[f].add(base)
    for comp in cycles(inc):
        errors.append("include circle: " + " -> ".join(comp))

    # 2. modules: who defines what, who names it
    stem = lambda f: f.rsplit(".", 1)[0]
    defined = {}
    for f in files:
        if f.endswith(".c"):
            src = strip(text[f])
            for name in DEF_FN.findall(src) + DEF_OBJ.findall(src):
                defined.setdefault(name, stem(f))
    inline = {}  # a header's own code: its static inline functions (an edge
    for f in core_headers:  # only where the header is included)
        for name in INLINE_FN.findall(strip(text[f])):
            inline.setdefault(name, f)
    uses = {}
    why = {}
    for f in files:
        a = stem(f)
        uses.setdefault(a, set())
        # a header's prototypes only declare: count what its code (inline
        # bodies, macros) names
        code = strip(text[f]) if f.endswith(".c") else header_code(strip(text[f]))
        for name in set(IDENT.findall(code)):
            b = defined.get(name)
            if not b and name in inline and inline[name] in inc[f]:
                b = stem(inline[name])
            if b and b != a:
                uses[a].add(b)
                why.setdefault((a, b), name)
    for comp in cycles(uses):
        edges = [f"{a} -> {b} ({why[(a, b)]})" for a in comp for b in sorted(uses[a]) if b in comp]
        errors.append("module circle among " + ", ".join(comp) + ": " + "; ".join(edges))

    if VERBOSE:
        for a in sorted(uses):
            print(f"{a}: uses {', '.join(f'{b} ({why[(a, b)]})' for b in sorted(uses[a])) or '-'}")
    for e in errors:
        print("check_core_deps: " + e, file=sys.stderr)
    if not errors:
        print(f"check_core_deps: {len(files)} files, {len(uses)} modules: no backend include, no circle")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
