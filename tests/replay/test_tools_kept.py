"""Tool definitions are kept where a log has them, in chat completions shape
(`Trajectory.tools`): the apis modules' readers of each wire API's `tools`, the
converters' shared normaliser, the converters whose logs carry them, and the real logs
(none of which carries any)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.apis import anthropic_messages, gemini, openai_chat, openai_responses
from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.converters.tool_calls import chat_shape_tools

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / ".." / "shared" / "data"

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": SCHEMA}}


def test_chat_tools_are_kept_as_sent():
    custom = {"type": "custom", "custom": {"name": "apply_patch", "description": "Patch files."}}
    assert openai_chat.chat_tools({"tools": [BASH, custom, "junk"]}) == [BASH, custom]
    assert openai_chat.chat_tools({"tools": []}) is None
    assert openai_chat.chat_tools({"messages": []}) is None


def test_responses_tools_become_chat_tools_and_hosted_ones_are_left_out():
    req = {
        "tools": [
            {"type": "function", "name": "bash", "description": "Run a command.", "parameters": SCHEMA},
            {"type": "custom", "name": "apply_patch", "description": "Patch files.", "format": {"type": "text"}},
            {"type": "web_search"},
        ]
    }
    assert openai_responses.chat_tools(req) == [
        BASH,
        {
            "type": "custom",
            "custom": {"name": "apply_patch", "description": "Patch files.", "format": {"type": "text"}},
        },
    ]
    assert openai_responses.chat_tools({"tools": [{"type": "web_search"}]}) is None


def test_messages_client_tools_become_functions_and_server_tools_are_left_out():
    req = {
        "tools": [
            {"name": "bash", "description": "Run a command.", "input_schema": SCHEMA},
            {"type": "custom", "name": "Read", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ]
    }
    assert anthropic_messages.chat_tools(req) == [
        BASH,
        {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}},
    ]


def test_gemini_function_declarations_become_functions():
    req = {
        "tools": [
            {"functionDeclarations": [{"name": "bash", "description": "Run a command.", "parameters": SCHEMA}]},
            {"googleSearch": {}},
            {"function_declarations": [{"name": "ls", "parametersJsonSchema": {"type": "object"}}]},
        ]
    }
    assert gemini.chat_tools(req) == [
        BASH,
        {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}},
    ]


def test_chat_shape_tools_reads_every_shape_a_log_keeps():
    assert chat_shape_tools(
        [
            BASH,
            {"name": "bash", "description": "Run a command.", "input_schema": SCHEMA},  # Anthropic
            {"type": "function", "name": "bash", "description": "Run a command.", "parameters": SCHEMA},  # flat
            {"name": "bash", "description": "Run a command.", "parameters": SCHEMA},  # bare
            {"type": "code_interpreter"},
            7,
        ]
    ) == [BASH, BASH, BASH, BASH]
    assert chat_shape_tools("bash") is None and chat_shape_tools([{}]) is None


def test_an_openai_messages_row_keeps_its_tools(tmp_path: Path):
    row = {
        "instance_id": "demo-1",
        "tools": [BASH],
        "messages": [
            {"role": "user", "content": "List the files."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"role": "assistant", "content": "One file: a.py."},
        ],
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (traj,) = list(iter_trajectories(path))
    assert traj.source.format == "openai-messages"
    assert traj.tools == [BASH]
    assert json.loads(traj.model_dump_json())["tools"] == [BASH]


def test_an_atif_trajectory_keeps_its_tool_definitions(tmp_path: Path):
    doc = {
        "schema_version": "ATIF-v1.5",
        "session_id": "s1",
        "agent": {
            "name": "demo",
            "version": "1",
            "model_name": "m",
            "tool_definitions": [{"type": "function", "function": BASH["function"]}],
        },
        "steps": [
            {"step_id": 1, "source": "user", "message": "List the files."},
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "ls"}}],
                "observation": {"results": [{"source_call_id": "c1", "content": "a.py"}]},
            },
            {"step_id": 3, "source": "agent", "message": "One file: a.py."},
        ],
    }
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(doc))
    (traj,) = list(iter_trajectories(path))
    assert traj.source.format == "atif"
    assert traj.tools == [BASH]


@pytest.mark.parametrize("folder", ["real", "real-agents"])
def test_no_real_log_has_tool_definitions_so_none_is_invented(folder: str):
    src = SHARED / folder
    if not src.is_dir():
        pytest.skip(f"{src} absent")
    logs = sorted(p for p in src.iterdir() if p.suffix in (".jsonl", ".json", ".traj") and "chunks" not in p.name)
    logs = [p for p in logs if not p.name.endswith(".all_preds.jsonl")]
    assert logs
    for path in logs:
        tools = [t.tools for t in iter_trajectories(path)]
        assert tools and set(map(repr, tools)) == {"None"}, path.name
