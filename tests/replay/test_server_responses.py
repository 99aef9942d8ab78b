"""The replay server's OpenAI Responses path (`POST /v1/responses`) over real HTTP on
127.0.0.1, read by the official `openai` SDK (`client.responses.create`) and raw."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from benchmaker.trajectories.trajectory import Trajectory
from tests.replay.test_server_fixtures import (
    NASTY,
    NASTY_ARGS,
    NASTY_REASONING,
    make_trajectory,
    running_server,
    write_store,
)

openai = pytest.importorskip("openai")


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Trajectory]:
    traj = make_trajectory("alpha", 3)
    return write_store(tmp_path / "trajectories.jsonl", [traj]), traj


def responses_input(traj: Trajectory, turn: int) -> list[dict]:
    """The input items Codex-style agents send for `turn`: the task as a user message,
    then per earlier turn its reasoning, message and function calls as output items and
    each observation as a function_call_output."""
    items: list[dict] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": traj.first_user}]}
    ]
    for t in traj.turns[:turn]:
        r = t.response
        if r.reasoning is not None:
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{t.index}",
                    "encrypted_content": None,
                    "summary": [{"type": "summary_text", "text": r.reasoning}],
                }
            )
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": r.content, "annotations": []}],
            }
        )
        for tc in r.tool_calls:
            items.append({"type": "function_call", "call_id": tc.id, "name": tc.name, "arguments": tc.arguments_raw})
        for o in t.observations:
            items.append({"type": "function_call_output", "call_id": o.tool_call_id, "output": o.content})
    return items


def _client(url: str):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_sdk_non_streamed_gets_recorded_text_calls_and_usage(store):
    path, traj = store
    with running_server(path) as url:
        client = _client(url)
        for t, _turn in enumerate(traj.turns):
            resp = client.responses.create(model="m", instructions=traj.system, input=responses_input(traj, t))
            assert resp.status == "completed"
            assert resp.model == "rec-model"
            assert resp.output_text == f"{NASTY} #{t}"
            calls = [item for item in resp.output if item.type == "function_call"]
            if t < 2:
                assert [(c.call_id, c.name, c.arguments) for c in calls] == [(f"call_{t}", "bash", NASTY_ARGS)]
            else:
                assert calls == []
            reasoning = [item for item in resp.output if item.type == "reasoning"]
            assert [[s.text for s in r.summary] for r in reasoning] == ([[NASTY_REASONING]] if t == 0 else [])
            # make_trajectory's usage: prompt 100 + t, completion 20 + t, total 120 + 2t, cached 64
            assert resp.usage.input_tokens == 100 + t
            assert resp.usage.output_tokens == 20 + t
            assert resp.usage.total_tokens == 120 + 2 * t
            assert resp.usage.input_tokens_details.cached_tokens == 64


def test_sdk_streamed_gets_recorded_text_calls_and_usage(store):
    path, traj = store
    with running_server(path) as url:
        client = _client(url)
        for t, _turn in enumerate(traj.turns):
            text, reasoning, args = [], [], []
            final = None
            with client.responses.stream(model="m", input=responses_input(traj, t)) as stream:
                for event in stream:
                    if event.type == "response.output_text.delta":
                        text.append(event.delta)
                    elif event.type == "response.reasoning_summary_text.delta":
                        reasoning.append(event.delta)
                    elif event.type == "response.function_call_arguments.delta":
                        args.append(event.delta)
                final = stream.get_final_response()
            assert "".join(text) == f"{NASTY} #{t}"
            assert "".join(reasoning) == (NASTY_REASONING if t == 0 else "")
            assert "".join(args) == (NASTY_ARGS if t < 2 else "")
            assert final.output_text == f"{NASTY} #{t}"
            assert final.usage.input_tokens == 100 + t
            assert final.usage.output_tokens == 20 + t
            assert final.usage.input_tokens_details.cached_tokens == 64
        # the plain create(stream=True) iterator too
        events = list(client.responses.create(model="m", input=responses_input(traj, 1), stream=True))
        assert events[-1].type == "response.completed"
        assert events[-1].response.output[-1].arguments == NASTY_ARGS


def _events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        head, data = block.split(b"\n", 1)
        assert head.startswith(b"event: ") and data.startswith(b"data: "), block[:80]
        out.append((head[7:].decode(), orjson.loads(data[6:])))
    return out


def test_raw_event_order_and_sequence_numbers(store):
    path, traj = store
    with running_server(path) as url, httpx.Client() as client:
        r = client.post(url + "/v1/responses", json={"model": "m", "input": responses_input(traj, 0), "stream": True})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _events(r.content)
    kinds = [k for k, _ in events]
    assert all(obj["type"] == k for k, obj in events)
    assert [obj["sequence_number"] for _, obj in events] == list(range(len(events)))

    def collapse(names: list[str]) -> list[str]:
        out: list[str] = []
        for name in names:
            if not out or out[-1] != name or not name.endswith(".delta"):
                out.append(name)
        return out

    assert collapse(kinds) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # reasoning
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",  # message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # function call
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    usage = events[-1][1]["response"]["usage"]
    assert usage == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 64},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120,
    }


def test_misses_and_bad_items_are_counted(store):
    path, traj = store
    with running_server(path) as url, httpx.Client() as client:
        r = client.post(url + "/v1/responses", json={"model": "m", "input": "no task line here"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_key"
        beyond = responses_input(traj, 3)  # 3 assistant turns: asks for turn 3 of 3
        r = client.post(url + "/v1/responses", json={"model": "m", "input": beyond})
        assert r.status_code == 409 and r.headers["x-replay-miss"] == "beyond_turns"
        r = client.post(url + "/v1/responses", json={"model": "m", "input": [{"type": "function_call_output"}]})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "input[0].call_id: expected a string (got null)"
        r = client.post(url + "/responses", json={"model": "m", "input": responses_input(traj, 1)})
        assert r.status_code == 200 and r.headers["x-replay-turn"] == "1"
        stats = client.get(url + "/stats").json()
    assert stats["requests"] == 4
    assert stats["served"] == 1
    assert stats["bad_requests"] == 1
    assert stats["misses"] == {"unknown_key": 1, "beyond_turns": 1, "diverged": 0, "total": 2}


def test_diverged_observation_is_refused(tmp_path: Path):
    traj = make_trajectory("alpha", 3)
    path = write_store(tmp_path / "t.jsonl", [traj])
    items = responses_input(traj, 1)
    items[-1]["output"] = "something else\nexit code 1"
    with running_server(path, divergence="content") as url, httpx.Client() as client:
        r = client.post(url + "/v1/responses", json={"model": "m", "input": items})
        assert r.status_code == 412 and r.json()["error"]["code"] == "diverged"
        assert client.get(url + "/stats").json()["divergences"]["status"] == 1


async def test_responses_path_under_a_root_path_goes_through_starlette(tmp_path: Path):
    from benchmaker.replay_server.latency import parse_latency
    from benchmaker.replay_server.server import create_app
    from benchmaker.replay_server.store import ReplayStore

    traj = make_trajectory("root", 1)
    app = create_app(ReplayStore.load(write_store(tmp_path / "t.jsonl", [traj]), latency=parse_latency("instant")))
    transport = httpx.ASGITransport(app=app, root_path="/api")
    async with httpx.AsyncClient(transport=transport, base_url="http://replay") as client:
        r = await client.post("/api/v1/responses", json={"input": traj.first_user})
    assert r.status_code == 200
    assert r.json()["output"][-1]["content"][0]["text"] == traj.turns[0].response.content


def test_previous_response_id_continues_the_replayed_turn(store):
    path, traj = store
    with running_server(path, divergence="content") as url:
        client = _client(url)
        first = client.responses.create(model="m", instructions=traj.system, input=responses_input(traj, 0))
        # the agent sends only what is new: the call's output, chained by id
        obs = traj.turns[0].observations[0]
        second = client.responses.create(
            model="m",
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": obs.tool_call_id, "output": obs.content}],
        )
        assert second.output_text == f"{NASTY} #1"
        third = client.responses.create(
            model="m",
            previous_response_id=second.id,
            input=[
                {"type": "function_call_output", "call_id": "call_1", "output": traj.turns[1].observations[0].content}
            ],
        )
        assert third.output_text == f"{NASTY} #2"
        with pytest.raises(openai.NotFoundError, match="previous_response_id"):
            client.responses.create(model="m", previous_response_id="resp_nope", input="hi")
    # a changed observation after the chained turn is checked as in a full request
    with httpx.Client() as raw, running_server(path, divergence="content") as url2:
        r = raw.post(url2 + "/v1/responses", json={"model": "m", "input": responses_input(traj, 0)})
        r = raw.post(
            url2 + "/v1/responses",
            json={
                "model": "m",
                "previous_response_id": r.json()["id"],
                "input": [
                    {"type": "function_call_output", "call_id": obs.tool_call_id, "output": "other\nexit code 2"}
                ],
            },
        )
        assert (r.status_code, r.json()["error"]["code"]) == (412, "diverged")
        stats = raw.get(url2 + "/stats").json()
    assert stats["misses"] == {"unknown_key": 0, "beyond_turns": 0, "diverged": 1, "total": 1}
