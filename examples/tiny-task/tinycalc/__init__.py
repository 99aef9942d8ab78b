"""tinycalc: a tiny package with one bug, the example task of benchmaker's replay harness."""

from tinycalc.ranges import inclusive_range

__all__ = ["inclusive_range"]
