"""`benchmaker swebench-replay` prints its plan before any work; `--dry-run` prints only
the plan; `--logs a b` (what a shell glob gives) takes every file after one flag."""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmaker.recipes.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
PI_EVENTS = REPO / "tests" / "replay" / "fixtures" / "pi_v3_tree.jsonl"


def test_dry_run_with_a_glob_of_logs_prints_only_the_plan(tmp_path: Path, capsys) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    a, b = shutil.copy(EXAMPLE, logs / "a.pi.jsonl"), shutil.copy(PI_EVENTS, logs / "b.pi.jsonl")
    out_dir = tmp_path / "artifacts"
    assert (
        main(
            [
                "swebench-replay",
                "--logs",
                str(a),
                str(b),
                "--concurrency",
                "4,1,16",
                "--dry-run",
                "--out-dir",
                str(out_dir),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert text.startswith("plan: 3 sweep point(s) x 2 trajectory(ies)")
    assert [line.split()[0] for line in text.splitlines()[1:4]] == ["c4", "c1", "c16"]  # in the sweep's order
    assert "  c16    16 in flight: 16 episode(s)," in text  # max(16, 2 trajectories) episodes
    # nothing ran: the logs' one conversion is in the cache the run would have read (benchmaker.tasks.convert)
    assert [f.relative_to(out_dir).parts[::3] for f in out_dir.rglob("*") if f.is_file()] == [
        ("_cache", "trajectories.jsonl")
    ]
    # the repeated flag is the same list
    assert (
        main(
            [
                "swebench-replay",
                "--logs",
                str(a),
                "--logs",
                str(b),
                "--concurrency",
                "1",
                "--dry-run",
                "--out-dir",
                str(out_dir),
            ]
        )
        == 0
    )
    assert "x 2 trajectory(ies)" in capsys.readouterr().out
