"""benchmaker.replay_server.store: loading trajectories.jsonl (errors name file, line, field), the key
index and its selection rule, and the prepared response bytes."""

from __future__ import annotations

import orjson
import pytest

from benchmaker.replay_server.latency import parse_latency, regex_split
from benchmaker.replay_server.store import ReplayStore, exit_code_in, load_trajectories
from benchmaker.trajectories.errors import TrajectoryFormatError
from benchmaker.trajectories.trajectory import Observation, Timing
from tests.replay.test_server_fixtures import (
    NASTY,
    NASTY_ARGS,
    NASTY_REASONING,
    make_trajectory,
    reassemble,
    sse_events,
    write_store,
)


def test_load_skips_blank_lines_and_keeps_line_numbers(tmp_path):
    a, b = make_trajectory("a", 1), make_trajectory("b", 1)
    path = tmp_path / "t.jsonl"
    path.write_text(a.model_dump_json() + "\n\n" + b.model_dump_json() + "\n", encoding="utf-8")
    loaded = load_trajectories(path)
    assert [(line, t.trajectory_id) for line, t in loaded] == [(1, "traj-a"), (3, "traj-b")]
    assert loaded[1][1] == b


def test_load_errors_name_file_line_field(tmp_path):
    good = make_trajectory("a", 2).model_dump_json()
    path = tmp_path / "t.jsonl"

    def error(text: bytes) -> str:
        path.write_bytes(text)
        with pytest.raises(TrajectoryFormatError) as info:
            load_trajectories(path)
        return str(info.value)

    bad = orjson.loads(good)
    bad["turns"][1]["usage"]["completion_tokens"] = "12a"
    msg = error(good.encode() + b"\n" + orjson.dumps(bad) + b"\n")
    assert msg.startswith(f"{path}:2: turns[1].usage.completion_tokens: Input should be a valid integer")
    assert msg.endswith('(got "12a")')
    assert error(good.encode() + b"\n" + good.encode()[:40] + b"\n").startswith(f"{path}:2: ")
    assert (
        error(b"\n" + good.encode().replace(b"Please", b"Pl\xe9ase"))
        == f"{path}:2: not UTF-8 at byte {good.index('Please') + 2} (got {bytes([0xE9]) + b'ase'!r})"
    )
    assert error((good + "\n" + good).encode()) == f'{path}:2: trajectory_id: duplicate of line 1 (got "traj-a")'
    assert error(b"\n \n") == f"{path}: no trajectories in the file"


def test_lookup_selection_rule(tmp_path):
    a = make_trajectory("k", 1, trajectory_id="a", system="S1")
    b = make_trajectory("k", 1, trajectory_id="b", system="S2")
    c = make_trajectory("k", 1, trajectory_id="c", system="S2")  # same system as b: never chosen
    u = make_trajectory("u", 1, trajectory_id="u")
    store = ReplayStore.load(write_store(tmp_path / "t.jsonl", [a, b, c, u]))
    key = a.match_key
    assert store.lookup(key, None).trajectory_id == "a"
    assert store.lookup(key, "S1").trajectory_id == "a"
    assert store.lookup(key, "S2").trajectory_id == "b"
    assert store.lookup(key, "other").trajectory_id == "a"
    assert store.needs_system(key) and not store.needs_system(u.match_key)
    assert store.lookup(u.match_key, "anything").trajectory_id == "u"
    assert store.lookup("task:none", None) is None
    assert store.n_turns == 4
    assert store.models == ["rec-model"]


def test_prepared_turn_bytes(tmp_path):
    traj = make_trajectory("p", 2)
    store = ReplayStore.load(write_store(tmp_path / "t.jsonl", [traj]), created=1700000000)
    entry = store.trajectories[0]
    turn = entry.turns[0]
    body = orjson.loads(turn.body)
    assert body["created"] == 1700000000
    assert body["choices"][0]["message"]["content"] == f"{NASTY} #0"
    assert turn.final_offset_s == 0.0
    assert [o.content for o in turn.observations] == ["out 0\nexit code 0"]
    stream = store.stream(entry, 0)
    # instant: one group at offset 0 holding every event; tails differ by the usage chunk.
    assert len(stream.groups) == 1 and stream.groups[0][0] == 0.0
    assert stream.tail.endswith(b"data: [DONE]\n\n")
    assert stream.tail_usage.count(b"\n\n") == stream.tail.count(b"\n\n") + 1
    events = sse_events(stream.groups[0][1] + stream.tail_usage)
    # The hand-assembled chunks are exactly orjson's rendering of the chunk objects.
    for ev in events[:-1]:
        obj = orjson.loads(ev)
        assert orjson.dumps(obj) == ev
        assert obj["id"] == body["id"] and obj["created"] == 1700000000
        assert obj["model"] == "rec-model"
    got = reassemble(events)
    assert got["content"] == f"{NASTY} #0"
    assert got["tool_calls"][0]["arguments"] == NASTY_ARGS
    assert got["usage"]["total_tokens"] == 120
    assert got["finish_reason"] == "tool_calls"


