"""Canned exchanges (benchmaker.trajectories.trajectory.without_canned): an agent that
writes exchanges of its own into every request, shaped as aider builds them
(aider/coders/base_coder.py format_chat_chunks, move_back_cur_messages; texts from
editblock_prompts.py), recorded through `benchmaker record --canned-replies` in front of
the scripted model, then replayed by a real replay server: the first call is turn 0, the
second turn 1, with 0 misses; a changed observation is caught; a store without canned
replies matches as before; each request is stripped of its own trajectory's canned
replies only."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.process import start_replay_server
from benchmaker.replay_server.store import ReplayStore, load_trajectories
from benchmaker.trajectories.trajectory import Observation, Response, Trajectory, Turn, match_key_for, without_canned
from conformance.scripted_model import ScriptedModel
from tests.replay.test_recorder import _proxy
from tests.replay.test_server_fixtures import running_server, source, write_store

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


def _text_agent(task: str, answers: list[str], canned: list[str]) -> Trajectory:
    """A text-only agent's trajectory (aider-like): one turn per answer, each but the
    last observed by a user message `out <t>`."""
    first_user = f"Fix it.\ntask_id: {task}"
    turns = [
        Turn(
            index=t,
            response=Response(content=answer, finish_reason="stop"),
            observations=[] if t == len(answers) - 1 else [Observation(content=f"out {t}")],
        )
        for t, answer in enumerate(answers)
    ]
    return Trajectory(
        trajectory_id=f"traj-{task}",
        source=source(),
        task_id=task,
        match_key=match_key_for(first_user),
        system=SYSTEM["content"],
        first_user=first_user,
        turns=turns,
        canned_replies=canned,
    )


def _second_request(canned: tuple[str, str], task: str, answer: str) -> list[dict]:
    """The request for turn 1: a canned exchange, the task, the turn-0 answer, its
    observation."""
    return [
        SYSTEM,
        {"role": "user", "content": canned[0]},
        {"role": "assistant", "content": canned[1]},
        {"role": "user", "content": f"Fix it.\ntask_id: {task}"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "out 0"},
    ]


# two agents whose canned replies differ, each model once answering the other's canned
# text, and an agent without canned replies whose model answers "Ok." too
OK_AGENT = _text_agent("ok-agent", ["Sure.", "done a"], ["Ok."])
SURE_AGENT = _text_agent("sure-agent", ["Ok.", "done b"], ["Sure."])
PLAIN_AGENT = _text_agent("plain", ["Ok.", "done c"], [])
REQUESTS = {
    "ok-agent": _second_request(("I switched to a new code base.", "Ok."), "ok-agent", "Sure."),
    "sure-agent": _second_request(("Here are the files.", "Sure."), "sure-agent", "Ok."),
    "plain": [
        SYSTEM,
        {"role": "user", "content": "Fix it.\ntask_id: plain"},
        {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "out 0"},
    ],
}


def test_the_store_strips_a_request_of_its_own_trajectorys_canned_replies_only(tmp_path: Path):
    store = ReplayStore.load(write_store(tmp_path / "t.jsonl", [OK_AGENT, SURE_AGENT, PLAIN_AGENT]))
    assert store.canned_replies == frozenset({"Ok.", "Sure."})
    ok, sure, plain = (REQUESTS[k] for k in ("ok-agent", "sure-agent", "plain"))
    assert store.without_canned(ok) == [ok[0], *ok[3:]]  # its "Sure." answer stays
    assert store.without_canned(sure) == [sure[0], *sure[3:]]  # its "Ok." answer stays
    assert store.without_canned(plain) is plain
    # a request of no trajectory: stripped of every canned reply, its key reported unknown
    stranger = _second_request(("I switched to a new code base.", "Ok."), "nobody", "Sure.")
    assert store.without_canned(stranger) == [SYSTEM, stranger[5]]


def test_each_agent_is_served_its_turn_though_its_answer_is_another_agents_canned_reply(tmp_path: Path):
    path = write_store(tmp_path / "t.jsonl", [OK_AGENT, SURE_AGENT, PLAIN_AGENT])
    with running_server(path, divergence="content") as url, httpx.Client() as c:
        got = {}
        for task, messages in REQUESTS.items():
            r = c.post(url + "/v1/chat/completions", json={"model": "m", "messages": messages})
            got[task] = (r.status_code, r.headers.get("x-replay-turn"), r.json()["choices"][0]["message"]["content"])
    assert got == {"ok-agent": (200, "1", "done a"), "sure-agent": (200, "1", "done b"), "plain": (200, "1", "done c")}
