"""Canned exchanges (benchmaker.trajectories.trajectory.without_canned): an agent that
writes exchanges of its own into every request, shaped as aider builds them
(aider/coders/base_coder.py format_chat_chunks, move_back_cur_messages; texts from
editblock_prompts.py), recorded through `benchmaker record --canned-replies` in front of
the scripted model, then replayed by a real replay server: the first call is turn 0, the
second turn 1, with 0 misses; a changed observation is caught; a store without canned
replies matches as before."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.store import load_trajectories
from benchmaker.trajectories.trajectory import without_canned
from conformance.scripted_model import ScriptedModel
from tests.replay.test_recorder import _proxy

SYSTEM = {"role": "system", "content": "Act as an expert software developer."}
EXAMPLE_REPLY = "To make this change we need to modify `mathweb/flask/app.py`."
EXAMPLES = [
    {"role": "user", "content": "Change get_factorial() to use math.factorial"},
    {"role": "assistant", "content": EXAMPLE_REPLY},
    {
        "role": "user",
        "content": "I switched to a new code base. Please don't consider the above files or try to edit them any longer.",
    },
    {"role": "assistant", "content": "Ok."},
]
FILES_REPLY = "Ok, any changes I propose will be to those files."
TASK = "Fix word_count.\ntask_id: demo-aider"
SCRIPT = [
    {
        "thought": "First edit.\n\ncounts.py\n```\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```\n",
        "command": None,
    },
    {"thought": "Second edit: done.", "command": None},
]
TEST_OUTPUT = "I ran this command:\n\npython3 run_tests.py\n\nAnd got this output:\n\npassed 2 failed 1\n"


def first_call() -> list[dict]:
    """aider's first request: system, its examples, no files yet, the task."""
    files = [{"role": "user", "content": "I am not sharing any files that you can edit yet."}]
    return [SYSTEM, *EXAMPLES, *files, {"role": "assistant", "content": "Ok."}, {"role": "user", "content": TASK}]


def second_call(answer: str, test_output: str = TEST_OUTPUT) -> list[dict]:
    """aider's request after an applied edit whose test run failed: the done messages
    (task, the answer as aider keeps it: stripped, "I updated the files." / "Ok."), the
    files in the chat with aider's reply, the test output."""
    return [
        SYSTEM,
        *EXAMPLES,
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": answer.strip()},
        {"role": "user", "content": "I updated the files."},
        {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "I have *added these files to the chat*.\n\ncounts.py\n```\nb\n```"},
        {"role": "assistant", "content": FILES_REPLY},
        {"role": "user", "content": test_output},
    ]


def test_without_canned_drops_each_canned_reply_with_the_user_message_before_it():
    calls = [{"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]
    msgs = [
        SYSTEM,
        {"role": "user", "content": "example"},
        {"role": "assistant", "content": "Ok."},
        {"role": "assistant", "content": "Ok."},  # no user message before it: dropped alone
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "Ok.", "tool_calls": calls},  # a tool call: a real turn
        {"role": "tool", "tool_call_id": "c", "content": "out"},
        {"role": "assistant", "content": [{"type": "text", "text": "Ok.\n"}]},  # no user before: alone
    ]
    assert without_canned(msgs, frozenset({"Ok."})) == [SYSTEM, msgs[4], msgs[5], msgs[6]]
    assert without_canned(msgs, frozenset()) is msgs
    assert without_canned(msgs, frozenset({"never said"})) is msgs


async def test_an_aider_shaped_episode_records_two_turns_and_replays_with_no_misses(tmp_path: Path):
    rec = tmp_path / "rec.jsonl"
    async with ScriptedModel(SCRIPT, model="fake-model", text=True) as model:
        async with _proxy(model.url, rec, canned_replies=True, text_actions=True) as (url, app):
            async with httpx.AsyncClient() as c:
                r0 = await c.post(url + "/v1/chat/completions", json={"model": "m", "messages": first_call()})
                answer0 = r0.json()["choices"][0]["message"]["content"]
                r1 = await c.post(url + "/v1/chat/completions", json={"model": "m", "messages": second_call(answer0)})
                flushed = (await c.post(url + "/flush")).json()
    assert (r0.status_code, r1.status_code) == (200, 200)
    assert answer0 == SCRIPT[0]["thought"]
    assert (flushed["trajectories"], flushed["turns"], flushed["skipped"]) == (1, 2, {})
    (traj,) = [t for _, t in load_trajectories(rec)]
    assert traj.match_key == "task:demo-aider" and traj.first_user == TASK and traj.user_before_turns == []
    assert traj.canned_replies == [EXAMPLE_REPLY, "Ok.", FILES_REPLY]
    assert [t.response.content for t in traj.turns] == [s["thought"] for s in SCRIPT]
    assert [o.content for o in traj.turns[0].observations] == [TEST_OUTPUT]
    assert traj.schema_version == 5

    with start_replay_server(rec, divergence="content") as server, httpx.Client() as c:
        got = []
        for messages in (first_call(), second_call(SCRIPT[0]["thought"]), second_call(SCRIPT[0]["thought"], "other")):
            r = c.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": messages, "stream": True})
            got.append((r.status_code, r.headers.get("x-replay-turn"), r.headers.get("x-replay-miss")))
        stats = c.get(server.url + "/stats").json()
    assert got == [(200, "0", None), (200, "1", None), (412, None, "diverged")]
    assert (stats["served"], stats["misses"]["diverged"], stats["misses"]["unknown_key"]) == (2, 1, 0)


@pytest.mark.parametrize("canned", [False, True])
async def test_a_store_without_canned_replies_counts_every_assistant_message(tmp_path: Path, canned: bool):
    # the same aider-shaped recording with and without its canned_replies: without them
    # the first call reads as turn 2 of a conversation keyed by the example's user text
    rec = tmp_path / "rec.jsonl"
    async with ScriptedModel(SCRIPT, model="fake-model", text=True) as model:
        async with _proxy(model.url, rec, canned_replies=canned) as (url, app):
            async with httpx.AsyncClient() as c:
                await c.post(url + "/v1/chat/completions", json={"model": "m", "messages": first_call()})
                flushed = (await c.post(url + "/flush")).json()
    assert (flushed["trajectories"], flushed["skipped"]) == ((1, {}) if canned else (0, {"unseen_turns": 1}))
