"""Convert agent logs into `trajectories.jsonl` (docs/architecture.md).

    report = convert_paths([Path("logs/")], Path("out/trajectories.jsonl"))
    report.trajectories, report.turns          # counts written
    for traj in read_trajectories(Path("out/trajectories.jsonl")): ...

Inputs are files or directories. A directory of a directory format
(`benchmaker.trajectories.converters.detect_dir`: a harbor trial directory, `result.json` + `agent/`; an
OpenHands SDK conversation, `base_state.json` + `events/`) is one unit; any other
directory is walked (sorted, recursively) and every such directory and every `.json`,
`.jsonl` and `.traj` file in it is a unit (files inside a unit directory belong to it),
named by its absolute path. Files agents write beside their logs are skipped and counted
by the kind `benchmaker.trajectories.converters.companion_kind` names (the list:
docs/log-formats.md, "Files that are skipped"). The format of a unit is
detected from its content (`benchmaker.trajectories.converters.detect_bytes`) unless
`fmt` names one. A file of JSON lines of at least STREAM_MIN_BYTES is streamed from
disk, one line at a time, so conversion holds about one session of a file of many,
never the file.

Two units that hold the same session (the same bytes, hence the same trajectory ids)
are refused: the later one fails with a ConvertError naming both files (lenient: `duplicate_session`; docs/replay-an-agent.md,
"Converters").

Errors (`benchmaker.trajectories.errors`): a missing path, an empty directory, an unknown format, bad
bytes/JSON/fields (`path:line: field: problem (got VALUE)`), and an input that yields
zero trajectories all raise `ConvertError` subclasses (`lenient`: see convert_paths).
The output is written to a temporary file in the output's directory and moved into
place with `os.replace` only when everything succeeded, so a failed run leaves no output
file claiming to be complete; a write that fails for want of room (a full disk or quota,
a file too large, EIO) raises OutputWriteError naming the output, with nothing left at
it (an existing file untouched).
"""

from __future__ import annotations

