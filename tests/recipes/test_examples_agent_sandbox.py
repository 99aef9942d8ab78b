"""examples/configs/{agent,sandbox-exec,sandbox-lifecycle}.yaml run with `benchmaker run`
(agent against a scripted OpenAI-compatible server; sandbox with the local target and a
fake Flash coordinator)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmaker.recipes.cli import main
from benchmaker.testing.scenario_server import Scenario, ScenarioServer
from tests.replay.test_sandbox_flash import FakeFlash

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"


def _rows(out: Path, code: int) -> list[dict]:
    """The samples, after checking that the run is valid and exited 0 (the suite's
    host-load limits, tests/conftest.py, keep a busy host's loop lag out of the verdict)."""
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((bundle / "summary.json").read_text())
    assert (code, summary["verdict"]["reasons"]) == (0, [])
    return [json.loads(x) for x in (bundle / "samples.jsonl").read_text().splitlines()]


async def test_agent_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    async with ScenarioServer(Scenario()) as srv:
        monkeypatch.setenv("MODEL_URL", srv.url)
        monkeypatch.setenv("ECHO_WORD", "tok")  # the scenario server answers "tok tok ..."
        code = await asyncio.to_thread(
            main, ["run", str(CONFIGS / "agent.yaml"), "--out-dir", str(tmp_path), "--no-progress"]
        )
    rows = _rows(tmp_path, code)
    assert len(rows) == 20 and {r["outcome"] for r in rows} == {"ok"}
    assert {r["meta"]["n_model_calls"] for r in rows} == {2}  # turns: 2
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith(
        "agent.yaml needs: a model that repeats a word at MODEL_URL (an OpenAI-compatible base URL); the bundled "
        'scripted server (python -m benchmaker.testing.scenario_server) answers "tok tok ...": with it set ECHO_WORD=tok'
    ), out
    assert "the run is not valid" not in out


async def test_agent_example_with_another_word_says_what_it_needs(tmp_path: Path, monkeypatch, capsys):
    async with ScenarioServer(Scenario()) as srv:
        monkeypatch.setenv("MODEL_URL", srv.url)
        monkeypatch.delenv("ECHO_WORD", raising=False)  # "hello": the scripted server never says it
        code = await asyncio.to_thread(
            main, ["run", str(CONFIGS / "agent.yaml"), "--out-dir", str(tmp_path), "--no-progress"]
        )
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rows = [json.loads(x) for x in (bundle / "samples.jsonl").read_text().splitlines()]
    assert code == 1 and len(rows) == 20 and {r["outcome"] for r in rows} == {"graded_wrong"}
    out = " ".join(capsys.readouterr().out.split())
    assert "the run is not valid; agent.yaml needs: a model that repeats a word at MODEL_URL" in out, out


def test_sandbox_lifecycle_example_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.delenv("SANDBOX_TARGET", raising=False)
    code = main(["run", str(CONFIGS / "sandbox-lifecycle.yaml"), "--out-dir", str(tmp_path), "--no-progress"])
    rows = _rows(tmp_path, code)
    assert len(rows) == 20 and {r["outcome"] for r in rows} == {"ok"}
    assert all({"create_ms", "exec_ms", "delete_ms"} <= set(r["meta"]) for r in rows)


async def test_sandbox_exec_example_on_fake_flash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    async with FakeFlash() as fake:
        fake.sandboxes.add("sb-ex")
        monkeypatch.setenv("SANDBOX_TARGET", "flash")
        monkeypatch.setenv("FLASH_URL", fake.url)
        monkeypatch.setenv("FLASH_SANDBOX_ID", "sb-ex")
        # 10 s at poisson:20 is long for a test: the same file with 1 s
        cfg = tmp_path / "exec.yaml"
        cfg.write_text((CONFIGS / "sandbox-exec.yaml").read_text().replace("duration_s: 10s", "duration_s: 1s"))
        code = await asyncio.to_thread(main, ["run", str(cfg), "--out-dir", str(tmp_path / "out"), "--no-progress"])
        calls = set(fake.calls)
    rows = _rows(tmp_path / "out", code)
    assert rows and {r["outcome"] for r in rows} == {"ok"}
    assert {r["output_chars"] for r in rows} == {7}  # "499500\n"
    assert calls == {("POST", "/sandboxes/sb-ex/exec")}
