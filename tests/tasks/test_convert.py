"""tasks.convert: the content digest that keys the conversion cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.convert import converted_path, logs_sha256


def test_digest_follows_content_not_mtime(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "a.jsonl").write_text("one\n")
    (d / "sub").mkdir()
    (d / "sub" / "b.traj").write_text("two\n")
    first = logs_sha256([d])
    (d / "a.jsonl").write_text("one\n")  # rewritten, same bytes
    assert logs_sha256([d]) == first
    (d / "sub" / "b.traj").write_text("two!\n")
    assert logs_sha256([d]) != first
    assert len(first) == 64


def test_digest_of_missing_path_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        logs_sha256([tmp_path / "nope.jsonl"])


def test_converted_path_is_content_addressed(tmp_path: Path) -> None:
    assert converted_path(tmp_path, "ab" * 32, 3) == tmp_path / "convert" / ("ab" * 8 + "-v3") / "trajectories.jsonl"


def test_conversion_reports_per_file_stage_events_and_the_sweep_view_shows_them(tmp_path: Path) -> None:
    """The swebench-replay conversion stage (tasks.convert.stage_progress): one StageEvent
    per file, files done/total with MB, turns and ETA, and the terminal view's last line."""
    import io

    from rich.console import Console

    from recipes.display import SweepProgressView
    from replay.convert import convert_paths
    from replay.progress import StageEvent, observe
    from tasks.convert import stage_progress
    from tests.recipes.test_convert_progress import TIMES, clock, write_logs

    logs = write_logs(tmp_path, 3)
    seen: list[StageEvent] = []
    buf = io.StringIO()
    view = SweepProgressView(Console(file=buf, force_terminal=True, width=240, color_system=None))
    with view, observe(seen.append):
        convert_paths(logs, tmp_path / "out.jsonl", progress=stage_progress, clock=clock(*TIMES))
    assert seen == [
        StageEvent("convert", "files · 0.0/0.3 MB · 0 turns · ETA ?", 0, 3, 0.0),
        StageEvent("convert", "files · 0.1/0.3 MB · 1 turns · ETA 0 s", 1, 3, 100.04 - 100.0),
        StageEvent("convert", "files · 0.2/0.3 MB · 2 turns · ETA 2 s", 2, 3, 4.0),
        StageEvent("convert", "files · 0.3/0.3 MB · 3 turns · ETA 0 s", 3, 3, 6.0),
        StageEvent("convert", "files · 0.3/0.3 MB · 3 turns", 3, 3, 6.0, finished=True),
    ]
    last = buf.getvalue().rpartition("\r\x1b[2K")[2]
    assert last == "convert ━━━━━━━━━━ 3/3 files · 0.3/0.3 MB · 3 turns done 6.0 s\n\x1b[?25h"