import errno
import gc
import hashlib
import logging
import os
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from benchmaker.trajectories.converters import (
    CONVERTER_VERSION,
    CONVERTERS,
    DIR_FORMATS,
    FORMATS,
    FileContext,
    companion_kind,
    detect_bytes,
    detect_dir,
    detect_head,
    harbor,
)
from benchmaker.trajectories.converters.json_reading import keeping_first_records
from benchmaker.trajectories.converters.source_file import FirstRecords
from benchmaker.trajectories.errors import (
    ConvertError,
    EmptyInputError,
    OutputWriteError,
    TrajectoryFormatError,
    UnknownFormatError,
    UnreadableFilesError,
)
from benchmaker.trajectories.trajectory import Trajectory, trajectory_json

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
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""The errnos of a write that found no room (or a failing disk): OutputWriteError."""


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
    file-level ones (bad lines/rows/files in lenient mode) by reason. `workers`: the
    processes that converted (1: the calling one); `workers_cpu_s`: the CPU s the worker
    processes used (each one's process_time when it sent its last unit; 0.0 with 1);
    `workers_units`: the units they converted (the calling process converted the first
    others while they started; 0 with 1)."""

    out: Path | None
    trajectories: int = 0
    turns: int = 0
    files: list[FileReport] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    converter_version: int = CONVERTER_VERSION
    workers: int = 1
    workers_cpu_s: float = 0.0
    workers_units: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return {
            "out": None if self.out is None else str(self.out),
            "trajectories": self.trajectories,
            "turns": self.turns,
            "converter_version": self.converter_version,
            "files": [vars(f) for f in self.files],
            "skipped": dict(self.skipped),
            "workers": self.workers,
            "workers_cpu_s": self.workers_cpu_s,
            "workers_units": self.workers_units,
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
        raise UnknownFormatError(
            path,
            None,
            None,
            "a directory that is neither a harbor trial directory (result.json"
            " + agent/) nor an OpenHands conversation (base_state.json + events/)",
        )
    if not path.exists():
        raise ConvertError(path, None, None, "no such file or directory")
    data = path.read_bytes()
    fmt = detect_bytes(data)
    if fmt is None:
        raise _unknown_format(path, data)
    return fmt


def _unknown_format(path: Path, data: bytes | None = None) -> UnknownFormatError:
    """The error for content no format matches, naming the formats tried; a per-call LLM
    log (companion_kind "llm_call_log") is named as such."""
    if data is not None and companion_kind(data) == "llm_call_log":
        return UnknownFormatError(
            path,
            None,
            None,
            "a per-call LLM log (one model call: its request messages and response), not an agent "
            f"run; convert the agent's own log (formats: {', '.join(FORMATS)})",
        )
    return UnknownFormatError(
        path, None, None, f"unknown log format (expected one of {', '.join(FORMATS)}; pass --format to force one)"
    )


def _detect(data: bytes) -> tuple[str | None, FirstRecords]:
    """detect_bytes(data) and what it parsed with orjson (keeping_first_records), for the
    converter's iter_jsonl (FileContext.first_records)."""
    with keeping_first_records(data) as first:
        return detect_bytes(data), first


STREAM_MIN_BYTES = 1 << 22
"""A file of at least this many bytes (4 MiB) whose first lines decide its format as JSON
lines (`detect_head`) is streamed from disk (`FileContext.streamed`): its lines are read
one at a time, so converting a file of many sessions holds about one session, not the
file (benchmarks/convert_memory.py). A smaller file is read whole: one read, and the
records detection parsed are not parsed again."""

_HEAD_BYTES = 1 << 20
"""A streamed file's head starts at this many bytes (1 MiB, to a line's end) and doubles
until it decides the format (detect_head) or holds the whole file."""

_HASH_CHUNK = 1 << 20


def _read_file(path: Path, detect: bool, lenient: bool) -> tuple[FileContext, str | None]:
    """Read the regular file `path` for conversion: the FileContext a converter reads it
    through and, when `detect`, its format (else None). The file is read whole when
    smaller than STREAM_MIN_BYTES or when its head does not decide it as JSON lines (a
    JSON document is parsed whole anyway; the records detection parsed go to
    `first_records`), else streamed: its head and, in one pass in _HASH_CHUNK pieces, its
    sha256. Raises OSError as `open` does."""
    if path.stat().st_size < STREAM_MIN_BYTES:
        data = path.read_bytes()
    else:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES) + fh.readline()
            decided, fmt = detect_head(head)
            while not decided:
                more = fh.read(len(head)) + fh.readline()
                if not more:  # the whole file, and undecided: read as a whole
                    break
                head += more
                decided, fmt = detect_head(head)
            if decided:
                digest = hashlib.sha256(head)
                while chunk := fh.read(_HASH_CHUNK):
                    digest.update(chunk)
                ctx = FileContext(str(path), digest.hexdigest(), None, lenient, source=path, head=head)
                return ctx, fmt if detect else None
        data = head
    detected, first = _detect(data) if detect else (None, None)
    return FileContext(str(path), hashlib.sha256(data).hexdigest(), data, lenient, first_records=first), detected


