"""`benchmaker sandbox` as a user runs it (recipes/sandbox.py): local and a fake Flash."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from benchmaker.recipes.cli import main
from tests.replay.test_sandbox_flash import FakeFlash


def _rows(out: Path) -> tuple[dict, list[dict]]:
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    rows = sorted((json.loads(x) for x in (bundle / "samples.jsonl").read_text().splitlines()), key=lambda r: r["seq"])
    return json.loads((bundle / "manifest.json").read_text()), rows


def test_local_lifecycle_from_the_cli(tmp_path: Path, capsys):
    code = main(
        [
            "sandbox",
            "--command",
            "echo hi",
            "--mode",
            "lifecycle",
            "--max-requests",
            "3",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    manifest, rows = _rows(tmp_path)
    summary = json.loads((tmp_path / manifest["run_id"] / "summary.json").read_text())
    # valid: the suite's host-load limits (tests/conftest.py) keep a busy host's loop lag out of it
    assert (code, summary["verdict"]["reasons"]) == (0, [])
    assert manifest["kind"] == "sandbox" and manifest["workload"]["mode"] == "lifecycle"
    assert [r["outcome"] for r in rows] == ["ok"] * 3
    assert all({"create_ms", "exec_ms", "delete_ms"} <= set(r["meta"]) for r in rows)


def test_nonzero_exit_makes_the_run_fail_the_error_rate_check(tmp_path: Path, capsys):
    code = main(
        [
            "sandbox",
            "--command",
            "exit 1",
            "--max-requests",
            "2",
            "--out-dir",
            str(tmp_path),
            "--max-error-rate",
            "0.5",
            "--no-progress",
        ]
    )
    assert code == 1  # 2 of 2 graded_wrong > 0.5
    _, rows = _rows(tmp_path)
    assert [r["outcome"] for r in rows] == ["graded_wrong", "graded_wrong"]


def test_flash_without_url_is_a_named_input_error(tmp_path: Path, capsys):
    code = main(
        ["sandbox", "--command", "true", "--target", "flash", "--out-dir", str(tmp_path), "--max-requests", "1"]
    )
    assert code == 2
    assert "--url: target flash needs the coordinator URL" in capsys.readouterr().err


async def test_flash_exec_from_the_cli(tmp_path: Path, capsys):
    async with FakeFlash() as fake:
        fake.sandboxes.add("sb-x")
        code = await asyncio.to_thread(
            main,
            [
                "sandbox",
                "--target",
                "flash",
                "--url",
                fake.url,
                "--sandbox-id",
                "sb-x",
                "--command",
                "echo 1",
                "--rate",
                "closed:2",
                "--max-requests",
                "4",
                "--out-dir",
                str(tmp_path),
                "--no-progress",
            ],
        )
        calls = list(fake.calls)
    manifest, rows = _rows(tmp_path)
    summary = json.loads((tmp_path / manifest["run_id"] / "summary.json").read_text())
    assert code == (0 if summary["verdict"]["valid"] else 1)
    assert [(r["outcome"], r["output_chars"], r["meta"]["exit_code"]) for r in rows] == [("ok", 2, 0)] * 4
    assert calls == [("POST", "/sandboxes/sb-x/exec")] * 4


def test_sandbox_command_alone_runs_as_written(tmp_path: Path, capsys):
    # neither --duration nor --max-requests: 10 samples (recipes/sandbox.py DEFAULT_SAMPLES)
    code = main(["sandbox", "--command", "echo hi", "--out-dir", str(tmp_path), "--no-progress"])
    manifest, rows = _rows(tmp_path)
    assert code == 0, capsys.readouterr()
    assert manifest["config"]["max_requests"] == 10 and manifest["config"]["duration_s"] is None
    assert [r["outcome"] for r in rows] == ["ok"] * 10


def test_a_load_without_an_end_names_the_flags(tmp_path: Path, capsys):
    code = main(
        [
            "llm",
            "--url",
            "http://127.0.0.1:9/v1/chat/completions",
            "--model",
            "m",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err == (
        "benchmaker: error: options: give --duration or --max-requests (the load never ends otherwise)\n"
    )
