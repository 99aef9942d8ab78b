"""Fidelity fixes of existing converters: mini-swe-agent keeps the raw response's
reasoning; a SWE-agent call kept only in `trajectory` becomes a turn or a counted skip.
Real logs from ../shared/data/real-agents convert with their model-call counts and replay
with 0 misses (skipped cleanly when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.trajectories.convert import convert_paths, iter_trajectories
from tests.replay.replay_turns import replay_turns

_REAL_DIRS = [
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real-agents",
    Path("/work/shared/data/real-agents"),
]
REAL = next((d for d in _REAL_DIRS if d.is_dir()), _REAL_DIRS[0])


def _mini(tmp_path: Path, reasoning_key: str) -> Path:
    response = {
        "id": "r",
        "model": "google/gemini-3-pro-preview",
        "choices": [
            {
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "THOUGHT: look\n\n```bash\nls\n```",
                    reasoning_key: "**Plan**\n\nlist files",
                },
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59},
    }
    doc = {
        "trajectory_format": "mini-swe-agent-1",
        "info": {"exit_status": "Submitted", "submission": ""},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "THOUGHT: look\n\n```bash\nls\n```", "extra": {"response": response}},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>a</output>"},
        ],
    }
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
def test_mini_swe_agent_keeps_the_raw_response_reasoning(tmp_path, key):
    (traj,) = iter_trajectories(_mini(tmp_path, key))
    assert traj.turns[0].response.reasoning == "**Plan**\n\nlist files"
    assert traj.turns[0].usage.completion_tokens == 9


def _swe(tmp_path: Path, final_action: str, calls: list[tuple[str, dict]]) -> Path:
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"}]
    steps = []
    for k, (name, args) in enumerate(calls):
        history.append(
            {
                "role": "assistant",
                "content": f"thought {k}",
                "tool_calls": [
                    {"id": f"c{k}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                ],
            }
        )
        history.append({"role": "tool", "content": f"out {k}", "tool_call_ids": [f"c{k}"]})
        steps.append({"action": f"{name} ...", "observation": f"out {k}", "response": "", "thought": f"thought {k}"})
    steps.append({"action": final_action, "observation": "diff --git a/x b/x", "response": "", "thought": "done"})
    doc = {"history": history, "trajectory": steps, "info": {"exit_status": "submitted", "submission": "diff"}}
    path = tmp_path / "inst-1.traj"
    path.write_text(json.dumps(doc))
    return path


def test_swe_agent_final_submit_only_in_trajectory_is_a_turn(tmp_path):
    (traj,) = iter_trajectories(_swe(tmp_path, "submit", [("open", {"path": "x"})]))
    assert len(traj.turns) == 2
    last = traj.turns[-1]
    assert last.response.content == "done"
    assert [(c.id, c.name, c.arguments_raw) for c in last.response.tool_calls] == [("inst-1-step-1", "submit", "{}")]
    assert [(o.tool_call_id, o.content) for o in last.observations] == [("inst-1-step-1", "diff --git a/x b/x")]
    assert traj.skipped == {"arguments_raw_synthesized": 1, "turn_from_trajectory": 1}


def test_swe_agent_bash_only_history_rebuilds_the_command(tmp_path):
    (traj,) = iter_trajectories(_swe(tmp_path, "python run.py", [("bash", {"command": "ls"})]))
    assert [(c.name, c.arguments) for c in traj.turns[-1].response.tool_calls] == [
        ("bash", {"command": "python run.py"})
    ]


def test_swe_agent_step_that_cannot_be_rebuilt_is_a_counted_skip(tmp_path):
    (traj,) = iter_trajectories(_swe(tmp_path, "edit 1:2 'x'", [("open", {"path": "x"})]))
    assert len(traj.turns) == 1
    assert traj.skipped == {"call_only_in_trajectory": 1}


@pytest.mark.parametrize(
    "name, calls",
    [
        ("swe-agent-6e44b9-sweagenttestrepo-1c2844.traj", 5),  # SOURCES.md: 5 api calls, the last only in trajectory
        ("mini-swe-agent-1.15.0-gemini3-django-16429.traj.json", 20),
    ],
)
def test_real_logs_convert_every_call_and_replay(tmp_path, name, calls):
    path = REAL / name
    if not path.exists():
        pytest.skip(f"real log {name} not present (../shared/data/real-agents)")
    store = tmp_path / "trajectories.jsonl"
    convert_paths([path], store)
    (traj,) = iter_trajectories(path)
    assert len(traj.turns) == calls
    if name.startswith("mini"):
        assert sum(1 for t in traj.turns if t.response.reasoning) == 2  # the two raw responses with `reasoning`
    replayed = replay_turns(store, traj, divergence="content")
    assert replayed.stats["misses"]["total"] == 0