def _iter_unit(
    path: Path,
    fmt: str | None,
    lenient: bool,
    ctx_out: list[FileContext] | None = None,
    read: tuple[FileContext, str | None] | None = None,
) -> Iterator[Trajectory]:
    """Trajectories of one unit. A file is read once for its hash and head (`read`: when
    the caller has read it already, with its format detected unless `fmt` names one) and
    once more line by line when streamed; the records detection parsed of a file read
    whole are not parsed again."""
    if path.is_dir():
        found = detect_format(path)  # raises the right error for any other directory
        if fmt not in (None, found):
            raise UnknownFormatError(
                path, None, "format", f"a directory of format {found} cannot be read as another format", fmt
            )
        yield from DIR_FORMATS[found].convert(path, lenient=lenient)
        return
    if read is None:
        if not path.exists():
            raise ConvertError(path, None, None, "no such file or directory")
        read = _read_file(path, fmt is None, lenient)
    ctx, detected = read
    use = fmt or detected
    if use is None:
        raise _unknown_format(path, ctx.head)
    if use in DIR_FORMATS:
        raise UnknownFormatError(path, None, "format", f"{use} needs a directory, not a file")
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
        if p.is_file() and out_resolved is not None and p.resolve() == out_resolved:
            raise ConvertError(
                p, None, None, "is also the output file (-o): converting would replace it; give another output"
            )
        if p.is_file() or detect_dir(p) is not None:
            units.append((p, True))
            continue
        if not p.is_dir():  # a pipe (`<(zcat x.gz)`), a socket or a device: read twice (hash, parse), it cannot be
            raise ConvertError(p, None, None, "not a regular file or directory (write a pipe's logs to a file first)")
        found: list[Path] = []
        _walk(p.absolute(), found, out_resolved)
        if not found:
            raise EmptyInputError(
                p, None, None, f"directory has no log files ({', '.join(_LOG_SUFFIXES)} or harbor trial dirs)"
            )
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
    return path.name in _HARBOR_JOB_FILES and any(c.is_dir() and harbor.is_trial_dir(c) for c in path.parent.iterdir())


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
        return (
            f"files {self.files_done:,}/{self.files_total:,} · {self.volume_text()} · {self.elapsed_s:,.1f} s"
            f" · {self.eta_text()}"
        )


def stage_progress(ev: ConvertProgress) -> None:
    """convert_paths' default `progress`: hand each ConvertProgress to the synchronous
    progress observers (benchmaker.progress; none registered: nothing happens) as
    `StageEvent("convert", detail, files done, files total, elapsed s, finished)`, detail
    `files · 1.9/297.1 MB · 812 turns · ETA 61 s` (no ETA on the last event). So every
    conversion (the swebench-replay plan's and convert task's) shows per file in a
    terminal view (benchmaker.recipes.display.SweepProgressView) that is observing."""
    from benchmaker.progress import StageEvent, emit_sync

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


_to_json = trajectory_json
"""`traj.model_dump_json()` as UTF-8 bytes (benchmaker.trajectories.trajectory.trajectory_json: orjson from
the models' fields, pydantic's serializer for what orjson refuses)."""

WORKERS_ENV = "BENCHMAKER_CONVERT_WORKERS"
"""Environment variable that sets convert_paths' `workers` when the caller leaves it None:
a number of processes (1: in this process) or `auto` (the same as unset)."""

PARALLEL_MIN_BYTES = 24_000_000
"""Automatic mode converts in worker processes only when the units total at least this
many bytes of logs. Starting the pool costs ~0.3 s of wall clock the first time in a
process (a forkserver interpreter importing this module; 2 workers forked from it: ~0.03
s each later time; the parent converts the first units meanwhile), and the parent joins
every unit's part file (os.copy_file_range); at ~24 MB of logs per CPU s per process, 2
workers win back the start from ~15 MB on, and clearly (>= 1.3x) from ~25 MB
(benchmarks/corpus.py --conversion-only)."""

_AUTO_MAX_WORKERS = 8
"""At most this many workers in automatic mode: the parent joins every unit's output, and
starting more workers than the logs keep busy costs more than it wins."""

_IN_FLIGHT_PER_WORKER = 4
"""Units submitted but not yet joined, per worker: bounds the part files waiting in the
output's directory while a slow unit holds up the ones after it (they are joined in order)."""


@dataclass(slots=True)
class _UnitResult:
    """One unit converted: its FileReport, the skip counts to add to the report's, when
    not lenient its error (raised once every unit was tried), the trajectory ids of its
    lines in order, and where its lines went: from offset `start` of the sink it was
    given (the output, where it is the last unit until the next one), or, a worker's
    unit, the part file `part` (path, size in bytes)."""

    file: FileReport
    skipped: Counter[str]
    failure: ConvertError | None = None
    part: tuple[str, int] | None = None
    ids: list[str] = field(default_factory=list)
    start: int | None = None


