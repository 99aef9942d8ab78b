"""The convert stage: logs -> trajectories.jsonl, cached on the logs' content.

    digest = logs_sha256([Path("logs/")])                    # plain
    traj = convert_logs(paths, digest, CONVERTER_VERSION, cache_dir)   # Prefect task

The cache key (INPUTS + TASK_SOURCE) covers the content sha256 of every log file, the
converter version, the format/lenient options and the output directory, so a second run
on the same logs is a cache hit (Prefect logs `Finished in state Cached(type=COMPLETED)`)
and returns the same file; any change of a log's bytes, of the converters or of this
task's source converts again. The output goes to a content-addressed path
`<cache_dir>/convert/<digest[:16]>-v<version>/trajectories.jsonl`, never under a run
directory, so a later run can reuse it.

While it converts, the task reports per file to the progress observers
(replay.progress): StageEvents of the stage `convert` whose done/total count files and
whose detail holds MB of logs, turns and the ETA (replay.convert.stage_progress); the terminal view
of `benchmaker swebench-replay` (recipes.display.SweepProgressView) shows them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.logging import get_run_logger

from replay.convert import CONVERTER_VERSION, convert_paths, stage_progress

__all__ = ["CONVERTER_VERSION", "convert_logs", "converted_path", "logs_sha256", "stage_progress"]


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


def converted_path(cache_dir: Path, digest: str, converter_version: int) -> Path:
    """Where the trajectories converted from logs with content `digest` live."""
    return Path(cache_dir) / "convert" / f"{digest[:16]}-v{converter_version}" / "trajectories.jsonl"


@task(name="convert-logs", cache_policy=INPUTS + TASK_SOURCE, persist_result=True)
def convert_logs(
    paths: list[Path],
    logs_digest: str,
    converter_version: int,
    cache_dir: Path,
    fmt: str | None = None,
    lenient: bool = False,
) -> Path:
    """Prefect shell over replay.convert.convert_paths (documented there): converts
    `paths` into `converted_path(cache_dir, logs_digest, converter_version)` and
    returns that path. `logs_digest` (logs_sha256 of `paths`) and `converter_version`
    are inputs only so that they key the cache. Not retried: a conversion error is
    bad input."""
    out = converted_path(cache_dir, logs_digest, converter_version)
    report = convert_paths(list(paths), out, fmt=fmt, lenient=lenient, progress=stage_progress)  # per file
    get_run_logger().info("converted %d trajectories (%d turns) from %d file(s) into %s",
                          report.trajectories, report.turns, len(report.files), out)
    return out
