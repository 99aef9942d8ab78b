"""Prefix-cache trajectory replay (workloads/trajectory_replay.py) through the engine
against the scenario server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import random
from pathlib import Path

import orjson
import pytest

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.runner import BenchRunner
from benchmaker.testing.scenario_server import Scenario, ScenarioServer
from benchmaker.workloads.datasets import DatasetError
from benchmaker.workloads.trajectory_replay import ThinkTime, TrajectoryReplayWorkload, parse_think, read_conversations


def conv(tag: str, turns: int) -> list[dict]:
    """system + (user, assistant) x turns; every message 3 words (role adds 1 word)."""
    msgs = [{"role": "system", "content": f"sys {tag} prompt"}]
    for k in range(turns):
        msgs += [{"role": "user", "content": f"user {tag} q{k}"}, {"role": "assistant", "content": f"reply {tag} a{k}"}]
    return msgs


def write(path: Path, *rows: object) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return path


def samples_of(result) -> list[dict]:
    return [orjson.loads(line) for line in result.samples_path.read_bytes().splitlines()]


def test_rows_as_arrays_objects_and_json_strings(tmp_path):
    path = write(
        tmp_path / "c.jsonl",
        conv("a", 2),
        {"id": "b", "messages": conv("b", 1)},
        {"messages": orjson.dumps(conv("c", 3)).decode()},
        [{"role": "assistant", "content": "orphan"}],  # no message before it: no turn
    )
    convs = read_conversations(path)
    assert [(c.id, c.row, c.turn_ends) for c in convs] == [
        ("row1", 1, [2, 4]),
        ("b", 2, [2]),
        ("row3", 3, [2, 4, 6]),
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"messages": "[{"}, r"c\.jsonl:1: messages: bad JSON string"),
        ({"messages": 3}, r"c\.jsonl:1: messages: expected a list of messages"),
        ([{"role": "robot", "content": "x"}], r"c\.jsonl:1: messages\[0\]\.role: expected one of"),
    ],
)
def test_bad_rows_name_line_and_field(tmp_path, row, message):
    with pytest.raises(DatasetError, match=message):
        read_conversations(write(tmp_path / "c.jsonl", row))


def test_each_turn_sends_the_growing_prefix_with_hashes_and_estimates(tmp_path):
    convs = read_conversations(write(tmp_path / "c.jsonl", conv("a", 3)))
    wl = TrajectoryReplayWorkload("http://127.0.0.1:1/v1/chat/completions", "m", convs, max_tokens=5)
    specs = []
    for seq in range(3):
        specs.append(wl.request(seq))
        assert wl.next_think_s(seq) == (0.0 if seq < 2 else None)  # no think; after the last turn: stop
    msgs = conv("a", 3)
    for k, spec in enumerate(specs):
        body = orjson.loads(spec.body)
        assert body["messages"] == msgs[: 2 + 2 * k]  # system, user0 | + a0, u1 | + a1, u2
        assert body["model"] == "m" and body["max_tokens"] == 5 and body["stream_options"] == {"include_usage": True}
        assert spec.meta["prompt_sha256"] == hashlib.sha256(orjson.dumps(msgs[: 2 + 2 * k])).hexdigest()
        assert spec.meta["turn"] == k and spec.meta["turns"] == 3 and spec.meta["session"] == "row1"
        assert "content" not in orjson.dumps(spec.meta).decode()  # hashes and lengths only
    # each message: 1 role word + 3 content words = 4; prompts of 2, 4, 6 messages
    assert [s.meta["prompt_tokens_est"] for s in specs] == [8, 16, 24]
    assert [s.meta["expected_cached_tokens"] for s in specs] == [0, 8, 16]
    assert specs[1].meta["prefix_sha256"] == specs[0].meta["prompt_sha256"]
    assert specs[0].meta["prefix_sha256"] is None


def test_think_specs_parse_and_draw_deterministically():
    assert parse_think("const:1s") == ThinkTime("const", 1.0)
    assert parse_think("exp:2s") == ThinkTime("exp", 2.0)
    assert parse_think("uniform:0.5..3") == ThinkTime("uniform", 0.5, 3.0)
    assert parse_think("const:250ms") == ThinkTime("const", 0.25)
    assert parse_think(None) == ThinkTime("const", 0.0)
    for bad in ("const", "gauss:1s", "uniform:3..1", "exp:1..2", "uniform:1"):
        with pytest.raises(ConfigError, match="think time"):
            parse_think(bad)
    u = parse_think("uniform:0.5..3")
    draws = [u.draw(random.Random(f"s{i}")) for i in range(200)]
    assert all(0.5 <= d <= 3 for d in draws)
    assert draws == [u.draw(random.Random(f"s{i}")) for i in range(200)]


def test_active_sessions_below_concurrency_is_refused(tmp_path):
    convs = read_conversations(write(tmp_path / "c.jsonl", conv("a", 1)))
    with pytest.raises(ConfigError, match="active_sessions: expected >= concurrency 4"):
        TrajectoryReplayWorkload("u", "m", convs, concurrency=4, sessions="interleaved", active_sessions=2)


def per_session(samples: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in sorted(samples, key=lambda s: s["sent_ns"] if s["sent_ns"] is not None else -1):
        out.setdefault(s["meta"]["session"], []).append(s)
    return out


async def test_contiguous_sessions_replay_every_turn_in_order_with_cache_counts(tmp_path):
    convs = read_conversations(write(tmp_path / "c.jsonl", conv("a", 3), conv("b", 2), conv("c", 4)))
    async with ScenarioServer(Scenario(cached_tokens=7, content_chunks=2, itl_ms=1)) as server:
        wl = TrajectoryReplayWorkload(server.chat_url, "m", convs, concurrency=2, think=parse_think("const:20ms"))
        runner = BenchRunner(
            BenchConfig(load="closed:2", max_requests=wl.total_turns, out_dir=tmp_path),
            workload=wl,
            post_hooks=[wl.copy_meta],
        )
        result = await asyncio.wait_for(runner.run(), 10)
    samples = samples_of(result)
    assert len(samples) == wl.total_turns == 9  # 3 + 2 + 4 turns
    assert all(s["outcome"] == "ok" and s["cached_tokens"] == 7 for s in samples)  # scenario's cached_tokens
    sessions = per_session(samples)
    assert {k: [s["meta"]["turn"] for s in v] for k, v in sessions.items()} == {
        "row1": [0, 1, 2],
        "row2": [0, 1],
        "row3": [0, 1, 2, 3],
    }
    for turns in sessions.values():
        for prev, nxt in zip(turns, turns[1:], strict=False):
            # never two turns of a session in flight; the 20 ms think gap in between
            assert nxt["sent_ns"] - prev["end_ns"] >= 19_000_000
            assert nxt["meta"]["think_before_s"] == 0.02
    second = sessions["row1"][1]
    assert second["meta"]["expected_cached_tokens"] == 8  # system + user0, 4 words each
    assert second["meta"]["cached_vs_expected"] == 7 / 8
    assert wl.sessions_done == 3


async def test_interleaved_sessions_alternate_and_keep_think_gaps(tmp_path):
    convs = read_conversations(write(tmp_path / "c.jsonl", *(conv(t, 3) for t in "abcd")))
    async with ScenarioServer(Scenario(content_chunks=1)) as server:
        wl = TrajectoryReplayWorkload(
            server.chat_url,
            "m",
            convs,
            concurrency=2,
            sessions="interleaved",
            active_sessions=4,
            think=parse_think("const:30ms"),
        )
        runner = BenchRunner(
            BenchConfig(load="closed:2", max_requests=wl.total_turns, out_dir=tmp_path),
            workload=wl,
            post_hooks=[wl.copy_meta],
        )
        result = await asyncio.wait_for(runner.run(), 10)
    samples = sorted(samples_of(result), key=lambda s: s["sent_ns"])
    assert len(samples) == 12
    order = [s["meta"]["session"] for s in samples]
    # 4 open sessions, 2 workers: every session's first turn goes before any third turn
    first_turns = [i for i, s in enumerate(samples) if s["meta"]["turn"] == 0]
    third_turns = [i for i, s in enumerate(samples) if s["meta"]["turn"] == 2]
    assert max(first_turns) < min(third_turns), order
    for turns in per_session(samples).values():
        assert [s["meta"]["turn"] for s in turns] == [0, 1, 2]
        for prev, nxt in zip(turns, turns[1:], strict=False):
            assert nxt["sent_ns"] - prev["end_ns"] >= 29_000_000  # the 30 ms think gap


async def test_failed_turns_and_raising_hooks_never_stall_a_session(tmp_path):
    """Turn 1 of every session gets HTTP 500; a pre-request hook raises on turn 2 of
    session row2. Every turn is still attempted once and the run ends."""
    convs = read_conversations(write(tmp_path / "c.jsonl", *(conv(t, 4) for t in "ab")))

    def route(spec):
        if spec.meta["turn"] == 1:
            spec.headers["x-scenario"] = "fail"
        if spec.meta["session"] == "row2" and spec.meta["turn"] == 2:
            raise RuntimeError("hook bug")

    async with ScenarioServer(Scenario(content_chunks=1), {"fail": Scenario(status=500)}) as server:
        wl = TrajectoryReplayWorkload(server.chat_url, "m", convs, concurrency=2, think=parse_think("const:5ms"))
        runner = BenchRunner(
            BenchConfig(load="closed:2", max_requests=100, out_dir=tmp_path),
            workload=wl,
            pre_hooks=[route],
            post_hooks=[wl.copy_meta],
        )
        result = await asyncio.wait_for(runner.run(), 10)
    samples = samples_of(result)
    assert len(samples) == 8  # 2 sessions x 4 turns, although max_requests allowed 100
    outcomes = sorted(s["outcome"] for s in samples)
    # 2 x HTTP 500 on turn 1, 1 failed build (the hook), 5 ok
    assert outcomes == ["http_error"] * 2 + ["ok"] * 5 + ["protocol_error"]
    failed_build = next(s for s in samples if s["outcome"] == "protocol_error")
    assert "hook bug" in failed_build["error"]
    ok_turns = sorted((s["meta"]["session"], s["meta"]["turn"]) for s in samples if s["meta"])
    assert ok_turns == [("row1", 0), ("row1", 1), ("row1", 2), ("row1", 3), ("row2", 0), ("row2", 1), ("row2", 3)]


def test_more_workers_than_conversations_ends_cleanly(tmp_path):
    convs = read_conversations(write(tmp_path / "c.jsonl", conv("a", 2)))

    async def run():
        async with ScenarioServer(Scenario(content_chunks=1)) as server:
            wl = TrajectoryReplayWorkload(server.chat_url, "m", convs, concurrency=1)
            runner = BenchRunner(
                BenchConfig(load="closed:3", max_requests=10, out_dir=tmp_path), workload=wl, post_hooks=[wl.copy_meta]
            )
            return await asyncio.wait_for(runner.run(), 10)

    samples = samples_of(asyncio.run(run()))
    # workers 2 and 3 find no open session: one failed build each, then they stop
    assert sorted(s["outcome"] for s in samples) == ["ok", "ok", "protocol_error", "protocol_error"]
