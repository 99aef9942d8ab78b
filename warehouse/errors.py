"""Errors raised by the warehouse.

BenchmakerError                 (benchmaker.engine.errors)
└── WarehouseError              anything the warehouse refuses or cannot do
    ├── BundleError             a run bundle file is missing or malformed; the message
    │                           is `path:line: field: problem (got VALUE)` where known
    ├── WarehouseLocked         another process held the file lock past the wait limit
    ├── MigrationError          a migration file failed; names the file
    └── ViewError               a view file failed; names the file
"""

from __future__ import annotations

from benchmaker.engine.errors import BenchmakerError


class WarehouseError(BenchmakerError):
    """Base of every error the warehouse raises on purpose."""


class BundleError(WarehouseError, ValueError):
    """A run bundle cannot be loaded: a missing manifest, a malformed JSON line, a value of
    the wrong type, a row of another run. Nothing of the run was written."""


class WarehouseLocked(WarehouseError):
    """The warehouse file stayed locked by another process for longer than the wait limit."""


class MigrationError(WarehouseError):
    """A migration file failed to apply; the message names the file."""


class ViewError(WarehouseError):
    """A view file failed to create; the message names the file."""
