"""`benchmaker convert LOGS... -o trajectories.jsonl [--format F] [--lenient]`: convert
agent logs into a trajectories JSONL (benchmaker.trajectories.convert.convert_paths) and print the report
as a table. Exit 0 on success; 2 on bad input with `benchmaker: error: ...`: one line
for one bad input, else a count line and one line per input that could not be
converted, each named by its full path (`--lenient` skips and counts them instead).

On a terminal a live line shows the conversion per file while it runs (files done/total,
MB of logs, turns, elapsed, ETA: `ConvertProgressView`); piped or logged, nothing but the
report is printed."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Annotated

from cyclopts import Parameter
from rich.console import Console
from rich.table import Table

from benchmaker.engine.config import check_output_file
from benchmaker.recipes.app import app
from benchmaker.trajectories.convert import ConvertProgress, ConvertReport, convert_paths
from benchmaker.trajectories.converters import FORMATS
from benchmaker.trajectories.errors import InputError, OutputWriteError


class ConvertProgressView:
    """The live line of a conversion on a terminal (rich): `convert`, a bar of the bytes
    converted, and `ConvertProgress.describe()` (files done/total, MB, turns, elapsed,
    ETA). Redrawn on the first event, then when `min_interval_s` more seconds have
    elapsed (the events' own `elapsed_s`, so an injected clock drives it) and on the
    last event; the line stays after the end. When `out` is not a terminal it shows
    nothing and `callback` is None (convert_paths then reports to no one)."""

    def __init__(self, out: Console, min_interval_s: float = 0.1) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        self.out = out
        self.min_interval_s = min_interval_s
        self.progress = Progress(
            TextColumn("[bold]convert"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[figures]}"),
            console=out,
            auto_refresh=False,
            transient=False,
        )
        self.task = self.progress.add_task("convert", total=1, figures="")  # a total: no pulsing (timed) bar
        self._drawn: float | None = None
        self._active = False

    @property
    def callback(self) -> Callable[[ConvertProgress], None] | None:
        """The progress callback for convert_paths, None when nothing is shown."""
        return self if self._active else None

    def __call__(self, ev: ConvertProgress) -> None:
        self.progress.update(self.task, completed=ev.bytes_done, total=max(1, ev.bytes_total), figures=ev.describe())
        if self._drawn is None or ev.finished or ev.elapsed_s - self._drawn >= self.min_interval_s:
            self._drawn = ev.elapsed_s
            self.progress.refresh()

    def __enter__(self) -> ConvertProgressView:
        if self.out.is_interactive:  # a terminal that can redraw a line (not TERM=dumb)
            self._active = True
            self.progress.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._active:
            self._active = False
            self.progress.stop()


def render_report(report: ConvertReport, console: Console) -> None:
    """Print the per-file table, the totals and the skip counts. A file's path and its
    error are folded onto more lines, never cut: on a narrow or non-terminal output (80
    columns) the path is how the user finds the file."""
    table = Table(title=f"convert → {report.out}")
    table.add_column("file", overflow="fold")
    table.add_column("format")
    table.add_column("trajectories", justify="right")
    table.add_column("turns", justify="right")
    table.add_column("error", overflow="fold")
    for f in report.files:
        table.add_row(f.path, f.format or "-", str(f.trajectories), str(f.turns), f.error or "")
    table.add_row("total", "", str(report.trajectories), str(report.turns), "", style="bold")
    console.print(table)
    if report.skipped:
        skipped = Table(title="skipped / synthesised (count by reason)")
        skipped.add_column("reason")
        skipped.add_column("count", justify="right")
        for reason, n in report.skipped.items():
            skipped.add_row(reason, str(n))
        console.print(skipped)


@app.command(name="convert")
def convert(
    logs: list[Path],
    /,
    *,
    output: Annotated[Path, Parameter(name=["--output", "-o"])] = Path("trajectories.jsonl"),
    format: Annotated[
        str | None,
        Parameter(
            help=("Force a format instead of detecting it from the content. Formats: " + ", ".join(FORMATS) + ".")
        ),
    ] = None,
    lenient: bool = False,
) -> int:
    """Convert agent logs (pi session/event files, harbor trial dirs, SWE-agent .traj,
    mini-swe-agent, OpenHands event files and SDK conversation dirs, Gemini CLI chat
    recordings, Claude Code sessions, Codex CLI rollouts, OpenAI message rows) into
    trajectories JSONL; each file's format is detected from its content
    (docs/log-formats.md).

    Parameters
    ----------
    logs
        Log files or directories (walked; a harbor trial directory and an OpenHands
        conversation directory, base_state.json + events/, are one unit each).
    output
        Output trajectories JSONL (written atomically).
    lenient
        Skip and count bad records and files instead of failing (without it, every
        file that cannot be converted is named and the exit code is 2).
    """
    check_output_file(output, "--output")
    return run_convert(list(logs), output, fmt=format, lenient=lenient, console=Console())


def run_convert(
    logs: list[Path],
    output: Path,
    *,
    fmt: str | None,
    lenient: bool,
    console: Console,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """The `convert` command's work: convert with live progress on `console` when it is a
    terminal (ConvertProgressView; times from `clock`, s), then print the report table.
    Returns 0, or 2 after printing `benchmaker: error: ...` to stderr for bad input, 1
    when the output could not be written (a full disk: OutputWriteError)."""
    with ConvertProgressView(console) as view:
        try:
            report: ConvertReport | InputError | OutputWriteError = convert_paths(
                logs, output, fmt=fmt, lenient=lenient, progress=view.callback, clock=clock
            )
        except (InputError, OutputWriteError) as exc:
            report = exc
    if isinstance(report, InputError | OutputWriteError):  # printed after the live line has stopped
        print(f"benchmaker: error: {report}", file=sys.stderr)
        return 2 if isinstance(report, InputError) else 1
    render_report(report, console)
    return 0
