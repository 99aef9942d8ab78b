"""benchmaker.tasks.convert: the content digest and the path that key the conversion cache, and the
one conversion into it (ensure_converted) that the CLI and the flow's task share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmaker.tasks.convert import converted_path, logs_sha256

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recordings" / "tiny-task.pi.jsonl"


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


def test_converted_path_is_keyed_on_everything_that_changes_the_output(tmp_path: Path) -> None:
    logs = [tmp_path / "a.jsonl"]
    base = dict(paths=logs, fmt=None, lenient=False)
    path = converted_path(tmp_path, "ab" * 32, 3, **base)
    assert path.parent.parent == tmp_path / "convert" and path.name == "trajectories.jsonl"
    key, version = path.parent.name.split("-")
    assert (len(key), int(key, 16) >= 0, version) == (16, True, "v3")
    # the same inputs, the same path (a relative path is made absolute first)
    assert (
        converted_path(tmp_path, "ab" * 32, 3, paths=[Path(os.path.relpath(logs[0]))], fmt=None, lenient=False) == path
    )
    others = [
        converted_path(tmp_path, "cd" * 32, 3, **base),
        converted_path(tmp_path, "ab" * 32, 4, **base),
        converted_path(tmp_path, "ab" * 32, 3, **{**base, "paths": [tmp_path / "b.jsonl"]}),
        converted_path(tmp_path, "ab" * 32, 3, **{**base, "fmt": "pi-session"}),
        converted_path(tmp_path, "ab" * 32, 3, **{**base, "lenient": True}),
    ]
    assert len({path, *others}) == 6


def _logs(tmp_path: Path) -> list[Path]:
    d = tmp_path / "logs"
    d.mkdir()
    good = d / "a.pi.jsonl"
    good.write_bytes(EXAMPLE.read_bytes())
    bad = d / "b.pi.jsonl"
    bad.write_bytes(EXAMPLE.read_bytes()[:-40])  # the last line cut short
    return [good, bad]


def test_ensure_converted_converts_once_and_keeps_options_apart(tmp_path: Path, monkeypatch) -> None:
    """A lenient conversion of logs with a bad file does not answer a strict run of the
    same logs (which must still refuse them): the options key the path. A second call
    with the same inputs converts nothing."""
    import benchmaker.tasks.convert
    from benchmaker.tasks.convert import ensure_converted
    from benchmaker.trajectories.errors import InputError

    real, calls = benchmaker.tasks.convert.convert_paths, []
    monkeypatch.setattr(
        benchmaker.tasks.convert, "convert_paths", lambda *a, **kw: calls.append(a[0]) or real(*a, **kw)
    )
    logs, cache = _logs(tmp_path), tmp_path / "cache"
    out, report = ensure_converted(logs, cache, lenient=True, progress=None)
    # lenient: b's cut line skipped, its first 3 turns kept
    assert (report.trajectories, report.turns, report.skipped["truncated_last_line"], len(calls)) == (2, 7, 1, 1)
    first = out.read_bytes()
    assert ensure_converted(logs, cache, lenient=True, progress=None) == (out, None)  # found, not converted
    assert len(calls) == 1 and out.read_bytes() == first
    with pytest.raises(InputError, match=r"b\.pi\.jsonl:\d+: truncated JSONL"):
        ensure_converted(logs, cache, lenient=False, progress=None)
    assert len(calls) == 2
    # the failed strict conversion left nothing behind: only the lenient one is there
    assert [f.relative_to(cache).parts[0] for f in cache.rglob("*")] == ["convert", "convert", "convert"]
    assert sorted(f.name for f in cache.rglob("*") if f.is_file()) == ["trajectories.jsonl"]


def test_a_failed_conversion_leaves_no_directory_it_created(tmp_path: Path) -> None:
    from benchmaker.tasks.convert import ensure_converted
    from benchmaker.trajectories.errors import InputError

    logs = _logs(tmp_path)
    with pytest.raises(InputError):
        ensure_converted(logs[1:], tmp_path / "out" / "_cache", progress=None)
    assert not (tmp_path / "out").exists()


def test_conversion_reports_per_file_stage_events_and_the_sweep_view_shows_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")  # the emulated terminal, whatever TERM the suite has
    """The swebench-replay conversion stage (benchmaker.tasks.convert.stage_progress): one StageEvent
    per file, files done/total with MB, turns and ETA, and the terminal view's last line."""
    import io

    from rich.console import Console

    from benchmaker.progress import StageEvent, observe
    from benchmaker.recipes.display import SweepProgressView
    from benchmaker.tasks.convert import stage_progress
    from benchmaker.trajectories.convert import convert_paths
    from tests.recipes.test_convert_progress import TIMES, clock, write_logs

    logs = write_logs(tmp_path, 3)
    seen: list[StageEvent] = []
    buf = io.StringIO()
    view = SweepProgressView(
        Console(file=buf, force_terminal=True, force_interactive=True, width=240, color_system=None)
    )
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
