"""The unit a converter reads: `FileContext` (a file's path, bytes, sha256, leniency and
file-level skip counter) and `FirstRecords` (what format detection already parsed of it).

Skip reasons: every converter counts what it did not carry into the trajectory in
`Trajectory.skipped` under a short key (e.g. `thinking_level_change`,
`arguments_raw_synthesized`); file-level skips (lenient mode) go to
`FileContext.skipped`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from benchmaker.trajectories.errors import ConvertError


@dataclass
class FileContext:
    """One input unit being converted: `path` as given, its bytes' sha256, the bytes,
    whether bad records are skipped (`lenient`) and the file-level skip counter."""

    path: str
    sha256: str
    data: bytes
    lenient: bool = False
    skipped: Counter[str] = field(default_factory=Counter)
    first_records: FirstRecords | None = None
    """What format detection parsed of `data` (keeping_first_records), for iter_jsonl to
    use instead of parsing those lines (and checking the bytes) again; taken by its first pass."""

    def error(self, line: int | None, fld: str | None, problem: str, *got: Any) -> ConvertError:
        """A ConvertError naming this file (`got` optional: the offending value)."""
        return ConvertError(self.path, line, fld, problem, *got)

    def text(self) -> str:
        """The file decoded as UTF-8. Raises ConvertError naming the line of the first
        invalid byte."""
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = self.data.count(b"\n", 0, exc.start) + 1
            raise self.error(line, None, f"invalid UTF-8 at byte offset {exc.start}") from exc


@dataclass
class FirstRecords:
    """What first_jsonl_objects learnt of one file's bytes under keeping_first_records:
    the records it parsed with orjson by line number (1 = the first line) and
    `orjson_safe` of the whole bytes (None: not computed)."""

    records: dict[int, Any] = field(default_factory=dict)
    safe: bool | None = None