def _cut(sink: BinaryIO, offset: int) -> None:
    """Remove what `sink` holds from `offset` on (a unit's lines that must not stay)."""
    sink.seek(offset)
    sink.truncate()


def _convert_unit(
    unit: Path, explicit: bool, fmt: str | None, lenient: bool, sink: BinaryIO | None = None
) -> _UnitResult:
    """Convert one unit as convert_paths does (the same in this process or in a worker):
    a walked file that matches no format is skipped as a harbor job's file or a
    companion file, counted as `unrecognized_file` (lenient) or a failure; a unit that
    raises ConvertError keeps no lines (lenient: `file_error`). Each trajectory's line
    (and a newline) goes to `sink` as soon as it is converted, so the unit's trajectories
    are never held together (None: checking only, the lines are dropped); a unit that
    fails is cut from `sink` again. A write that fails raises its OSError."""
    frep = FileReport(path=str(unit), format=None)
    skipped: Counter[str] = Counter()
    read = _read_file(unit, fmt is None, lenient) if unit.is_file() else None
    if not explicit and fmt is None and read is not None and read[1] is None:
        kind = "harbor_job_file" if _is_harbor_job_file(unit) else companion_kind(read[0].head)
        if kind is not None:
            frep.error = f"skipped: {kind.replace('_', ' ')}, not an agent log"
            skipped[kind] += 1
            return _UnitResult(frep, skipped)
        exc = UnknownFormatError(unit, None, None, "content matches no log format")
        frep.error = str(exc)
        if lenient:
            skipped["unrecognized_file"] += 1
            return _UnitResult(frep, skipped)
        return _UnitResult(frep, skipped, exc)
    ctxs: list[FileContext] = []
    ids: list[str] = []
    start = sink.tell() if sink is not None else None
    try:
        for traj in _iter_unit(unit, fmt, lenient, ctxs, read):
            frep.format = traj.source.format
            if sink is not None:
                sink.write(_to_json(traj))
                sink.write(b"\n")
            ids.append(traj.trajectory_id)
            frep.turns += len(traj.turns)
            skipped.update(traj.skipped)
        frep.trajectories = len(ids)
    except ConvertError as exc:
        if sink is not None and start is not None:
            _cut(sink, start)
        frep.error = str(exc)
        frep.turns = 0
        if not lenient:
            return _UnitResult(frep, skipped, exc)
        ids = []
        skipped["file_error"] += 1
    if frep.format is None and frep.error is None:
        frep.format = fmt
    for ctx in ctxs:
        skipped.update(ctx.skipped)
    return _UnitResult(frep, skipped, ids=ids, start=start)


def _refuse_copy(res: _UnitResult, first: str, trajectory_id: str, lenient: bool, sink: BinaryIO) -> None:
    """Drop the unit of `res`, whose trajectory `trajectory_id` the unit `first` already
    gave (two copies of one session): its lines (in `sink`, the output, from `res.start`)
    or part file go, its report says why; its failure is a ConvertError naming both
    files (lenient: counted as `duplicate_session` instead)."""
    if res.part is not None:
        os.unlink(res.part[0])
    if res.start is not None:
        _cut(sink, res.start)
    exc = ConvertError(
        res.file.path,
        None,
        None,
        f"holds the same session as {first} (trajectory_id {trajectory_id}): a copy of one log "
        "would replay it twice; remove one copy",
    )
    res.part, res.ids, res.start = None, [], None
    res.file.error, res.file.trajectories, res.file.turns = str(exc), 0, 0
    res.skipped = Counter({"duplicate_session": 1}) if lenient else Counter()
    if not lenient:
        res.failure = exc


