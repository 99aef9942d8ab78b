"""Content parts with images are kept and sent on replay: a tool result that holds an
image keeps it as chat content parts (`Observation.parts`, `content_parts`) in the
converters (pi session, OpenAI messages) and is sent that way by the harness; the
replay server matches it by its text, so the replay has 0 misses and 0 divergences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from benchmaker.agent.harness import initial_messages, run_episode
from benchmaker.agent.model_client import ModelClient
from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.trajectory import Trajectory, content_parts, flatten_content

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
DATA_URL = "data:image/png;base64," + PNG_B64


async def _replayed(traj: Trajectory, tmp_path: Path) -> tuple[str, int, int]:
    """(episode outcome, turns, replay-server misses) of `traj` replayed in recorded
    mode against the replay server (divergence policy content)."""
    path = tmp_path / "t.jsonl"
    path.write_text(traj.model_dump_json() + "\n")
    with start_replay_server(path, divergence="content") as srv:
        res = await run_episode(traj, srv.url)
        stats = srv.stats()
    return res.episode.outcome, res.episode.n_turns, stats["misses"]["total"]


def test_content_parts_reads_the_image_parts_of_every_api():
    text = {"type": "text", "text": "the screenshot:"}
    want = [{"type": "text", "text": "the screenshot:"}, {"type": "image_url", "image_url": {"url": DATA_URL}}]
    for image in (
        {"type": "image", "data": PNG_B64, "mimeType": "image/png"},  # pi
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},  # Anthropic
        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},  # OpenAI chat
        {"type": "input_image", "image_url": DATA_URL},  # OpenAI Responses
        {"inlineData": {"mimeType": "image/png", "data": PNG_B64}},  # Gemini
    ):
        assert content_parts([text, image]) == want, image
    assert content_parts([text]) is None and content_parts("just text") is None
    assert flatten_content([text, {"type": "image", "data": PNG_B64, "mimeType": "image/png"}]) == "the screenshot:"


def _pi_session_with_an_image(path: Path, role: str) -> Path:
    """The bundled tiny-task pi session, its first message of `role` followed by an image
    block: "toolResult" (the `read` of tinycalc/ranges.py, as pi's read tool returns an
    image) or "user" (the prompt with a pasted screenshot)."""
    lines = RECORDING.read_text().splitlines()
    for i, line in enumerate(lines):
        entry = json.loads(line)
        msg = entry.get("message") or {}
        if msg.get("role") == role:
            msg["content"].append({"type": "image", "data": PNG_B64, "mimeType": "image/png"})
            lines[i] = json.dumps(entry)
            break
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_a_pi_tool_result_image_is_kept_and_sent_on_replay(tmp_path: Path):
    (traj,) = list(iter_trajectories(_pi_session_with_an_image(tmp_path / "session.jsonl", "toolResult")))
    obs = traj.turns[0].observations[0]
    assert obs.parts == [
        {"type": "text", "text": obs.content},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
    ]
    assert "image_part" not in traj.skipped  # kept, not counted as dropped
    path = tmp_path / "t.jsonl"
    path.write_text(traj.model_dump_json() + "\n")

    bodies: list[bytes] = []

    async def on_start(session: Any, ctx: Any, params: Any) -> None:
        bodies.append(b"")

    async def on_chunk(session: Any, ctx: Any, params: aiohttp.TraceRequestChunkSentParams) -> None:
        bodies[-1] += params.chunk

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    trace.on_request_chunk_sent.append(on_chunk)
    with start_replay_server(path, divergence="content") as srv:
        async with aiohttp.ClientSession(trace_configs=[trace]) as session:
            res = await run_episode(traj, srv.url, client=ModelClient(srv.url, model=traj.model, session=session))
        stats = srv.stats()
    ep = res.episode
    assert (ep.outcome, ep.n_turns, stats["misses"]["total"], stats["divergences"]["total"]) == ("ok", 4, 0, 0)
    second = json.loads(bodies[1])
    (tool_msg,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool_msg["content"] == obs.parts  # the image went with the result


def test_an_openai_messages_tool_result_keeps_its_image(tmp_path: Path):
    image = {"type": "image_url", "image_url": {"url": DATA_URL}}
    row = {
        "messages": [
            {"role": "user", "content": "Take a screenshot."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "done"}, image]},
            {"role": "assistant", "content": "Here it is."},
        ]
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (traj,) = list(iter_trajectories(path))
    (obs,) = traj.turns[0].observations
    assert (obs.content, obs.parts) == ("done", [{"type": "text", "text": "done"}, image])
    assert "image_part" not in traj.skipped


async def test_a_prompt_image_is_kept_and_sent_and_the_key_stays_its_text(tmp_path: Path):
    (plain,) = list(iter_trajectories(RECORDING))
    (traj,) = list(iter_trajectories(_pi_session_with_an_image(tmp_path / "session.jsonl", "user")))
    assert traj.first_user == plain.first_user and traj.match_key == plain.match_key
    assert traj.first_user_parts == [
        {"type": "text", "text": traj.first_user},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
    ]
    assert "image_part" not in traj.skipped
    assert initial_messages(traj)[-1] == {"role": "user", "content": traj.first_user_parts}
    assert await _replayed(traj, tmp_path) == ("ok", 4, 0)


def test_the_recorder_keeps_a_prompt_image_and_a_tool_result_image(tmp_path: Path):
    from benchmaker.replay_server.recorder import ChatAssembler, Recorder

    image = {"type": "image_url", "image_url": {"url": DATA_URL}}
    rec = Recorder(tmp_path / "out.jsonl")
    first = [{"role": "user", "content": [{"type": "text", "text": "What is on this screen?"}, image]}]
    call = {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
    answers = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "assistant", "content": "A login form."},
    ]
    requests = [
        first,
        [
            *first,
            answers[0],
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}, image]},
        ],
    ]
    for i, (messages, answer) in enumerate(zip(requests, answers, strict=True)):
        placed = rec.begin(messages, "m")
        assert placed is not None and placed[1] == i
        body = json.dumps({"choices": [{"index": 0, "message": answer, "finish_reason": "stop"}]}).encode()
        asm = ChatAssembler(stream=False)
        asm.feed(body, 0)
        assert asm.finish()
        rec.record(placed[0], placed[1], asm, "2026-01-01T00:00:00+00:00", 0, 1, body)
    (traj,) = rec.trajectories()
    assert traj.first_user == "What is on this screen?"
    assert traj.first_user_parts == [{"type": "text", "text": "What is on this screen?"}, image]
    (obs,) = traj.turns[0].observations
    assert (obs.content, obs.parts) == ("ok", [{"type": "text", "text": "ok"}, image])


def test_a_codex_prompt_image_is_kept_and_a_later_ones_counted(tmp_path: Path):
    from tests.replay.test_codex_rollout import small_rollout

    image = {"type": "input_image", "image_url": DATA_URL}
    lines = small_rollout().splitlines()
    users = [i for i, line in enumerate(lines) if '"role": "user"' in line and '"response_item"' in line]
    for i in users[:2]:  # the AGENTS.md prompt (the first user message) and the task prompt
        entry = json.loads(lines[i])
        entry["payload"]["content"].append(image)
        lines[i] = json.dumps(entry)
    path = tmp_path / "rollout-2026-05-11T11-26-55-x.jsonl"
    path.write_text("\n".join(lines) + "\n")
    (traj,) = list(iter_trajectories(path))
    assert traj.source.format == "codex-rollout"
    assert traj.first_user_parts == [
        {"type": "text", "text": "# AGENTS.md instructions"},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
    ]
    assert traj.skipped["image_part"] == 1  # the task prompt's image: only the first prompt keeps its parts


async def test_a_claude_code_screenshot_prompt_and_tool_result_image_replay(tmp_path: Path):
    from tests.replay.test_claude_code import _assistant, _line

    source = {"type": "base64", "media_type": "image/png", "data": PNG_B64}
    usage = {"input_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 5}
    prompt = [{"type": "text", "text": "Why does this page look broken?"}, {"type": "image", "source": source}]
    result = [{"type": "text", "text": "saved shot.png"}, {"type": "image", "source": source}]
    lines = [
        _line("user", "u1", None, "2026-01-01T00:00:00.000Z", message={"role": "user", "content": prompt}),
        _assistant(
            "a1",
            "u1",
            "2026-01-01T00:00:01.000Z",
            "r1",
            [{"type": "tool_use", "id": "toolu_1", "name": "Screenshot", "input": {}}],
            usage,
        ),
        _line(
            "user",
            "u2",
            "a1",
            "2026-01-01T00:00:02.000Z",
            message={
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}],
            },
        ),
        _assistant(
            "a2", "u2", "2026-01-01T00:00:03.000Z", "r2", [{"type": "text", "text": "The CSS is missing."}], usage
        ),
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    (traj,) = list(iter_trajectories(path))
    image = {"type": "image_url", "image_url": {"url": DATA_URL}}
    assert traj.source.format == "claude-code"
    assert (traj.first_user, traj.first_user_parts) == (
        "Why does this page look broken?",
        [{"type": "text", "text": "Why does this page look broken?"}, image],
    )
    (obs,) = traj.turns[0].observations
    assert (obs.content, obs.parts) == ("saved shot.png", [{"type": "text", "text": "saved shot.png"}, image])
    assert "image_part" not in traj.skipped
    assert await _replayed(traj, tmp_path) == ("ok", 2, 0)
