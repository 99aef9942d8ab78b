"""Errors raised by the replay package on purpose.

    ReplayError
    └── InputError               bad input; message `path:line: field: problem (got VALUE)`
        ├── ConvertError         a log cannot be converted (converters, benchmaker.trajectories.convert)
        │   ├── UnknownFormatError   no converter recognises the content (or bad --format)
        │   ├── EmptyInputError      no log files / the input yields zero trajectories
        │   └── UnreadableFilesError several inputs cannot be converted (one line each)
        └── TrajectoryFormatError    a trajectories.jsonl line fails the schema
    └── OutputWriteError         the output could not be written (a full disk); nothing left there

The package imports nothing from the engine (docs/architecture.md), so these do not derive from
`benchmaker.engine.errors.BenchmakerError`; the `benchmaker convert` recipe catches
`InputError` and reports it as a one-line error with exit code 2, `OutputWriteError` with
exit code 1 (a failed run).
"""

from __future__ import annotations

from typing import Any


class ReplayError(Exception):
    """Base of every error the replay package raises on purpose."""


def _got(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else '"' + value + '"'
    return text if len(text) <= 80 else text[:77] + "..."


class OutputWriteError(ReplayError):
    """Writing an output file failed (ENOSPC: a full disk, EDQUOT, EFBIG, EIO); the
    message names the file, why, and what is left there."""


class InputError(ReplayError, ValueError):
    """Input that cannot be used. `path`, `line` (1-based, None for whole-file problems),
    `field` (dotted path inside the record, None when the record itself is bad) and
    `problem` are kept as attributes; `str()` is `path:line: field: problem (got VALUE)`.
    """

    _NO_VALUE = object()

    def __init__(
        self,
        path: str | Any,
        line: int | None,
        field: str | None,
        problem: str,
        got: Any = _NO_VALUE,
    ):
        self.path = str(path)
        self.line = line
        self.field = field
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        parts = [where]
        if field:
            parts.append(field)
        text = problem if got is InputError._NO_VALUE else f"{problem} (got {_got(got)})"
        parts.append(text)
        super().__init__(": ".join(parts))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (a worker process's error) as its message and attributes: __init__ takes
        (path, line, field, problem), not the message pickle would pass it."""
        return type(self).__new__, (type(self), *self.args), self.__dict__


class ConvertError(InputError):
    """A log file (or directory) cannot be converted into trajectories."""


class UnknownFormatError(ConvertError):
    """No converter recognises the file, or the requested format name is unknown."""


class EmptyInputError(ConvertError):
    """The input has no log files, or converting it yields zero trajectories."""


class TrajectoryFormatError(InputError):
    """A line of a trajectories.jsonl file does not match the schema."""


class UnreadableFilesError(ConvertError):
    """Several inputs could not be converted. `errors` holds each one's ConvertError;
    `str()` is a count line, then one `  path:line: field: problem` line per input."""

    def __init__(self, errors: list[ConvertError], n_inputs: int):
        self.errors = list(errors)
        message = (
            f"{len(self.errors)} of {n_inputs} log inputs could not be converted (--lenient skips them):\n  "
            + "\n  ".join(str(e) for e in self.errors)
        )
        self.path, self.line, self.field, self.problem = "", None, None, message
        ValueError.__init__(self, message)
