"""The grade stage: grades.jsonl per sweep point (replay integrity + task outcome),
cached on the content of the point's files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.logging import get_run_logger

from benchmaker.progress import stage
from benchmaker.sweep.grade import grade_files

__all__ = ["GRADED_FILES", "grade", "point_files_sha256"]

GRADED_FILES = ("episodes.jsonl", "turns.jsonl", "server_stats.json", "concurrency.json")


def _samples(pdir: Path) -> list[Path]:
    return sorted(Path(pdir).glob("samples*.jsonl"))


def point_files_sha256(pdir: Path) -> str:
    """sha256 (hex) over the GRADED_FILES and samples*.jsonl of a point directory (name +
    bytes; a missing file hashes as absent), the cache key input of `grade`."""
    h = hashlib.sha256()
    for name in (*GRADED_FILES, *(p.name for p in _samples(pdir))):
        path = Path(pdir) / name
        h.update(name.encode() + (b"\1" + hashlib.sha256(path.read_bytes()).digest() if path.is_file() else b"\0"))
    return h.hexdigest()


@task(name="grade", cache_policy=INPUTS + TASK_SOURCE, persist_result=True)
def grade(point_dirs: list[Path], files_sha256: list[str]) -> list[Path]:
    """Prefect shell over benchmaker.sweep.grade.grade_files (documented there), once per point
    directory: writes `<point>/grades.jsonl` and returns those paths. `files_sha256`
    (point_files_sha256 of each directory) keys the cache."""
    out: list[Path] = []
    total = 0
    with stage("grade", "sweep points", total=len(point_dirs)) as advance:  # live progress (benchmaker.progress)
        for pdir in point_dirs:
            pdir = Path(pdir)
            manifest = pdir.parent.parent / "manifest.json"  # <run_dir>/points/<point>
            run_id = json.loads(manifest.read_text("utf-8")).get("run_id") if manifest.is_file() else None
            grades = grade_files(
                pdir / "episodes.jsonl",
                pdir / "turns.jsonl",
                pdir / "grades.jsonl",
                samples=_samples(pdir),
                server_stats=pdir / "server_stats.json",
                concurrency=pdir / "concurrency.json",
                run_id=run_id,
                sweep_point=pdir.name,
            )
            total += len(grades)
            out.append(pdir / "grades.jsonl")
            advance(1)
    get_run_logger().info(
        "graded %d sweep point(s): %d grade records (one per episode and per point check)", len(out), total
    )
    return out
