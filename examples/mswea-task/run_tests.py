"""Run tests/ with unittest and print one line per test (`ok` / `FAIL` / `ERROR` and the
test id) and a final `passed N failed M`: output that is the same on every run and in
every directory (no timings, no paths), so replayed observations compare byte for byte.
Exit code 0 when every test passed, else 1."""

import sys
import unittest


def ids(s):
    for t in s:
        yield from (ids(t) if isinstance(t, unittest.TestSuite) else [t.id()])


suite = unittest.defaultTestLoader.discover("tests", top_level_dir=".")
names = sorted(ids(suite))  # before run(): a suite drops its tests as they finish
result = unittest.TestResult()
suite.run(result)
bad = {t.id(): "FAIL" for t, _ in result.failures} | {t.id(): "ERROR" for t, _ in result.errors}
for name in names:
    print(f"{bad.get(name, 'ok'):5} {name}")
print(f"passed {len(names) - len(bad)} failed {len(bad)}")
sys.exit(1 if bad else 0)
