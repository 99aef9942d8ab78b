"""Each model call keeps the model that answered it (on the engine
harness): the parser reads the response's `model` field into Sample.model, the harness
copies it to TurnRecord.model, and the warehouse loads both (requests.model,
turns.model). Real replay server on 127.0.0.1, real DuckDB file."""

from __future__ import annotations

from pathlib import Path

import duckdb
import orjson
import pytest

from benchmaker.agent.harness import run_episode
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import run_point
from benchmaker.sweep.sweep import point_dir, write_run_manifest, write_sweep_points
from benchmaker.warehouse.loader import load_run
from tests.replay.test_server_fixtures import make_trajectory, running_server, write_store


def _switching(task: str = "t-models"):
    """Three turns; turn 1 was answered by another model than the session's."""
    traj = make_trajectory(task, 3)
    turns = list(traj.turns)
    turns[1] = turns[1].model_copy(update={"model": "acme-coder-2"})
    return traj.model_copy(update={"turns": turns})


@pytest.mark.parametrize("stream", [True, False])
async def test_response_model_fills_the_sample_streamed_and_whole(tmp_path: Path, stream: bool) -> None:
    store = write_store(tmp_path / "t.jsonl", [_switching()])
    with running_server(store) as url:
        res = await run_episode(_switching(), url, mode="recorded", stream=stream)
    assert res.episode.outcome == "ok" and res.episode.n_turns == 3
    # turn 0 and 2: the trajectory's model ("rec-model"); turn 1: its own
    assert [c.sample.model for c in res.calls] == ["rec-model", "acme-coder-2", "rec-model"]
    assert [t.turn_index for t in res.turns] == [0, 1, 2]


async def test_two_models_of_one_trajectory_reach_samples_turns_and_the_warehouse(tmp_path: Path) -> None:
    store = write_store(tmp_path / "t.jsonl", [_switching()])
    run_dir = tmp_path / "run"
    write_run_manifest(run_dir, run_id="r-models", kind="swebench-replay", label="t", config={})
    with start_replay_server(store) as srv:
        row = await run_point([_switching()], srv.url, run_dir, ReplayPoint(load="closed:1"), run_id="r-models")
    write_sweep_points(run_dir, [row])
    pdir = point_dir(run_dir, "c1")
    samples = sorted(
        (orjson.loads(x) for x in (pdir / "samples.jsonl").read_bytes().splitlines()),
        key=lambda s: s["meta"]["turn_index"],
    )
    turns = sorted(
        (orjson.loads(x) for x in (pdir / "turns.jsonl").read_bytes().splitlines()), key=lambda t: t["turn_index"]
    )
    want = ["rec-model", "acme-coder-2", "rec-model"]
    assert [s["model"] for s in samples] == want
    assert [t["turn_index"] for t in turns] == [0, 1, 2] and not any("model" in t for t in turns)
    wh = tmp_path / "wh.duckdb"
    load_run(wh, run_dir)
    con = duckdb.connect(str(wh), read_only=True)
    try:
        req = con.execute("SELECT turn_index, model FROM requests ORDER BY turn_index").fetchall()
        trn = con.execute(
            "SELECT t.turn_index, r.model FROM turns t JOIN requests r "
            "USING (run_id, sweep_point, episode_id, turn_index) ORDER BY t.turn_index"
        ).fetchall()
    finally:
        con.close()
    assert req == trn == [(0, "rec-model"), (1, "acme-coder-2"), (2, "rec-model")]


def test_engine_parser_keeps_the_first_named_model_of_a_stream_and_the_body_model() -> None:
    from benchmaker.apis.openai_chat import OpenAIChatParser
    from benchmaker.engine.records import Sample

    chunks = [
        {"model": "m-a", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"content": "hi"}}]},  # names no model
        {"model": "m-b", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    s = Sample(run_id="r", seq=0)
    p = OpenAIChatParser(stream=True)
    p.feed(body, 1, s)
    p.finish(s)
    assert (s.outcome, s.model) == ("ok", "m-a")
    whole = Sample(run_id="r", seq=1)
    p = OpenAIChatParser(stream=False)
    p.feed(
        orjson.dumps({"model": "m-c", "choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}]}),
        1,
        whole,
    )
    p.finish(whole)
    assert (whole.outcome, whole.model) == ("ok", "m-c")
    none = Sample(run_id="r", seq=2)
    p = OpenAIChatParser(stream=False)
    p.feed(orjson.dumps({"choices": [{"index": 0, "message": {"content": "x"}}]}), 1, none)
    p.finish(none)
    assert none.model is None  # unknown stays None
