"""Runs test modules of python/tests (arguments: their names; none: every
test_*.py here) with unittest and
prints 'N passed, N failed, N skipped'; exit 77 (meson's skip) when every test
skipped, e.g. test_torch without torch."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.dirname(here)]

def main():
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("SKIP: NumPy is not installed")
        sys.exit(77)
    names = sys.argv[1:] or sorted(f[:-3] for f in os.listdir(here) if f.startswith("test_") and f.endswith(".py"))
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(1 if failed else 77 if result.testsRun and skipped == result.testsRun else 0)


if __name__ == "__main__":  # spawned workers (test_distributed) import this file again
    main()
