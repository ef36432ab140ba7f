#!/usr/bin/env python3
"""Every module of python/lpattn/ is in python/meson.build's py_sources, so
`pip install .` installs the whole package (a missing _plan.py once broke
`import lpattn` from the wheel while the tests, run from the tree, passed)."""
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
listed = set(re.findall(r"'lpattn/([\w.]+\.py)'", open(os.path.join(here, "meson.build")).read()))
present = {f for f in os.listdir(os.path.join(here, "lpattn")) if f.endswith(".py")}
missing, stale = sorted(present - listed), sorted(listed - present)
for f in missing:
    print(f"python/lpattn/{f} is not in python/meson.build's py_sources")
for f in stale:
    print(f"python/meson.build lists lpattn/{f}, which does not exist")
print(f"{len(present)} modules, {len(listed)} listed")
sys.exit(1 if missing or stale else 0)