_parts_lock: Any = None
"""In a worker: held while a part file is created and written, and by the thread that
removes them when the parent dies (so none is created after that)."""

_parts_written: list[str] = []
"""In a worker: the part files it wrote (the parent removes each once joined)."""


def _worker_init() -> None:
    """A worker ignores Ctrl-C (the parent stops it) and exits when the parent is gone
    (killed: no orphan left waiting for work that never comes), removing the part files
    it wrote first (the parent would have joined and removed them)."""
    import multiprocessing
    import threading

    global _parts_lock
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _parts_lock = threading.Lock()
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(
            target=_exit_with_parent, args=(parent.sentinel,), name="exit-with-parent", daemon=True
        ).start()


def _exit_with_parent(sentinel: int) -> None:
    from multiprocessing.connection import wait

    wait([sentinel])
    _parts_lock.acquire()  # never released: a part being written is finished first, none comes after
    for part in _parts_written:
        try:
            os.unlink(part)
        except OSError:
            pass
    os._exit(1)


def _open_part(part: str) -> BinaryIO:
    """The new file `part` (mode 0600; an existing one is an error), open for writing and
    registered for removal should the parent die (created under `_parts_lock`: none is
    created after that removal). Raises OSError."""
    with _parts_lock:
        _parts_written.append(part)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "wb", buffering=1 << 16)


def _convert_unit_in_worker(
    unit: Path, explicit: bool, fmt: str | None, lenient: bool, part: str | None
) -> tuple[Any, ...]:
    """_convert_unit in a worker process, its lines written to the file `part` as they
    are converted (None: checking only, the lines are dropped; a unit that writes none
    leaves no part file): (FileReport, part size in bytes or None when not written,
    skipped, error, worker pid, worker CPU s so far, trajectory ids).
    Only these few fields cross the pipe; the parent joins the part files."""
    size = None
    with gc_paused():
        if part is None:
            res = _convert_unit(unit, explicit, fmt, lenient)
        else:
            with _open_part(part) as sink:
                res = _convert_unit(unit, explicit, fmt, lenient, sink)
                size = sink.tell() or None
            if size is None:
                os.unlink(part)
    return res.file, size, res.skipped, res.failure, os.getpid(), time.process_time(), res.ids


def _join_part(part: str, size: int, dst: int) -> None:
    """Append the `size` bytes of the file `part` to the file descriptor `dst` (at its
    offset) and remove `part`. The bytes are copied in the kernel (os.copy_file_range;
    a plain read/write loop where it does not exist or the file system refuses it).
    Raises OSError, also when `part` holds fewer bytes than `size`."""
    src = os.open(part, os.O_RDONLY | os.O_CLOEXEC)
    try:
        left = size
        while left:
            n = _copy_range(src, dst, left)
            if n == 0:
                raise OSError(errno.EIO, f"{part}: {left} of its {size} bytes are missing")
            left -= n
    finally:
        os.close(src)
    os.unlink(part)


_copy_file_range_works = hasattr(os, "copy_file_range")


def _copy_range(src: int, dst: int, count: int) -> int:
    """Copy up to `count` bytes from `src` to `dst` at their offsets; the bytes copied (0: at the end of src)."""
    global _copy_file_range_works
    if _copy_file_range_works:
        try:
            return os.copy_file_range(src, dst, count)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM):
                raise
            _copy_file_range_works = False  # nothing was copied by the failed call
    data = os.read(src, min(count, 1 << 20))
    view = memoryview(data)
    while view:
        view = view[os.write(dst, view) :]
    return len(data)


_preload_set = False


def _pool_context() -> Any:
    """The pool's multiprocessing context: forkserver where there is one (the caller may
    be a Prefect process with threads: it is never forked), else spawn. The forkserver
    preloads the main module and this one, so a worker is a fork of an interpreter that
    has imported the converters (set once per process, before the forkserver starts;
    one started by other code keeps its own preload)."""
    import multiprocessing

    global _preload_set
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    if not _preload_set:
        ctx.set_forkserver_preload(["__main__", __name__])
        _preload_set = True
    return ctx


