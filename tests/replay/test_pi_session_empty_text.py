"""pi-session: an empty text part beside others (pi opens one for the empty closing part
of a Gemini stream) adds no line to the content; text parts are otherwise joined with
"\\n", and a lone empty text part stays the (empty) content."""

from __future__ import annotations

import json
from pathlib import Path

from benchmaker.trajectories.convert import iter_trajectories


def _session(tmp_path: Path, *assistant_contents: list[dict]) -> Path:
    lines = [
        {"type": "session", "id": "s1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"},
        {
            "type": "message",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "task_id: t\ngo"}], "timestamp": 0},
        },
    ]
    for i, content in enumerate(assistant_contents):
        calls = [p for p in content if p["type"] == "toolCall"]
        lines.append(
            {
                "type": "message",
                "timestamp": "2026-01-01T00:00:01.000Z",
                "message": {
                    "role": "assistant",
                    "content": content,
                    "stopReason": "toolUse" if calls else "stop",
                    "timestamp": 1000 * i,
                },
            }
        )
        for call in calls:
            lines.append(
                {
                    "type": "message",
                    "timestamp": "2026-01-01T00:00:01.000Z",
                    "message": {
                        "role": "toolResult",
                        "toolCallId": call["id"],
                        "toolName": call["name"],
                        "content": [{"type": "text", "text": "ok"}],
                        "isError": False,
                        "timestamp": 1000 * i + 1,
                    },
                }
            )
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_empty_text_parts_add_no_line(tmp_path: Path):
    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}
    path = _session(
        tmp_path,
        [{"type": "text", "text": "I will look."}, call, {"type": "text", "text": ""}],
        [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        [{"type": "text", "text": ""}],
    )
    (t,) = list(iter_trajectories(path))
    assert [turn.response.content for turn in t.turns] == ["I will look.", "one\ntwo", ""]
