"""The real Codex CLI (npm `@openai/codex`, Responses only, streamed) against our
/v1/responses: recorded through `benchmaker record` in front of a replay server that
plays a two-call task, its own rollout converted, and both replayed with the real agent
in the loop (its tool runs for real, only the model is replayed) with zero misses.

Installed by `conformance/setup_venvs.sh codex` into `<conformance cache>/codex` (npm,
~30 s, ~420 MB); each run gets its own HOME / CODEX_HOME and working folder. A failed
install fails the test with npm's reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.store import load_trajectories
from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.trajectory import (
    Response,
    Source,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    match_key_for,
)
from conformance.venvs import venv_bin
from tests.conformance.conftest import need

CONFORMANCE = True
TASK = "task_id: codex-conformance\nWrite hello into out.txt"


@pytest.fixture(scope="module")
def codex_bin() -> Path:
    need("codex")
    return venv_bin("codex", "codex")


def _task() -> Trajectory:
    return Trajectory(
        trajectory_id="codex-task",
        source=Source(format="hand", path="inline", sha256="0" * 64),
        match_key=match_key_for(TASK),
        model="gpt-5.5",
        first_user=TASK,
        turns=[
            Turn(
                index=0,
                response=Response(
                    reasoning="I will write the file.",
                    finish_reason="tool_calls",
                    tool_calls=[
                        ToolCall(id="call_1", name="exec_command", arguments_raw='{"cmd":"echo hello > out.txt"}')
                    ],
                ),
                usage=Usage(
                    prompt_tokens=1000, completion_tokens=20, total_tokens=1020, cached_tokens=0, reasoning_tokens=5
                ),
            ),
            Turn(
                index=1,
                response=Response(content="Done: out.txt holds hello.", finish_reason="stop"),
                usage=Usage(
                    prompt_tokens=1100, completion_tokens=8, total_tokens=1108, cached_tokens=1000, reasoning_tokens=0
                ),
            ),
        ],
    )


def _run_codex(codex: Path, base_url: str, home: Path, work: Path) -> subprocess.CompletedProcess:
    """One `codex exec` of TASK in `work` against `base_url` (…/v1), HOME and CODEX_HOME = `home`."""
    home.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "bench"\n\n[model_providers.bench]\nname = "bench"\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "BENCH_API_KEY"\n'
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home), "BENCH_API_KEY": "dummy"}
    return subprocess.run(
        [str(codex), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--json", TASK],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _replay_with_codex(codex: Path, store: Path, tmp: Path, name: str) -> dict:
    with start_replay_server(store, divergence="status") as server:
        done = _run_codex(codex, server.url + "/v1", tmp / f"home-{name}", tmp / f"work-{name}")
        assert done.returncode == 0, done.stderr[-2000:]
        assert (tmp / f"work-{name}" / "out.txt").read_text() == "hello\n"
        return server.stats()


def test_codex_records_converts_and_replays_with_zero_misses(codex_bin: Path, tmp_path: Path):
    task = tmp_path / "task.jsonl"
    task.write_text(_task().model_dump_json() + "\n")
    recorded = tmp_path / "recorded.jsonl"
    with start_replay_server(task) as upstream:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmaker.recipes.cli", "record", "--upstream", upstream.url, "-o", str(recorded)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:"), proc.stderr.read()
            done = _run_codex(codex_bin, url + "/v1", tmp_path / "home", tmp_path / "work")
            assert done.returncode == 0, done.stderr[-2000:]
            events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            assert events[-1]["type"] == "turn.completed"
            # the agent read the replayed usage: 1000 + 1100 input tokens, 1000 cached
            assert (events[-1]["usage"]["input_tokens"], events[-1]["usage"]["cached_input_tokens"]) == (2100, 1000)
            assert (tmp_path / "work" / "out.txt").read_text() == "hello\n"
            flushed = httpx.post(url + "/flush").json()
        finally:
            proc.terminate()
            proc.wait(10)
            proc.stdout.close()
            proc.stderr.close()
    assert (flushed["trajectories"], flushed["turns"]) == (1, 2)
    (rec,) = [t for _, t in load_trajectories(recorded)]
    assert rec.match_key == "task:codex-conformance"
    assert [(c.name, c.arguments_raw) for c in rec.turns[0].response.tool_calls] == [
        ("exec_command", '{"cmd":"echo hello > out.txt"}')
    ]
    assert rec.turns[1].response.content == "Done: out.txt holds hello."
    (rollout,) = list((tmp_path / "home" / "sessions").rglob("rollout-*.jsonl"))
    (conv,) = list(iter_trajectories(rollout))
    assert (conv.source.format, conv.match_key, len(conv.turns)) == ("codex-rollout", "task:codex-conformance", 2)
    assert [t.usage.prompt_tokens for t in conv.turns] == [1000, 1100]
    converted = tmp_path / "converted.jsonl"
    converted.write_text(conv.model_dump_json() + "\n")
    for name, store in (("recorded", recorded), ("converted", converted)):
        stats = _replay_with_codex(codex_bin, store, tmp_path, name)
        assert stats["misses"]["total"] == 0 and stats["served"] == 2, (name, stats)
        assert stats["divergences"]["total"] == 0, (name, stats)
