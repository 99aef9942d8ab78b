"""mini-swe-agent 2.x observations as JSON (`{"returncode": N, "output": ...}`, its
observation_template): benchmaker.replay_server.store.exit_code_in reads the exit code they state, so the
replay server's status divergence check compares them. Real replay server on
127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.store import RecordedObservation, exit_code_in
from benchmaker.trajectories.trajectory import Observation
from tests.replay.test_server_fixtures import make_trajectory, request_messages, running_server, write_store


def _obs(code: int | None, output: str) -> str:
    """An observation as mini-swe-agent 2.x's default template writes it (multi-line)."""
    return '{\n  "returncode": ' + json.dumps(code) + ',\n  "output": ' + json.dumps(output) + "\n}"


@pytest.mark.parametrize(
    "text, code",
    [
        (_obs(0, "ok\n"), 0),
        (_obs(2, "<returncode>5</returncode> exit code 7"), 2),  # the JSON key, not the output's text
        ('{"returncode": 127, "output": "sh: 1: foo: not found\\n"}', 127),  # one-line template
        (
            '{"returncode": -9, "output_head": "a", "output_tail": "b", "elided_chars": 3, "warning": "Output too long."}',
            -9,
        ),
        ('  {"returncode":1,"output":""}', 1),  # leading whitespace, compact
        ('{"output": "x", "exception_info": "", "returncode": 4}', 4),  # not the first key: parsed
        (_obs(None, "exit code 3"), None),  # null: the JSON states none; its output text is no code
        ('{"returncode": true, "output": ""}', None),  # not an integer
        ('{"output": "the returncode was 0"}', None),  # no returncode key
        ('{"returncode": 1, "output": "cut', 1),  # a cut document still states it up front
        ('{ broken "returncode" ... exit code 6', 6),  # not JSON: the text forms
        ("<returncode>2</returncode>\n<output>x</output>", 2),  # the 1.x form still read
    ],
)
def test_exit_code_in_reads_the_json_form(text: str, code: int | None) -> None:
    assert exit_code_in(text) == code


def test_recorded_json_observation_gets_its_exit_code() -> None:
    obs = Observation(tool_call_id=None, name="bash", content=_obs(1, "FAILED"), exit_code=None)
    assert RecordedObservation.of(obs).exit_code == 1


def _mini_v2(task: str):
    """A text-action trajectory (no tool_call_ids) whose observations are 2.x JSON with no
    recorded exit_code (as a converter that keeps only the text gives them)."""
    traj = make_trajectory(task, 3, tool_call_ids=False)
    turns = []
    for t in traj.turns:
        obs = [
            o.model_copy(update={"content": _obs(1 if t.index == 0 else 0, f"out {t.index}"), "exit_code": None})
            for o in t.observations
        ]
        turns.append(t.model_copy(update={"observations": obs}))
    return traj.model_copy(update={"turns": turns})


def _post(client: httpx.Client, url: str, messages: list) -> httpx.Response:
    return client.post(url + "/v1/chat/completions", json={"model": "x", "messages": messages})


def test_status_divergence_compares_json_return_codes(tmp_path: Path) -> None:
    traj = _mini_v2("mini-v2")
    path = write_store(tmp_path / "t.jsonl", [traj])
    msgs = request_messages(traj, 1)
    assert msgs[-1] == {"role": "user", "content": _obs(1, "out 0")}
    with running_server(path, divergence="status") as url, httpx.Client() as client:
        assert "x-replay-divergence" not in _post(client, url, msgs).headers  # faithful
        # other output, same return code: no status divergence
        other = msgs[:-1] + [{"role": "user", "content": _obs(1, "different output")}]
        r = _post(client, url, other)
        assert r.status_code == 200 and "x-replay-divergence" not in r.headers
        # the command succeeded where the recording failed: a status divergence, served
        flipped = msgs[:-1] + [{"role": "user", "content": _obs(0, "out 0")}]
        r = _post(client, url, flipped)
        assert r.status_code == 200 and r.headers["x-replay-divergence"] == "status"
        stats = client.get(url + "/stats").json()
    assert stats["divergences"] == {"status": 1, "content": 0, "total": 1}
