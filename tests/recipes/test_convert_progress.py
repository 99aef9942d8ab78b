"""Live per-file progress of `benchmaker convert`: on a terminal one
rich line (files done/total, MB, turns, elapsed, ETA) redrawn per file, driven by an
injected clock; nothing but the report when the output is not a terminal."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from benchmaker.recipes.convert import run_convert
from benchmaker.trajectories.convert import ConvertProgress, convert_paths

FILE_BYTES = 100_000


def write_logs(d: Path, n: int = 3) -> list[Path]:
    """`n` OpenAI message-row logs of exactly FILE_BYTES bytes, one turn each."""
    paths = []
    for k in range(n):
        row = {"messages": [{"role": "user", "content": f"task {k} "}, {"role": "assistant", "content": "ok"}]}
        row["messages"][0]["content"] += "x" * (FILE_BYTES - len(json.dumps(row)) - 1)
        path = d / f"log-{k}.jsonl"
        path.write_bytes((json.dumps(row) + "\n").encode())
        assert path.stat().st_size == FILE_BYTES
        paths.append(path)
    return paths


def clock(*values: float) -> Callable[[], float]:
    it: Iterator[float] = iter(values)
    return lambda: next(it)


@pytest.fixture(autouse=True)
def _xterm(monkeypatch):
    """The terminal these tests emulate is an xterm, whatever TERM the suite runs under
    (rich draws no cursor codes for TERM=dumb, as Emacs shells and some CI set it)."""
    monkeypatch.setenv("TERM", "xterm-256color")


def terminal() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(
        file=buf, force_terminal=True, force_interactive=True, width=240, color_system=None, legacy_windows=False
    ), buf


# clock reads: start, the start event, after each of the 3 files, the last event
TIMES = (100.0, 100.0, 100.04, 104.0, 106.0, 106.0)


def test_progress_events_count_files_bytes_turns_and_price_the_rest(tmp_path: Path) -> None:
    seen: list[ConvertProgress] = []
    convert_paths(write_logs(tmp_path), tmp_path / "out.jsonl", progress=seen.append, clock=clock(*TIMES))
    t = 3 * FILE_BYTES
    assert seen == [
        ConvertProgress(0, 3, 0, t, 0, 0, 0.0),
        ConvertProgress(1, 3, FILE_BYTES, t, 1, 1, 100.04 - 100.0),
        ConvertProgress(2, 3, 2 * FILE_BYTES, t, 2, 2, 4.0),
        ConvertProgress(3, 3, t, t, 3, 3, 6.0),
        ConvertProgress(3, 3, t, t, 3, 3, 6.0, finished=True),
    ]
    assert [e.eta_s for e in seen] == [None, 2 * FILE_BYTES * (100.04 - 100.0) / FILE_BYTES, 2.0, 0.0, 0.0]
    assert seen[2].describe() == "files 2/3 · 0.2/0.3 MB · 2 turns · 4.0 s · ETA 2 s"


def test_a_failing_progress_callback_never_fails_the_conversion(tmp_path: Path) -> None:
    calls = []

    def broken(ev: ConvertProgress) -> None:
        calls.append(ev)
        raise RuntimeError("display gone")

    report = convert_paths(write_logs(tmp_path), tmp_path / "out.jsonl", progress=broken)
    assert report.trajectories == 3 and len(calls) == 1


def test_terminal_shows_one_line_per_file_redrawn_at_most_every_tenth_of_a_second(tmp_path: Path) -> None:
    console, buf = terminal()
    logs = write_logs(tmp_path)
    assert run_convert(logs, tmp_path / "out.jsonl", fmt=None, lenient=False, console=console, clock=clock(*TIMES)) == 0
    live, _, table = buf.getvalue().partition("\x1b[?25h")  # the cursor is shown again when the line stops
    frames = live.removeprefix("\x1b[?25l").split("\r\x1b[2K")
    bar = "━" * 20
    assert frames == [
        "convert" + " " * 23,  # the line as it starts, before any event
        "convert" + " " * 22 + "files 0/3 · 0.0/0.3 MB · 0 turns · 0.0 s · ETA ?",
        # file 1 at 0.04 s: not redrawn (< 0.1 s after the last drawing)
        "convert " + "━" * 13 + " " * 8 + "files 2/3 · 0.2/0.3 MB · 2 turns · 4.0 s · ETA 2 s",
        f"convert {bar} files 3/3 · 0.3/0.3 MB · 3 turns · 6.0 s · ETA 0 s",
        f"convert {bar} files 3/3 · 0.3/0.3 MB · 3 turns · 6.0 s · done",
        f"convert {bar} files 3/3 · 0.3/0.3 MB · 3 turns · 6.0 s · done\n",  # the line left in place
    ]
    rows = [line.split("│")[1:-1] for line in table.splitlines() if line.startswith("│")]
    assert [[c.strip() for c in r] for r in rows] == [
        *([str(p), "openai-messages", "1", "1", ""] for p in logs),
        ["total", "", "3", "3", ""],
    ]


def test_not_a_terminal_prints_only_the_report(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    assert (
        run_convert(
            write_logs(tmp_path), tmp_path / "out.jsonl", fmt=None, lenient=False, console=console, clock=clock(*TIMES)
        )
        == 0
    )
    out = buf.getvalue()
    assert "files" not in out and "\x1b" not in out
    assert out.splitlines()[0].strip() == f"convert → {tmp_path / 'out.jsonl'}"


def test_bad_input_stops_the_line_then_prints_the_one_line_error(tmp_path: Path, capsys) -> None:
    console, buf = terminal()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [\n')
    assert (
        run_convert(
            [bad],
            tmp_path / "out.jsonl",
            fmt="openai-messages",
            lenient=False,
            console=console,
            clock=clock(0.0, 0.0, 0.5, 0.5),
        )
        == 2
    )
    assert capsys.readouterr().err == f"benchmaker: error: {bad}:1: invalid JSON: Expecting value\n"
    assert buf.getvalue().endswith("files 1/1 · 0.0/0.0 MB · 0 turns · 0.5 s · done\n\x1b[?25h")
    assert not (tmp_path / "out.jsonl").exists()


def test_every_conversion_reports_per_file_to_the_progress_observers(tmp_path: Path) -> None:
    """convert_paths' default progress goes to benchmaker.progress observers, so the
    swebench-replay CLI's conversion (benchmaker.tasks.convert.ensure_converted, before the flow)
    shows per file in the terminal view that observes it."""
    from benchmaker.progress import StageEvent, observe
    from benchmaker.sweep.plan import plan_trajectories
    from benchmaker.tasks.convert import ensure_converted

    seen: list[StageEvent] = []
    with observe(seen.append):
        out, _ = ensure_converted(write_logs(tmp_path, 2), tmp_path / "cache")
    assert len(plan_trajectories(out, trusted=True)) == 2
    assert [(e.stage, e.done, e.total, e.finished) for e in seen] == [
        ("convert", 0, 2, False),
        ("convert", 1, 2, False),
        ("convert", 2, 2, False),
        ("convert", 2, 2, True),
    ]
    assert seen[-1].detail == "files · 0.2/0.2 MB · 2 turns"


def test_the_report_folds_a_long_path_and_its_error_at_80_columns_never_cuts_them() -> None:
    from benchmaker.recipes.convert import render_report
    from benchmaker.trajectories.convert import ConvertReport, FileReport

    path = "logs/" + "/".join(f"run-{k:02d}" for k in range(12)) + "/session.jsonl"  # 102 characters
    error = "line 3: turns[0].usage.completion_tokens: expected int >= 0 (got '12a')"
    report = ConvertReport(out=Path("t.jsonl"), files=[FileReport(path=path, format=None, error=error)])
    console = Console(file=io.StringIO(), width=80, color_system=None)  # a pipe: rich's 80 columns
    render_report(report, console)
    text = console.file.getvalue()
    rows = [line.split("│") for line in text.splitlines() if line.count("│") == 6]
    assert rows[-1][1].strip() == "total"
    # the file's lines, joined, are the whole path; its error's lines, the whole error
    assert "".join(r[1].strip() for r in rows[:-1]) == path
    assert "".join("".join(r[5].split()) for r in rows[:-1]) == "".join(error.split())
    assert "…" not in text