def _stop_pool(pool: Any) -> None:
    """Stop a pool now (an error or a signal while converting): cancel the units not
    started, terminate the workers (a unit in progress would otherwise finish first) and
    wait for them to exit."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # CPython's ProcessPoolExecutor
    for proc in processes:
        proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


_CONVERT_WHILE_POOL_STARTS = True
"""convert_paths with workers converts the first units itself, in order, until its worker
processes are up (a new forkserver imports the converters first: ~0.3 s of wall clock
on an idle 2-core host, during which the workers cannot start). Tests turn it off so
that every unit goes through the workers."""


def _worker_ready() -> None:
    """A no-op task (see _start_workers)."""


def _start_workers(pool: Any, n_workers: int) -> None:
    """Start the `n_workers` processes of a ProcessPoolExecutor now, not on the first
    units' submits: each submit while no worker is idle starts one. Blocks until each is
    forked (a new forkserver imports the converters first)."""
    for _ in range(n_workers):
        pool.submit(_worker_ready)


def _convert_in_workers(
    units: list[tuple[Path, bool]],
    n_workers: int,
    fmt: str | None,
    lenient: bool,
    parts: str | None,
    apply: Callable[[int, _UnitResult], None],
    sink: BinaryIO | None,
) -> tuple[float, int]:
    """Convert `units` in `n_workers` worker processes, handing each result to `apply` in
    unit order (at most _IN_FLIGHT_PER_WORKER * n_workers units are out at a time). Unit
    k's lines go to the part file `f"{parts}.{k}"`, whose (path, size) `apply` gets as
    the result's `part` (None: nothing is written, the lines are dropped); `apply` joins
    and removes it. While a thread starts the workers, this process converts the first
    units itself (_CONVERT_WHILE_POOL_STARTS), their lines into `sink` (the output). Returns the
    workers' CPU s (each one's process_time when it sent its last unit) and the number
    of units they converted. On any
    exception (also KeyboardInterrupt) the workers are stopped and the part files of the
    units submitted removed before it propagates."""
    import threading
    from collections import deque
    from concurrent.futures import Future, ProcessPoolExecutor

    pool = ProcessPoolExecutor(n_workers, mp_context=_pool_context(), initializer=_worker_init)
    start_error: list[BaseException] = []

    def start_workers() -> None:
        try:
            _start_workers(pool, n_workers)
        except BaseException as exc:  # raised in the calling thread
            start_error.append(exc)

    starter = threading.Thread(target=start_workers, name="convert-workers-start", daemon=True)
    starter.start()
    cpu_s_by_pid: dict[int, float] = {}
    pending: deque[Future[tuple[Any, ...]]] = deque()
    window = _IN_FLIGHT_PER_WORKER * n_workers
    k = submitted = here = 0
    try:
        while _CONVERT_WHILE_POOL_STARTS and starter.is_alive() and k < len(units):
            apply(k, _convert_unit(*units[k], fmt, lenient, sink))
            k += 1
        starter.join()
        if start_error:
            raise start_error[0]
        submitted = here = k
        for k in range(here, len(units)):
            while submitted < len(units) and len(pending) < window:
                unit, explicit = units[submitted]
                part = None if parts is None else f"{parts}.{submitted}"
                pending.append(pool.submit(_convert_unit_in_worker, unit, explicit, fmt, lenient, part))
                submitted += 1
            frep, size, skipped, failure, pid, cpu_s, ids = pending.popleft().result()
            cpu_s_by_pid[pid] = max(cpu_s, cpu_s_by_pid.get(pid, 0.0))
            part_k = None if size is None else (f"{parts}.{k}", size)
            apply(k, _UnitResult(frep, skipped, failure, part_k, ids))
    except BaseException:
        starter.join()
        _stop_pool(pool)
        if parts is not None:
            for j in range(k, submitted):
                try:
                    os.unlink(f"{parts}.{j}")
                except FileNotFoundError:
                    pass
        raise
    pool.shutdown(wait=True)
    return sum(cpu_s_by_pid.values()), len(units) - here


def _resolve_workers(workers: int | None, n_units: int, total_bytes: Callable[[], int]) -> int:
    """How many processes convert (1: this one); see convert_paths."""
    if workers is None:
        env = os.environ.get(WORKERS_ENV, "").strip()
        if env and env.lower() != "auto":
            try:
                workers = int(env)
            except ValueError:
                workers = 0
            if workers < 1:
                raise ConvertError(WORKERS_ENV, None, None, "expected a number of worker processes >= 1 or auto", env)
    elif workers < 1:
        raise ValueError(f"workers: expected None or >= 1 (got {workers!r})")
    if workers is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if cpus < 2 or n_units < 2 or total_bytes() < PARALLEL_MIN_BYTES:
            return 1
        workers = min(cpus, _AUTO_MAX_WORKERS)
    return max(1, min(workers, n_units))


class _Terminated(BaseException):
    """SIGTERM arrived while convert_paths ran (see _sigterm_unwinds)."""


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """In the main thread, when SIGTERM has its default action: SIGTERM raises inside the
    block, so convert_paths' cleanup runs (workers stopped, temporary file removed), and
    the process then ends by SIGTERM as it would have. Elsewhere (another thread, a
    handler installed, e.g. Prefect's in a flow run) nothing changes."""
    import threading

    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one does not break the cleanup
        raise _Terminated

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise SystemExit(128 + signal.SIGTERM) from None  # SIGTERM blocked in this thread
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def convert_paths(
    paths: list[Path],
    out: Path | None,
    *,
    fmt: str | None = None,
    lenient: bool = False,
    progress: Callable[[ConvertProgress], None] | None = stage_progress,
    clock: Callable[[], float] = time.monotonic,
    workers: int | None = None,
) -> ConvertReport:
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

    `workers`: processes that convert units (`report.workers` says how many did). 1:
    this process, one unit after the other. N >= 2: min(N, units) worker processes of a
    concurrent.futures.ProcessPoolExecutor (forkserver context, else spawn: this process
    is never forked; the main module is imported in them, as multiprocessing does, so a
    script calling this guards its entry point with `if __name__ == "__main__"`). None:
    the environment variable BENCHMAKER_CONVERT_WORKERS (a number, or `auto`; anything
    else raises ConvertError naming it), else automatic: as many workers as CPUs this
    process may run on (os.sched_getaffinity; at most 8) when there are >= 2 of them,
    >= 2 units and >= PARALLEL_MIN_BYTES (24 MB) of logs, else 1. Workers give exactly
    the output, errors, report and progress events of 1 worker: units are converted
    whole, this process converting the first ones itself while its workers start; a
    worker writes a unit's lines to a part file beside the temporary output
    (`.<out name>.XXXX.tmp.<unit index>`) and this process appends the part files to it
    in input order, in the kernel (os.copy_file_range), removing each (at most 4 units
    per worker are out at a time); progress comes after each unit in that order, and
    every unit is still tried before an error is raised. On an exception, Ctrl-C
    included, the workers are terminated and the part files removed before it
    propagates; a worker exits when this process dies, removing the part files it
    wrote. SIGTERM (in the main thread, with its default action) removes the temporary
    and part files and stops the workers, then ends the process by SIGTERM as before.
    """
    out = Path(out) if out is not None else None
    _check_format(fmt, out or Path("."))
    units = _units(list(paths), out)
    report = ConvertReport(out=out)
    skipped: Counter[str] = Counter()
    failures: list[ConvertError] = []
    sizes: list[int] = []

    def unit_sizes() -> list[int]:
        if not sizes and units:
            sizes.extend(_unit_bytes(u) for u, _ in units)
        return sizes

    n_workers = _resolve_workers(workers, len(units), lambda: sum(unit_sizes()))
    started = clock()
    if progress is not None:
        unit_sizes()
    total_bytes = sum(sizes)
    done_bytes = 0

    def tell(files_done: int, finished: bool = False) -> None:
        nonlocal progress
        if progress is None:
            return
        try:
            progress(
                ConvertProgress(
                    files_done,
                    len(units),
                    done_bytes,
                    total_bytes,
                    report.trajectories,
                    report.turns,
                    clock() - started,
                    finished,
                )
            )
        except Exception as exc:  # progress never fails the conversion
            log.warning("conversion progress callback %r failed and is no longer called: %s", progress, exc)
            progress = None

    tmp_name: str | None = None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        fh = os.fdopen(fd, "wb")
    else:
        fh = open(os.devnull, "wb")  # closed in finally

    files_done = 0
    sink = fh if out is not None else None  # a unit's lines go straight to the output
    first_unit: dict[str, str] = {}  # trajectory id -> the unit that gave it

    def apply(k: int, res: _UnitResult) -> None:
        """Unit k's result into the output and the report, then the progress event."""
        nonlocal files_done, done_bytes
        copied = next((tid for tid in res.ids if tid in first_unit), None)
        if copied is not None:
            _refuse_copy(res, first_unit[copied], copied, lenient, fh)
        first_unit.update(dict.fromkeys(res.ids, res.file.path))
        report.files.append(res.file)
        if res.part is not None:  # a worker's unit: its part file, after what fh holds
            fh.flush()
            _join_part(*res.part, fh.fileno())
        skipped.update(res.skipped)
        if res.failure is not None:
            failures.append(res.failure)
        report.trajectories += res.file.trajectories
        report.turns += res.file.turns
        files_done = k + 1
        done_bytes += sizes[k] if sizes else 0
        tell(files_done)

    with _sigterm_unwinds():
        try:
            tell(0)
            with fh, gc_paused():
                if n_workers > 1:
                    parts = None if tmp_name is None else os.path.abspath(tmp_name)  # the workers' cwd may differ
                    report.workers_cpu_s, report.workers_units = _convert_in_workers(
                        units, n_workers, fmt, lenient, parts, apply, sink
                    )
                else:
                    for k, (unit, explicit) in enumerate(units):
                        apply(k, _convert_unit(unit, explicit, fmt, lenient, sink))
            report.workers = n_workers
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
        except BaseException as exc:
            if tmp_name is not None:
                try:
                    os.unlink(tmp_name)
                except FileNotFoundError:
                    pass
            if isinstance(exc, OSError) and exc.errno in _NO_ROOM and out is not None:
                untouched = " (the file already there is untouched)" if out.exists() else ""
                raise OutputWriteError(
                    f"{out}: cannot write the trajectories ({exc.strerror}); nothing was written there{untouched}"
                ) from exc
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
                raise TrajectoryFormatError(
                    path, line_no, None, f"invalid UTF-8 at byte {exc.start} of the line"
                ) from exc
            try:
                yield Trajectory.model_validate_json(text)
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = _loc(err.get("loc", ()))
                if err.get("type") == "json_invalid":
                    raise TrajectoryFormatError(path, line_no, None, f"invalid JSON: {err.get('msg')}") from exc
                raise TrajectoryFormatError(
                    path, line_no, loc or None, err.get("msg", "invalid"), err.get("input")
                ) from exc


def load_trajectories(path: Path) -> list[Trajectory]:
    """Every Trajectory of a trajectories JSONL file, in order, each validated: the list of
    read_trajectories (same models, same TrajectoryFormatError `path:line: field: problem`
    at the first bad line), read with automatic garbage collection paused (gc_paused; on
    again after, also on an error): on the 500-session corpus (121,887 turns, 307 MB)
    this cuts the read from 9.3 to 3.7 CPU s (benchmarks/convert_once.py --per-point-read)."""
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
