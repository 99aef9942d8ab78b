"""A package's public names imported on first access (PEP 562), so that importing one
submodule of a package does not import all of them (every CLI command paid
for the engine, aiohttp, httpx and DuckDB through `benchmaker/__init__.py`).

    _EXPORTS = {"BenchRunner": "benchmaker.engine.runner", ...}
    __getattr__ = lazy_getattr(__name__, _EXPORTS)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: a name of `exports` (name -> module) is
    imported from its module on first access and kept in the package's namespace;
    any other name raises AttributeError as a module does."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
