"""The unit a converter reads: `FileContext` (a file's path, bytes or the file to stream
its lines from, sha256, leniency and file-level skip counter) and `FirstRecords` (what
format detection already parsed of it).

Skip reasons: every converter counts what it did not carry into the trajectory in
`Trajectory.skipped` under a short key (e.g. `thinking_level_change`,
`arguments_raw_synthesized`); file-level skips (lenient mode) go to
`FileContext.skipped`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmaker.trajectories.errors import ConvertError


class FileContext:
    """One input unit being converted: `path` as given, its bytes' sha256, whether bad
    records are skipped (`lenient`), the file-level skip counter, and its content:

        FileContext("run.jsonl", sha, data)                       # the bytes, held whole
        FileContext("run.jsonl", sha, source=Path("run.jsonl"), head=first_lines)  # streamed

    A streamed context (`streamed`) holds only `head`, the file's first lines (at least
    the ones format detection reads: benchmaker.trajectories.converters.detect_head), and
    `iter_jsonl` reads its lines from `source` one at a time, so a JSONL file of many
    sessions is never held whole. `data` reads the whole file from `source` the first
    time a converter asks for it (a JSON document, a harbor trial log) and keeps it.
    `head` is `data` when the bytes are held. Raises OSError as `open` does when the
    source cannot be read.
    """

    def __init__(
        self,
        path: str,
        sha256: str,
        data: bytes | None = None,
        lenient: bool = False,
        skipped: Counter[str] | None = None,
        first_records: FirstRecords | None = None,
        *,
        source: Path | None = None,
        head: bytes = b"",
    ) -> None:
        if data is None and source is None:
            raise ValueError(f"{path}: a FileContext needs its bytes or a source file")
        self.path, self.sha256, self.lenient = path, sha256, lenient
        self.skipped: Counter[str] = Counter() if skipped is None else skipped
        self.first_records = first_records
        """What format detection parsed of `data` (keeping_first_records), for iter_jsonl
        to use instead of parsing those lines (and checking the bytes) again; taken by its
        first pass."""
        self.source = source
        self._data = data
        self._head = head

    @property
    def streamed(self) -> bool:
        """True while the bytes are not held: iter_jsonl reads `source` line by line."""
        return self._data is None

    @property
    def data(self) -> bytes:
        """The file's bytes (read whole from `source` the first time when streamed)."""
        if self._data is None:
            assert self.source is not None
            self._data = self.source.read_bytes()
        return self._data

    @property
    def head(self) -> bytes:
        """The first lines of the file (all of it when the bytes are held): enough for the
        content checks converters make before reading records (first byte, one document
        or JSON lines, the first record)."""
        return self._head if self._data is None else self._data

    def error(self, line: int | None, fld: str | None, problem: str, *got: Any) -> ConvertError:
        """A ConvertError naming this file (`got` optional: the offending value)."""
        return ConvertError(self.path, line, fld, problem, *got)

    def text(self) -> str:
        """The file decoded as UTF-8. Raises ConvertError naming the line of the first
        invalid byte."""
        data = self.data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise self.error(line, None, f"invalid UTF-8 at byte offset {exc.start}") from exc


@dataclass
class FirstRecords:
    """What first_jsonl_objects learnt of one file's bytes under keeping_first_records:
    the records it parsed with orjson by line number (1 = the first line) and
    `orjson_safe` of the whole bytes (None: not computed)."""

    records: dict[int, Any] = field(default_factory=dict)
    safe: bool | None = None