def test_stream_cache_is_lru_and_bounded(tmp_path):
    trajs = [make_trajectory(f"c{i}", 1) for i in range(3)]
    path = write_store(tmp_path / "t.jsonl", trajs)
    size = ReplayStore.load(path).stream(ReplayStore.load(path).trajectories[0], 0).size
    # Room for two streams (all three have the same size: same texts, same-length ids).
    store = ReplayStore.load(path, stream_cache_bytes=2 * size + 1)
    a, b, c = store.trajectories
    first = store.stream(a, 0)
    assert store.stream(a, 0) is first  # cached
    store.stream(b, 0)
    assert store.stream_cache_size == 2 * size
    store.stream(a, 0)  # a becomes most recent; b is the LRU
    store.stream(c, 0)  # evicts b
    assert store.stream_cache_size == 2 * size
    assert store.stream(a, 0) is first
    assert store.stream(c, 0) is store.stream(c, 0)
    tiny = ReplayStore.load(path, stream_cache_bytes=10)  # a stream larger than the cache
    assert tiny.stream(tiny.trajectories[0], 0) is not tiny.stream(tiny.trajectories[0], 0)
    assert tiny.stream_cache_size == 0


def test_prepared_groups_follow_latency(tmp_path):
    traj = make_trajectory("p", 1, timing=Timing(ttft_ms=100, duration_ms=100))
    path = write_store(tmp_path / "t.jsonl", [traj])
    store = ReplayStore.load(path, latency=parse_latency("fixed:50:5"))
    fixed = store.stream(store.trajectories[0], 0)
    n = fixed.n_events
    # A 1-turn trajectory: turn 0 has reasoning and content, no tool call.
    assert n == len(regex_split(NASTY_REASONING)) + len(regex_split(f"{NASTY} #0"))
    assert len(fixed.groups) == n  # one group per token event
    assert [round(o * 1000, 6) for o, _ in fixed.groups] == [50 + 5 * i for i in range(n)]
    assert store.trajectories[0].turns[0].final_offset_s == pytest.approx((50 + 5 * (n - 1)) / 1000)
    assert fixed.groups[0][1].startswith(b'data: {"id"')
    assert b'"role":"assistant"' in fixed.groups[0][1]  # role rides with event 0
    assert b'"role"' not in fixed.groups[1][1]
    # recorded: ttft == duration == 100 ms -> all events at 100 ms, one group.
    rec = ReplayStore.load(path, latency=parse_latency("recorded"))
    assert [o for o, _ in rec.stream(rec.trajectories[0], 0).groups] == [0.1]
    assert rec.trajectories[0].turns[0].final_offset_s == 0.1


@pytest.mark.parametrize(
    "text, code",
    [
        ("<returncode>2</returncode>\n<output>x</output>", 2),
        ("Command exited with code 127", 127),
        ("...\nexit code -1", -1),
        ("exit_code: 0", 0),
        ("Exit status 3", 3),
        ("all fine", None),
    ],
)
def test_exit_code_in(text, code):
    assert exit_code_in(text) == code


def test_recorded_observation_prefers_recorded_exit_code(tmp_path):
    traj = make_trajectory("o", 2)
    traj.turns[0].observations = [
        Observation(tool_call_id="call_0", content="exit code 5", exit_code=None),
        Observation(tool_call_id="x", content="exit code 5", exit_code=1, is_error=True),
    ]
    store = ReplayStore.load(write_store(tmp_path / "t.jsonl", [traj]))
    obs = store.trajectories[0].turns[0].observations
    assert [(o.exit_code, o.is_error) for o in obs] == [(5, False), (1, True)]
