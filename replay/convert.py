"""Convert agent logs into `trajectories.jsonl` (DESIGN §3 `convert`, §6 schema).

    report = convert_paths([Path("logs/")], Path("out/trajectories.jsonl"))
    report.trajectories, report.turns          # counts written
    for traj in read_trajectories(Path("out/trajectories.jsonl")): ...

Inputs are files or directories. A directory of a directory format
(`replay.converters.detect_dir`: a harbor trial directory, `result.json` + `agent/`; an
OpenHands SDK conversation, `base_state.json` + `events/`) is one unit; any other
directory is walked (sorted, recursively) and every such directory and every `.json`,
`.jsonl` and `.traj` file in it is a unit (files inside a unit directory belong to it),
named by its absolute path. Files agents write
beside their logs are skipped and counted by kind: a harbor job's own `result.json` /
`config.json` (beside its trial directories) as `harbor_job_file`; predictions
(`preds.json`, `all_preds.jsonl`), OpenHands `metadata.json` and SWE-bench reports as
`replay.converters.companion_kind` names them. Any other unit must convert: every unit
is tried and each one that fails is named (`UnreadableFilesError` when there are
several). The format of a unit is detected from its content
(`replay.converters.detect_bytes`) unless `fmt` names one.

Errors (`replay.errors`): a missing path, an empty directory, an unknown format, bad
bytes/JSON/fields (`path:line: field: problem (got VALUE)`), and an input that yields
zero trajectories all raise `ConvertError` subclasses. With `lenient=True` bad records
and unconvertible files are skipped and counted in the report instead (zero
trajectories is still an error); walked files matching no format are then counted as
`unrecognized_file`. `convert_paths(paths, None)` checks without writing. The output is
written to a temporary file in the output's directory and moved into place with
`os.replace` only when everything succeeded, so a failed run leaves no output file
claiming to be complete.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from replay.converters import (
    CONVERTER_VERSION,
    CONVERTERS,
    DIR_FORMATS,
    FORMATS,
    FileContext,
    companion_kind,
    detect_bytes,
    detect_dir,
    harbor,
)
from replay.errors import (
    ConvertError,
    EmptyInputError,
    TrajectoryFormatError,
    UnknownFormatError,
    UnreadableFilesError,
)
from replay.trajectory import Trajectory

__all__ = [
    "CONVERTER_VERSION",
    "ConvertProgress",
    "ConvertReport",
    "FileReport",
    "convert_paths",
    "detect_format",
    "gc_paused",
    "iter_trajectories",
    "load_trajectories",
    "read_trajectories",
    "stage_progress",
]

log = logging.getLogger(__name__)

_LOG_SUFFIXES = (".json", ".jsonl", ".traj")


@dataclass
class FileReport:
    """One converted unit: its path, format, trajectories and turns written, and the
    error message when it was skipped (lenient mode)."""

    path: str
    format: str | None
    trajectories: int = 0
    turns: int = 0
    error: str | None = None


@dataclass
class ConvertReport:
    """What `convert_paths` did. `skipped` sums every trajectory's skip counts and the
    file-level ones (bad lines/rows/files in lenient mode) by reason."""

    out: Path | None
    trajectories: int = 0
    turns: int = 0
    files: list[FileReport] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    converter_version: int = CONVERTER_VERSION

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return {
            "out": None if self.out is None else str(self.out),
            "trajectories": self.trajectories,
            "turns": self.turns,
            "converter_version": self.converter_version,
            "files": [vars(f) for f in self.files],
            "skipped": dict(self.skipped),
        }


def _check_format(fmt: str | None, where: Path) -> None:
    if fmt is not None and fmt not in FORMATS:
        raise UnknownFormatError(where, None, "format", f"unknown format (expected one of {', '.join(FORMATS)})", fmt)


def detect_format(path: Path) -> str:
    """The format name of a log file or of a directory format's directory. Raises
    UnknownFormatError when the content matches no converter, ConvertError when the
    path does not exist."""
    path = Path(path)
    if path.is_dir():
        found = detect_dir(path)
        if found is not None:
            return found
        raise UnknownFormatError(path, None, None, "a directory that is neither a harbor trial directory (result.json"
                                 " + agent/) nor an OpenHands conversation (base_state.json + events/)")
    if not path.exists():
        raise ConvertError(path, None, None, "no such file or directory")
    fmt = detect_bytes(path.read_bytes())
    if fmt is None:
        raise _unknown_format(path)
    return fmt


def _unknown_format(path: Path) -> UnknownFormatError:
    return UnknownFormatError(
        path, None, None, f"unknown log format (expected one of {', '.join(FORMATS)}; pass --format to force one)")


def _iter_unit(path: Path, fmt: str | None, lenient: bool, ctx_out: list[FileContext] | None = None,
               data: bytes | None = None, detected: str | None = None) -> Iterator[Trajectory]:
    """Trajectories of one unit. A file is read once (`data`: its bytes when the caller
    has read them already, `detected`: their detect_bytes result) and hashed once."""
    if path.is_dir():
        found = detect_format(path)  # raises the right error for any other directory
        if fmt not in (None, found):
            raise UnknownFormatError(path, None, "format", f"a directory of format {found} cannot be read as another format", fmt)
        yield from DIR_FORMATS[found].convert(path, lenient=lenient)
        return
    if data is None:
        if not path.exists():
            raise ConvertError(path, None, None, "no such file or directory")
        data = path.read_bytes()
    use = fmt or detected or detect_bytes(data)
    if use is None:
        raise _unknown_format(path)
    if use in DIR_FORMATS:
        raise UnknownFormatError(path, None, "format", f"{use} needs a directory, not a file")
    ctx = FileContext(str(path), hashlib.sha256(data).hexdigest(), data, lenient)
    if ctx_out is not None:
        ctx_out.append(ctx)
    yield from CONVERTERS[use](ctx)


def iter_trajectories(path: Path, fmt: str | None = None, lenient: bool = False) -> Iterator[Trajectory]:
    """Trajectories of one log file or unit directory (`detect_dir`), in order. `fmt`
    forces a format. Raises ConvertError (see module docstring)."""
    path = Path(path)
    _check_format(fmt, path)
    yield from _iter_unit(path, fmt, lenient)


def _units(paths: list[Path], out: Path | None) -> list[tuple[Path, bool]]:
    """(unit, named explicitly) pairs; files found by walking are not explicit and are
    named by their absolute path."""
    units: list[tuple[Path, bool]] = []
    out_resolved = out.resolve() if out is not None else None
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise ConvertError(p, None, None, "no such file or directory")
        if p.is_file() or detect_dir(p) is not None:
            units.append((p, True))
            continue
        if not p.is_dir():  # a pipe (`<(zcat x.gz)`), a socket or a device: read twice (hash, parse), it cannot be
            raise ConvertError(p, None, None, "not a regular file or directory (write a pipe's logs to a file first)")
        found: list[Path] = []
        _walk(p.absolute(), found, out_resolved)
        if not found:
            raise EmptyInputError(p, None, None, f"directory has no log files ({', '.join(_LOG_SUFFIXES)} or harbor trial dirs)")
        units.extend((f, False) for f in found)
    return units


def _walk(d: Path, found: list[Path], out_resolved: Path | None) -> None:
    for child in sorted(d.iterdir()):
        if child.is_dir():
            if detect_dir(child) is not None:
                found.append(child)
            else:
                _walk(child, found, out_resolved)
        elif child.suffix in _LOG_SUFFIXES and child.resolve() != out_resolved and not child.name.startswith("."):
            found.append(child)


_HARBOR_JOB_FILES = ("result.json", "config.json")


def _is_harbor_job_file(path: Path) -> bool:
    """A harbor job's own `result.json` / `config.json`: beside the job's trial dirs."""
    return path.name in _HARBOR_JOB_FILES and any(
        c.is_dir() and harbor.is_trial_dir(c) for c in path.parent.iterdir())


@dataclass(frozen=True, slots=True)
class ConvertProgress:
    """Conversion in progress, handed to `convert_paths(..., progress=f)` when it starts
    (nothing done), after each input unit and once more at the end (`finished`: every
    unit tried, before a bad one's error is raised). `files_*`: input units (a unit directory is one);
    `bytes_*`: their sizes in bytes (a directory: the files in it); `trajectories`,
    `turns`: converted so far; `elapsed_s`: seconds since the start (the injected clock).

    ConvertProgress(files_done=3, files_total=500, bytes_done=1_900_000,
                    bytes_total=297_100_000, trajectories=3, turns=812, elapsed_s=0.4)
    """

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    trajectories: int
    turns: int
    elapsed_s: float
    finished: bool = False

    @property
    def eta_s(self) -> float | None:
        """Seconds left: the bytes left at the byte rate so far (s); 0 once finished;
        None before a byte is done."""
        if self.finished:
            return 0.0
        if self.bytes_done <= 0 or self.elapsed_s <= 0:
            return None
        return max(0, self.bytes_total - self.bytes_done) * self.elapsed_s / self.bytes_done

    def eta_text(self) -> str:
        """`ETA 61 s`, `ETA ?` (not known yet) or `done`."""
        return "done" if self.finished else ("ETA ?" if self.eta_s is None else f"ETA {self.eta_s:,.0f} s")

    def volume_text(self) -> str:
        """`1.9/297.1 MB · 812 turns`: MB of logs done/total, turns so far."""
        return f"{self.bytes_done / 1e6:,.1f}/{self.bytes_total / 1e6:,.1f} MB · {self.turns:,} turns"

    def describe(self) -> str:
        """One line: `files 3/500 · 1.9/297.1 MB · 812 turns · 0.4 s · ETA 61 s`."""
        return (f"files {self.files_done:,}/{self.files_total:,} · {self.volume_text()} · {self.elapsed_s:,.1f} s"
                f" · {self.eta_text()}")


def stage_progress(ev: ConvertProgress) -> None:
    """convert_paths' default `progress`: hand each ConvertProgress to the synchronous
    progress observers (replay.progress; none registered: nothing happens) as
    `StageEvent("convert", detail, files done, files total, elapsed s, finished)`, detail
    `files · 1.9/297.1 MB · 812 turns · ETA 61 s` (no ETA on the last event). So every
    conversion (the swebench-replay plan's and convert task's) shows per file in a
    terminal view (recipes.display.SweepProgressView) that is observing."""
    from replay.progress import StageEvent, emit_sync

    detail = f"files · {ev.volume_text()}" + ("" if ev.finished else f" · {ev.eta_text()}")
    emit_sync(StageEvent("convert", detail, ev.files_done, ev.files_total, ev.elapsed_s, ev.finished))


def _unit_bytes(unit: Path) -> int:
    """Size of an input unit in bytes: a file's, or the files' under a directory."""
    if unit.is_dir():
        return sum(f.stat().st_size for f in unit.rglob("*") if f.is_file())
    return unit.stat().st_size


@contextmanager
def gc_paused() -> Iterator[None]:
    """Automatic cyclic garbage collection off while the block runs (back on after it,
    if it was on, also on an error), for loops that build millions of objects that stay
    (conversion, `load_trajectories`, a replay store's load). A converter allocates
    millions of containers (parsed JSON, models) that live until its file is done, so the
    collector keeps re-scanning them: with it on, the 500-session corpus converts ~25%
    slower (benchmarks/corpus.py, busy host). Conversion makes almost no reference
    cycles; what it makes is collected after."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


_to_json = Trajectory.__pydantic_serializer__.to_json
"""`traj.model_dump_json()` as UTF-8 bytes (model_dump_json decodes these very bytes)."""


def convert_paths(paths: list[Path], out: Path | None, *, fmt: str | None = None, lenient: bool = False,
                  progress: Callable[[ConvertProgress], None] | None = stage_progress,
                  clock: Callable[[], float] = time.monotonic) -> ConvertReport:
    """Convert every log under `paths` into one trajectories JSONL at `out` (one
    `Trajectory.model_dump_json()` per line) and return the report; `out` None only
    checks (everything is converted, nothing is written).

    Every input is tried. A file that cannot be converted (bad content, or a walked
    file whose content matches no log format, other than a harbor job's own
    result.json/config.json, which is skipped and counted as `harbor_job_file`) raises
    its ConvertError (`path:line: field: problem`) when it is the only one, else
    UnreadableFilesError naming every such file; on any error no file is left at `out`
    (an existing one is left untouched). With `lenient` bad records/files are skipped
    and counted (`file_error`, `unrecognized_file`) instead. Zero trajectories raises
    EmptyInputError either way.

    Each file is read and hashed once. `progress` (default: `stage_progress`, to the
    progress observers; None: no one) gets a ConvertProgress at the start, after each
    unit and at the end (times from `clock`, s); one that raises is logged and not
    called again (it never fails the conversion). The process's automatic cyclic GC is
    off while the files convert (`gc_paused`).
    """
    out = Path(out) if out is not None else None
    _check_format(fmt, out or Path("."))
    units = _units(list(paths), out)
    report = ConvertReport(out=out)
    skipped: Counter[str] = Counter()
    failures: list[ConvertError] = []
    started = clock()
    sizes = [_unit_bytes(u) for u, _ in units] if progress is not None else []
    total_bytes = sum(sizes)
    done_bytes = 0

    def tell(files_done: int, finished: bool = False) -> None:
        nonlocal progress
        if progress is None:
            return
        try:
            progress(ConvertProgress(files_done, len(units), done_bytes, total_bytes, report.trajectories,
                                     report.turns, clock() - started, finished))
        except Exception as exc:  # progress never fails the conversion
            log.warning("conversion progress callback %r failed and is no longer called: %s", progress, exc)
            progress = None

    tmp_name: str | None = None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        fh = os.fdopen(fd, "wb")
    else:
        fh = open(os.devnull, "wb")  # noqa: SIM115 - closed in finally

    def convert_one(unit: Path, explicit: bool) -> None:
        frep = FileReport(path=str(unit), format=None)
        report.files.append(frep)
        data = detected = None
        if unit.is_file():
            data = unit.read_bytes()  # the one read of this file
            detected = detect_bytes(data) if fmt is None else None
        if not explicit and fmt is None and data is not None and detected is None:
            kind = "harbor_job_file" if _is_harbor_job_file(unit) else companion_kind(data)
            if kind is not None:
                frep.error = f"skipped: {kind.replace('_', ' ')}, not an agent log"
                skipped[kind] += 1
                return
            exc = UnknownFormatError(unit, None, None, "content matches no log format")
            frep.error = str(exc)
            if lenient:
                skipped["unrecognized_file"] += 1
            else:
                failures.append(exc)
            return
        ctxs: list[FileContext] = []
        try:
            lines = []
            for traj in _iter_unit(unit, fmt, lenient, ctxs, data, detected):
                frep.format = traj.source.format
                lines.append(_to_json(traj))
                frep.turns += len(traj.turns)
                skipped.update(traj.skipped)
            for line in lines:  # written once the whole unit converted; no copy of the bytes
                fh.write(line)
                fh.write(b"\n")
            frep.trajectories = len(lines)
        except ConvertError as exc:
            frep.error = str(exc)
            frep.turns = 0
            if not lenient:
                failures.append(exc)
                return
            skipped["file_error"] += 1
        if frep.format is None and frep.error is None:
            frep.format = fmt
        for ctx in ctxs:
            skipped.update(ctx.skipped)
        report.trajectories += frep.trajectories
        report.turns += frep.turns

    files_done = 0
    try:
        tell(0)
        with fh, gc_paused():
            for k, (unit, explicit) in enumerate(units):
                convert_one(unit, explicit)
                files_done = k + 1
                done_bytes += sizes[k] if sizes else 0
                tell(files_done)
        tell(files_done, finished=True)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise UnreadableFilesError(failures, len(units))
        if report.trajectories == 0:
            where = units[0][0] if len(units) == 1 else Path(os.path.commonpath([str(u) for u, _ in units]) or ".")
            raise EmptyInputError(where, None, None, f"no trajectories converted from {len(units)} input(s)")
        if tmp_name is not None and out is not None:
            os.chmod(tmp_name, 0o644)  # mkstemp creates 0600
            os.replace(tmp_name, out)
    except BaseException:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
        raise
    report.skipped = dict(sorted(skipped.items()))
    return report


def read_trajectories(path: Path) -> Iterator[Trajectory]:
    """Yield each Trajectory of a trajectories JSONL file, validated against the schema.
    Raises TrajectoryFormatError `path:line: field.path: problem (got VALUE)` at the
    first bad line (lines before it have been yielded); a file that is not UTF-8 or
    whose line is not JSON is reported the same way. To read a whole large file, use
    load_trajectories."""
    path = Path(path)
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TrajectoryFormatError(path, line_no, None, f"invalid UTF-8 at byte {exc.start} of the line") from exc
            try:
                yield Trajectory.model_validate_json(text)
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = _loc(err.get("loc", ()))
                if err.get("type") == "json_invalid":
                    raise TrajectoryFormatError(path, line_no, None, f"invalid JSON: {err.get('msg')}") from exc
                raise TrajectoryFormatError(path, line_no, loc or None, err.get("msg", "invalid"), err.get("input")) from exc


def load_trajectories(path: Path) -> list[Trajectory]:
    """Every Trajectory of a trajectories JSONL file, in order, each validated: the list of
    read_trajectories (same models, same TrajectoryFormatError `path:line: field: problem`
    at the first bad line), read with automatic garbage collection paused (gc_paused; on
    again after, also on an error). The models of a large file are millions of tracked
    objects that the collector would re-scan over and over while they accumulate: on
    the 500-session corpus (121,887 turns, 307 MB) this cuts the read from 9.3 to 3.7
    CPU s (benchmarks/convert_once.py --per-point-read). Pydantic's validation itself is
    not the cost: building the models from orjson's parse without validation (trusted
    constructors after exact type checks) took 11.5 CPU s there, and with the collector
    paused still ~15% more than validating."""
    with gc_paused():
        return list(read_trajectories(path))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
