"""--sandbox of execute mode as a user meets it: without bwrap the CLI refuses in one
line naming the install step; `none` and `flash` are warned; `benchmaker episode`
resolves the example task inside the confined sandbox."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from benchmaker.agent.sandbox.confine import confinement
from benchmaker.recipes.cli import main
from benchmaker.recipes.swebench_replay import check_sandbox_flag
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.convert import iter_trajectories

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"
TASK = ROOT / "examples" / "tiny-task"


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch):
    """PATH without bwrap (git and python kept), the probe cache cleared around it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "python3", "bash"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    confinement.cache_clear()
    yield
    confinement.cache_clear()


@pytest.mark.parametrize(
    "argv",
    [
        [
            "swebench-replay",
            "--logs",
            str(EXAMPLE),
            "--concurrency",
            "1",
            "--mode",
            "execute",
            "--task-dirs",
            str(TASK),
        ],
        ["episode", str(EXAMPLE), "--url", "http://127.0.0.1:9", "--mode", "execute", "--workdir", str(TASK)],
        ["sandbox", "--command", "true", "--max-requests", "1"],
    ],
)
def test_execute_mode_without_bwrap_is_refused_in_one_line(argv, no_bwrap, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(
        [
            *argv,
            *(
                ["--out-dir", str(tmp_path / "out"), "--warehouse", str(tmp_path / "w.duckdb")]
                if argv[0] == "swebench-replay"
                else ["--out-dir", str(tmp_path / "out")]
                if argv[0] == "sandbox"
                else []
            ),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        "benchmaker: error: --sandbox local: local sandboxes confine commands with bubblewrap, and bwrap "
        "is not installed: run make install (as root it runs apt-get install -y bubblewrap), or pass "
        "--sandbox none to run them unconfined\n"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "w.duckdb").exists()  # refused before any work


def test_the_sandbox_command_runs_unconfined_without_bwrap_when_told_and_warns(no_bwrap, tmp_path, capsys):
    runs = tmp_path / "runs"
    code = main(["sandbox", "--command", "true", "--sandbox", "none", "--max-requests", "2", "--out-dir", str(runs)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.startswith("warning: --sandbox none: tool commands and the verifier run unconfined as ")
    [bundle] = list(runs.iterdir())
    samples = [json.loads(line) for line in (bundle / "samples.jsonl").read_text().splitlines()]
    assert [s["outcome"] for s in samples] == ["ok", "ok"]


def test_unconfined_choices_print_one_warning_line(capsys):
    check_sandbox_flag("none", "execute")
    check_sandbox_flag("flash", "command")
    check_sandbox_flag("none", "recorded")  # recorded mode runs nothing: no warning
    check_sandbox_flag("local", "execute")  # confined: no warning (bwrap is here)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0:2] for line in lines] == [["warning", " --sandbox none"], ["warning", " --sandbox flash"]]
    assert "run unconfined as" in lines[0] and "only for recordings you trust" in lines[0]


def test_episode_resolves_the_example_task_in_the_confined_sandbox(tmp_path: Path, capsys):
    (traj,) = list(iter_trajectories(EXAMPLE))
    rec = tmp_path / "t.jsonl"
    rec.write_text(traj.model_dump_json() + "\n")
    with start_replay_server(rec) as srv:
        code = main(["episode", str(EXAMPLE), "--url", srv.url, "--mode", "execute", "--workdir", str(TASK)])
    out = capsys.readouterr()
    assert code == 0, out.err
    record = json.loads(out.out)
    assert (record["outcome"], record["resolved"], record["reverified"], record["divergences"]) == ("ok", True, True, 0)
    assert record["tool_time_ns"] > 0
    assert os.path.exists(TASK / "tinycalc" / "ranges.py")  # the task dir itself untouched
    assert "stop + 1" not in (TASK / "tinycalc" / "ranges.py").read_text()
