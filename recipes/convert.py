"""`benchmaker convert LOGS... -o trajectories.jsonl [--format F] [--lenient]`: convert
agent logs into a trajectories JSONL (replay.convert.convert_paths) and print the report
as a table. Exit 0 on success; 2 on bad input with `benchmaker: error: ...`: one line
for one bad input, else a count line and one line per input that could not be
converted, each named by its full path (`--lenient` skips and counts them instead)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from cyclopts import Parameter
from rich.console import Console
from rich.table import Table

from benchmaker.config import check_output_file
from recipes.app import app
from replay.convert import ConvertReport, convert_paths
from replay.errors import InputError


def render_report(report: ConvertReport, console: Console) -> None:
    """Print the per-file table, the totals and the skip counts."""
    table = Table(title=f"convert → {report.out}")
    table.add_column("file")
    table.add_column("format")
    table.add_column("trajectories", justify="right")
    table.add_column("turns", justify="right")
    table.add_column("error")
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
    format: str | None = None,  # noqa: A002 - the CLI flag is --format
    lenient: bool = False,
) -> int:
    """Convert agent logs (pi session/event files, harbor trial dirs, SWE-agent .traj,
    mini-swe-agent, OpenHands, OpenAI message rows) into trajectories JSONL.

    Parameters
    ----------
    logs
        Log files or directories (walked; harbor trial directories are one unit).
    output
        Output trajectories JSONL (written atomically).
    format
        Force a format instead of detecting it from the content.
    lenient
        Skip and count bad records and files instead of failing (without it, every
        file that cannot be converted is named and the exit code is 2).
    """
    check_output_file(output, "--output")
    try:
        report = convert_paths(list(logs), output, fmt=format, lenient=lenient)
    except InputError as exc:
        print(f"benchmaker: error: {exc}", file=sys.stderr)
        return 2
    render_report(report, Console())
    return 0
