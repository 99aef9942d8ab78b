"""The process ids a shell tool states in its output (Gemini CLI's run_shell_command:
`Process Group PGID: N`, `Background PIDs: N, M`) differ on every run of the same
command: the replay server's content divergence check masks them, so a replayed Gemini
CLI run whose commands printed the same output is no divergence, and one whose output
differs still is. Real replay server on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest

from benchmaker.replay_server.store import RecordedObservation, pids_masked
from benchmaker.trajectories.trajectory import Observation
from tests.replay.test_server_fixtures import make_trajectory, request_messages, running_server, write_store

SHELL_OUT = "Output: passed 1 failed 2\nExit Code: 1\nProcess Group PGID: {pgid}"


@pytest.mark.parametrize(
    "text, masked",
    [
        ("Output: ok\nProcess Group PGID: 27804", "Output: ok\nProcess Group PGID: *"),
        (
            "Output: ok\nBackground PIDs: 311, 312\nProcess Group PGID: 310\n</untrusted_context>",
            "Output: ok\nBackground PIDs: *\nProcess Group PGID: *\n</untrusted_context>",
        ),
        ("Output: the PGID: 12 of it", "Output: the PGID: 12 of it"),  # not a line of its own
        ("Process Group PGID: abc", "Process Group PGID: abc"),  # no id
        ("plain output", "plain output"),
    ],
)
def test_pids_masked(text: str, masked: str) -> None:
    assert pids_masked(text) == masked


def test_recorded_observation_is_compared_masked() -> None:
    obs = Observation(tool_call_id="c", name="run_shell_command", content=SHELL_OUT.format(pgid=27824))
    rec = RecordedObservation.of(obs)
    assert (rec.stable, rec.exit_code) == ("Output: passed 1 failed 2\nExit Code: 1\nProcess Group PGID: *", 1)


def test_another_pgid_is_no_divergence_but_another_output_is(tmp_path) -> None:
    traj = make_trajectory("pids", 3)
    turns = list(traj.turns)
    obs = turns[0].observations[0].model_copy(update={"content": SHELL_OUT.format(pgid=27824), "exit_code": None})
    turns[0] = turns[0].model_copy(update={"observations": [obs]})
    traj = traj.model_copy(update={"turns": turns})
    path = write_store(tmp_path / "trajectories.jsonl", [traj])
    messages = request_messages(traj, 1)
    with running_server(path, divergence="content") as url, httpx.Client() as client:
        messages[-1]["content"] = SHELL_OUT.format(pgid=31337)
        same = client.post(url + "/v1/chat/completions", json={"messages": messages})
        messages[-1]["content"] = SHELL_OUT.format(pgid=31337).replace("failed 2", "failed 1")
        other = client.post(url + "/v1/chat/completions", json={"messages": messages})
        stats = client.get(url + "/stats").json()
    assert (same.status_code, same.headers["x-replay-turn"]) == (200, "1")
    assert (other.status_code, other.json()["error"]["code"]) == (412, "diverged")
    assert stats["divergences"] == {"status": 0, "content": 1, "total": 1}
    assert stats["misses"]["diverged"] == 1
