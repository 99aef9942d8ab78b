"""The convert stage: logs -> trajectories.jsonl, cached on the logs' content.

    out, report = ensure_converted(paths, cache_dir)         # plain: what the task runs
    traj = convert_logs(paths, cache_dir)                    # Prefect task (no result cache)

One cache, one key, one artifact: the output goes to a content-addressed path
`<cache_dir>/convert/<key[:16]>-v<version>/trajectories.jsonl` (`converted_path`: the key
hashes the logs' content digest (`logs_sha256`, read once per conversion request), the
converter version, the input paths (trajectories carry them in `source.path`),
`format`, `lenient` and this module's conversion code), never under a run directory,
so a later run can reuse it; any change of a log's bytes, of the converters or of
the options converts again. The file is written atomically
(benchmaker.trajectories.convert.convert_paths: a temporary file renamed into place once
complete), so a file at that path is a complete conversion of exactly those inputs and
is returned without converting again (`ensure_converted`). Prefect keeps no result
record of the task (NO_CACHE): the file is the cache. `benchmaker swebench-replay`
converts before Prefect starts (to refuse bad logs and print the plan) and hands the
flow the converted file, so a CLI run reads the logs once; deployments, which do not
pass through the CLI, convert in the task.

While it converts, the task reports per file to the progress observers
(benchmaker.progress): StageEvents of the stage `convert` whose done/total count files and
whose detail holds MB of logs, turns and the ETA (benchmaker.trajectories.convert.stage_progress); the terminal view
of `benchmaker swebench-replay` (benchmaker.recipes.display.SweepProgressView) shows them.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from benchmaker.trajectories.convert import (
    CONVERTER_VERSION,
    ConvertProgress,
    ConvertReport,
    convert_paths,
    stage_progress,
)

__all__ = [
    "CONVERTER_VERSION",
    "cache_dir_of",
    "convert_logs",
    "converted_path",
    "ensure_converted",
    "logs_sha256",
    "stage_progress",
]


def logs_sha256(paths: list[Path]) -> str:
    """sha256 (hex) over every file under `paths` (directories walked, sorted): for each
    file its path relative to the given root and its bytes' sha256. Raises
    FileNotFoundError naming a path that does not exist."""
    h = hashlib.sha256()
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such file or directory")
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            rel = f.name if f == root else str(f.relative_to(root))
            h.update(rel.encode("utf-8") + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def cache_dir_of(out_dir: Path) -> Path:
    """The conversion cache directory of a run writing under `out_dir`:
    `<out_dir>/_cache`, absolute (the flow's task and the CLI use the same one)."""
    return (Path(out_dir) / "_cache").resolve()


@functools.cache
def _code_sha256() -> str:
    """sha256 of the source of the code that decides what a conversion writes (this
    module's `ensure_converted` and the task's body): a change of it converts again,
    as a change of the task's source (Prefect TASK_SOURCE) does."""
    text = inspect.getsource(ensure_converted) + inspect.getsource(convert_logs.fn)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def converted_path(
    cache_dir: Path, digest: str, converter_version: int, *, paths: Sequence[Path], fmt: str | None, lenient: bool
) -> Path:
    """Where the trajectories converted from the logs `paths` (absolute paths: they are
    made so here) with content `digest` (logs_sha256), by converter `converter_version`
    with the options `fmt` / `lenient`, live: `<cache_dir>/convert/<key[:16]>-v<version>/
    trajectories.jsonl`, the key a sha256 over all of these and the conversion code
    (`_code_sha256`). Any of them changing gives another path."""
    h = hashlib.sha256()
    for part in (
        digest,
        str(converter_version),
        fmt or "",
        "lenient" if lenient else "strict",
        _code_sha256(),
        *(str(Path(p).resolve()) for p in paths),
    ):
        h.update(part.encode("utf-8") + b"\0")
    return Path(cache_dir) / "convert" / f"{h.hexdigest()[:16]}-v{converter_version}" / "trajectories.jsonl"


def ensure_converted(
    paths: Sequence[Path],
    cache_dir: Path,
    *,
    fmt: str | None = None,
    lenient: bool = False,
    progress: Callable[[ConvertProgress], None] | None = stage_progress,
) -> tuple[Path, ConvertReport | None]:
    """The conversion of the logs `paths` (made absolute) at its content-addressed
    `converted_path` under `cache_dir`: (path, None) when a complete one is there
    already (nothing is read but the logs' bytes, hashed once for the key), else (path, report) after converting into it once
    (benchmaker.trajectories.convert.convert_paths, atomic; `progress` as there). Raises
    benchmaker.trajectories.errors.InputError as the converter does (`path:line: field: problem`); then
    no file and no directory this call created is left behind."""
    paths = [Path(p).resolve() for p in paths]
    digest = logs_sha256(paths)
    out = converted_path(cache_dir, digest, CONVERTER_VERSION, paths=paths, fmt=fmt, lenient=lenient)
    if out.is_file():
        return out, None
    created = []  # the directories convert_paths will create, deepest first
    for d in (out.parent, *out.parent.parents):
        if d.exists():
            break
        created.append(d)
    try:
        report = convert_paths(paths, out, fmt=fmt, lenient=lenient, progress=progress)
    except BaseException:
        for d in created:
            try:
                d.rmdir()
            except OSError:  # not empty: another run's conversion is in it
                break
        raise
    return out, report


@task(name="convert-logs", cache_policy=NO_CACHE)
def convert_logs(paths: list[Path], cache_dir: Path, fmt: str | None = None, lenient: bool = False) -> Path:
    """Prefect shell over `ensure_converted`: returns the conversion of `paths` at its
    `converted_path` under `cache_dir` (absolute), converting
    (benchmaker.trajectories.convert.convert_paths, documented there) only when no
    complete file is there. No Prefect result cache: the content-addressed file is the
    one cache (module docstring). Not retried: a conversion error is bad input
    (benchmaker.trajectories.errors.InputError)."""
    out, report = ensure_converted(paths, cache_dir, fmt=fmt, lenient=lenient)
    if report is None:
        get_run_logger().info(
            "%s: complete conversion of these %d input(s) found, not converted again", out, len(paths)
        )
    else:
        get_run_logger().info(
            "converted %d trajectories (%d turns) from %d file(s) into %s",
            report.trajectories,
            report.turns,
            len(report.files),
            out,
        )
    return out
