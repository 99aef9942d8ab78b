"""`benchmaker swebench` as a user runs it (recipes/swebench.py): a scripted model (the
replay server over the tiny-task recording), the local sandbox, the warehouse."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from benchmaker.recipes.cli import main
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.convert import iter_trajectories, read_trajectories

ROOT = Path(__file__).resolve().parents[2]


def test_swebench_cli_writes_bundle_and_loads_the_warehouse(tmp_path: Path, capsys):
    (traj,) = list(iter_trajectories(ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"))
    rec = tmp_path / "model.jsonl"
    rec.write_text(traj.model_dump_json() + "\n")
    wh = tmp_path / "wh.duckdb"
    with start_replay_server(rec) as srv:
        code = main(
            [
                "swebench",
                "--url",
                srv.url,
                "--model",
                "gpt-4o-mini",
                "--task-dirs",
                str(ROOT / "examples" / "tiny-task"),
                "--attempts",
                "2",
                "--concurrency",
                "2",
                "--out-dir",
                str(tmp_path / "out"),
                "--run-id",
                "sw1",
                "--warehouse",
                str(wh),
            ]
        )
    assert code == 0
    run_dir = tmp_path / "out" / "sw1"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["run_id"], manifest["kind"]) == ("sw1", "swebench")
    trajs = list(read_trajectories(run_dir / "trajectories.jsonl"))
    assert sorted(t.trajectory_id for t in trajs) == ["sw1-tiny-task-0", "sw1-tiny-task-1"]
    assert "resolved:     2 of 2" in capsys.readouterr().out
    con = duckdb.connect(str(wh), read_only=True)
    try:
        eps = con.execute(
            "SELECT episode_id, resolved, n_turns FROM episodes WHERE run_id = 'sw1' ORDER BY episode_id"
        ).fetchall()
        n_turns = con.execute("SELECT count(*) FROM turns WHERE run_id = 'sw1'").fetchone()[0]
        grades = con.execute("SELECT verdict, count(*) FROM grades WHERE run_id = 'sw1' GROUP BY verdict").fetchall()
    finally:
        con.close()
    assert eps == [("sw1-tiny-task-0", True, 4), ("sw1-tiny-task-1", True, 4)]
    assert n_turns == 8 and grades == [("resolved", 2)]


def test_flash_without_url_is_a_named_input_error(tmp_path: Path, capsys):
    code = main(
        [
            "swebench",
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--task-dirs",
            str(ROOT / "examples" / "tiny-task"),
            "--sandbox",
            "flash",
            "--out-dir",
            str(tmp_path),
        ]
    )
    assert code == 2
    assert "--sandbox flash needs both" in capsys.readouterr().err
