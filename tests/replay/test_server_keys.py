"""The replay server's task key on the hot path: a request whose head user
texts are a recorded trajectory's gets the key by one lookup (`_known_keys`), any other
request computes it (`match_key_for_messages`), and both give the same answers."""

from __future__ import annotations

import httpx
import orjson

from benchmaker.replay_server.latency import parse_latency
from benchmaker.replay_server.server import _known_keys, create_app
from benchmaker.replay_server.store import ReplayStore
from benchmaker.trajectories.trajectory import match_key_for_messages
from tests.replay.test_server_fixtures import make_trajectory, request_messages, write_store


def _store(tmp_path):
    plain = make_trajectory("keys-a", 2)
    # SWE-agent shape: two user messages before the first assistant one, no task_id line
    two = make_trajectory("keys-b", 2, trajectory_id="two").model_copy(
        update={
            "first_user": "demonstration text",
            "user_before_turns": ["the task prompt"],
            "match_key": match_key_for_messages(["demonstration text", "the task prompt"]),
        }
    )
    path = write_store(tmp_path / "t.jsonl", [plain, two])
    return ReplayStore.load(path, latency=parse_latency("instant")), plain, two


def test_known_keys_are_the_computed_keys(tmp_path):
    store, plain, two = _store(tmp_path)
    assert _known_keys(store) == {
        plain.first_user: "task:keys-a",
        ("demonstration text", "the task prompt"): match_key_for_messages(["demonstration text", "the task prompt"]),
    }


async def _post(client: httpx.AsyncClient, messages: list[dict]) -> httpx.Response:
    return await client.post("/v1/chat/completions", content=orjson.dumps({"messages": messages}))


async def test_requests_off_the_known_texts_still_match(tmp_path):
    store, plain, two = _store(tmp_path)
    app = create_app(store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        # the recorded texts: looked up
        r = await _post(client, request_messages(plain, 1))
        assert (r.status_code, r.headers["x-replay-trajectory"], r.headers["x-replay-turn"]) == (
            200,
            "traj-keys-a",
            "1",
        )
        r = await _post(client, request_messages(two, 1))
        assert (r.status_code, r.headers["x-replay-trajectory"], r.headers["x-replay-turn"]) == (200, "two", "1")
        # another text with the same task_id line, and the recorded text as typed parts: computed
        other = request_messages(plain, 1)
        other[1] = {"role": "user", "content": "Different wording.\ntask_id: keys-a\n"}
        r = await _post(client, other)
        assert (r.status_code, r.headers["x-replay-trajectory"]) == (200, "traj-keys-a")
        parts = request_messages(two, 0)
        parts[2] = {"role": "user", "content": [{"type": "text", "text": "the task prompt"}]}
        r = await _post(client, parts)
        assert (r.status_code, r.headers["x-replay-trajectory"], r.headers["x-replay-turn"]) == (200, "two", "0")
        # one head text of a two-text trajectory is not its key
        r = await _post(client, request_messages(two, 0)[:2])
        assert (r.status_code, r.json()["error"]["code"]) == (404, "unknown_key")
        # no user message at all, and no messages: 400 as before
        r = await _post(client, [{"role": "system", "content": "s"}])
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "messages: no message with role 'user'"
        r = await _post(client, [])
        assert r.json()["error"]["message"] == "messages: no message with role 'user'"
        r = await client.post("/v1/chat/completions", content=b'{"messages": [1]}')
        assert r.json()["error"]["message"] == "messages[0]: must be an object (got int)"
        r = await client.post("/v1/chat/completions", content=b'{"model": "m"}')
        assert r.json()["error"]["message"] == "messages: missing (a list of chat messages is required)"
        stats = (await client.get("/stats")).json()
    assert (stats["served"], stats["bad_requests"], stats["misses"]["unknown_key"]) == (4, 4, 1)
    assert stats["trajectories"]["two"]["served"] == 2
    assert stats["trajectories"]["traj-keys-a"]["served"] == 2


async def test_prepared_replies_answer_as_the_first_request_and_count_after_a_reset(tmp_path):
    # a turn's second request is answered from its prepared reply (the first one builds it):
    # same status, headers and bytes; its counters are the stats' own, reset in place
    store, plain, two = _store(tmp_path)
    app = create_app(store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        first = await _post(client, request_messages(plain, 1))
        again = await _post(client, request_messages(plain, 1))
        assert (first.status_code, again.status_code) == (200, 200)
        assert again.content == first.content == store.lookup(plain.match_key, None).turns[1].body
        assert list(again.headers.items()) == list(first.headers.items())
        served = (await client.get("/stats")).json()["trajectories"]["traj-keys-a"]
        assert (served["served"], served["bytes_out"]) == (2, 2 * len(first.content))
        await client.post("/stats/reset")
        await _post(client, request_messages(plain, 1))
        # turn 2 of 2 recorded turns: past the prepared replies, 409 from the full path
        beyond = await _post(
            client,
            request_messages(plain, 1) + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}],
        )
        assert (beyond.status_code, beyond.json()["error"]["code"]) == (409, "beyond_turns")
        stats = (await client.get("/stats")).json()
    assert (stats["requests"], stats["served"], stats["misses"]["beyond_turns"]) == (2, 1, 1)
    assert stats["trajectories"]["traj-keys-a"] == {
        "served": 1,
        "misses": {"beyond_turns": 1, "diverged": 0},
        "divergences": {"status": 0, "content": 0},
        "tools_differ": 0,
        "bytes_out": len(first.content),
    }


async def test_prepared_replies_leave_checked_turns_to_the_divergence_policy(tmp_path):
    # policy status: turn 1 is checked on every request (never a prepared reply), so a
    # changed exit code is flagged the second time too
    store, plain, two = _store(tmp_path)
    app = create_app(store, divergence="status")
    messages = request_messages(plain, 1)
    tool = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    messages[tool] = {**messages[tool], "content": "out 0\nexit code 3"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for _ in range(2):
            r = await _post(client, messages)
            assert (r.status_code, r.headers.get("x-replay-divergence")) == (200, "status")
        r = await _post(client, request_messages(plain, 0))  # turn 0: nothing to check
        assert (r.status_code, r.headers.get("x-replay-divergence")) == (200, None)
        stats = (await client.get("/stats")).json()
    assert stats["divergences"] == {"status": 2, "content": 0, "total": 2}
