"""benchmaker.sweep.point_run and benchmaker.workloads.agent_episode: agent episodes on the engine.

One instrument: a replayed turn and a `benchmaker llm` request give the same metrics for
the same stream; every model call of a point is an engine Sample in samples.jsonl (with
finish_reason, bytes and token events) that reaches the warehouse; closed and open-loop
points are run by the engine's load models."""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
import orjson
import pytest

from benchmaker.agent.harness import run_episode
from benchmaker.engine.records import Sample
from benchmaker.engine.summary import nest_summary, summarize_samples
from benchmaker.recipes.cli import main
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.point import ReplayPoint, replay_point_name
from benchmaker.sweep.point_run import play_episodes, run_point
from benchmaker.sweep.sweep import point_dir, write_run_manifest, write_sweep_points
from benchmaker.testing import Scenario, ScenarioServer
from benchmaker.trajectories.convert import convert_paths, read_trajectories
from benchmaker.warehouse.loader import load_run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"


@pytest.fixture
def example(tmp_path: Path) -> tuple[Path, list]:
    traj = tmp_path / "traj.jsonl"
    convert_paths([EXAMPLE], traj)
    return traj, list(read_trajectories(traj))


def _run_stats(samples: Path) -> dict:
    return nest_summary(summarize_samples([samples]))["run"]


async def test_same_scripted_stream_gives_the_same_metrics_through_llm_and_a_replayed_turn(
    tmp_path: Path, example
) -> None:
    # one fixed stream: role chunk at once, 4 content chunks from 200 ms, 100 ms apart,
    # usage last: TTFT ~200 ms, 3 ITL gaps of ~100 ms, E2E ~500 ms, TPOT ~300/3 = 100 ms
    scenario = Scenario(ttft_ms=200, itl_ms=100, content_chunks=4, completion_tokens=4)
    _, trajs = example
    one_turn = trajs[0].model_copy(update={"turns": trajs[0].turns[:1]})
    async with ScenarioServer(scenario) as srv:
        code = await asyncio.to_thread(
            main,
            [
                "llm",
                "--url",
                srv.chat_url,
                "--model",
                "m",
                "--max-requests",
                "1",
                "--out-dir",
                str(tmp_path / "llm"),
                "--no-progress",
            ],
        )
        calls: list[Sample] = []
        res = await run_episode(one_turn, srv.url, mode="recorded", sample_sink=calls.append)
    assert code in (0, 1)  # 1 only when a self-check (loop lag) flags the busy host
    (bundle,) = (tmp_path / "llm").iterdir()
    llm_sample = orjson.loads((bundle / "samples.jsonl").read_bytes().splitlines()[0])
    (turn,) = calls
    assert res.episode.n_requests == 1 and turn.meta["turn_index"] == 0
    replay_path = tmp_path / "replay-samples.jsonl"
    replay_path.write_bytes(orjson.dumps(turn, option=orjson.OPT_APPEND_NEWLINE))
    # what the parser decides is the same, exactly: 4 token events, usage, finish reason
    for key in ("outcome", "n_token_events", "output_tokens", "prompt_tokens", "finish_reason", "output_chars"):
        assert llm_sample[key] == getattr(turn, key), key
    assert turn.bytes_sent > 0 and turn.bytes_received > 0 and llm_sample["bytes_received"] > 0
    llm, rep = _run_stats(bundle / "samples.jsonl"), _run_stats(replay_path)
    # the same definitions (benchmaker/engine/sql/summary.sql) over both: each figure is
    # what its formula gives from that request's own stamps, so the two paths agree on
    # what they compute however busy the host is (a late first chunk shortens the later
    # gaps of the scripted stream, so no path-independent ITL floor holds under load)
    replay_sample = orjson.loads(replay_path.read_bytes())
    for stats, s in ((llm, llm_sample), (rep, replay_sample)):
        events = s["token_event_ns"]
        gaps = sorted(b - a for a, b in zip(events, events[1:], strict=False))
        by_formula = {
            "ttft_ms": (s["first_token_ns"] - s["sent_ns"]) / 1e6,
            "e2e_ms": (s["end_ns"] - s["sent_ns"]) / 1e6,
            # TPOT: from the first to the last token event (docs/stream-rules.md), 4 tokens: 3 gaps
            "tpot_ms": (events[-1] - s["first_token_ns"]) / 1e6 / (s["output_tokens"] - 1),
            "itl_event_ms": gaps[1] / 1e6,  # the median of 3 gaps
        }
        for name, value in by_formula.items():
            assert stats[name]["p50"] == pytest.approx(value, rel=1e-9), name
        assert stats["itl_event_ms"]["count"] == 3
        # the server sends the first chunk 200 ms and the last 500 ms after the request:
        # no client measures less, whatever the load (5 ms: the two processes' clocks)
        assert stats["ttft_ms"]["p50"] >= 195 and stats["e2e_ms"]["p50"] >= 495


async def test_point_writes_one_engine_sample_per_model_call_into_the_warehouse(tmp_path: Path, example) -> None:
    traj, trajs = example
    run_dir = tmp_path / "run"
    write_run_manifest(run_dir, run_id="r1", kind="swebench-replay", label="t", config={})
    with start_replay_server(traj) as srv:
        row = await run_point(trajs, srv.url, run_dir, ReplayPoint(load="closed:3"), run_id="r1")
    write_sweep_points(run_dir, [row])
    pdir = point_dir(run_dir, "c3")
    lines = [orjson.loads(x) for x in (pdir / "samples.jsonl").read_bytes().splitlines()]
    # 1 trajectory at concurrency 3 -> 3 episodes x 4 recorded turns = 12 model calls
    assert len(lines) == 12 == row["n_requests"]
    assert sorted(s["seq"] for s in lines) == list(range(12))
    for s in lines:
        assert (s["lane"], s["sweep_point"], s["outcome"]) == ("agent", "c3", "ok")
        assert s["finish_reason"] in ("tool_calls", "stop")
        assert s["bytes_sent"] > 0 and s["bytes_received"] > 0
        assert s["n_token_events"] >= 1 and len(s["token_event_ns"]) == s["n_token_events"]
        assert s["sent_ns"] <= s["first_token_ns"] <= s["end_ns"]
    assert sorted((s["meta"]["episode_id"], s["meta"]["turn_index"]) for s in lines) == [
        (f"c3-{e}", t) for e in range(3) for t in range(4)
    ]
    # the engine ran the episodes as its unit of work: 3 in flight, closed:3
    engine = orjson.loads((pdir / "engine_summary.json").read_bytes())
    assert (engine["target"]["target_concurrency"], engine["run"]["max_concurrency"]) == (3, 3)
    assert engine["run"]["n_ok"] == 3 and row["load"] == "closed:3"
    assert len((pdir / "episode_samples.jsonl").read_bytes().splitlines()) == 3

    wh = tmp_path / "wh.duckdb"
    load_run(wh, run_dir)
    con = duckdb.connect(str(wh), read_only=True)
    try:
        got = con.execute(
            "SELECT count(*), count(finish_reason), count(*) FILTER (bytes_sent > 0), sum(bytes_sent) FROM requests"
        ).fetchone()
    finally:
        con.close()
    assert got == (12, 12, 12, sum(s["bytes_sent"] for s in lines))
    con = duckdb.connect(str(wh), read_only=True)
    try:  # each request joins its episode and turn (migration 0007)
        joined = con.execute(
            "SELECT count(*), count(DISTINCT (r.episode_id, r.turn_index)) FROM requests r "
            "JOIN turns t USING (run_id, sweep_point, episode_id, turn_index) "
            "JOIN episodes e USING (run_id, sweep_point, episode_id)"
        ).fetchone()
    finally:
        con.close()
    assert joined == (12, 12)  # 3 episodes x 4 turns, one request each


async def test_open_loop_point_starts_episodes_at_the_offered_rate(tmp_path: Path, example) -> None:
    traj, trajs = example
    with start_replay_server(traj) as srv:
        row = await run_point(
            trajs, srv.url, tmp_path / "run", ReplayPoint(load="constant:20", duration_s=0.5), run_id="r1"
        )
    pdir = point_dir(tmp_path / "run", "constant-20")
    # constant 20/s for 0.5 s: episodes intended at 0, 50, ..., 450 ms -> 10 episodes
    assert (row["sweep_point"], row["concurrency"], row["rate_per_s"]) == ("constant-20", None, 20.0)
    assert row["offered_episode_rate_per_s"] == 20.0
    assert row["n_episodes"] == 10 and row["n_requests"] == 40  # 4 turns each
    eps = [orjson.loads(x) for x in (pdir / "episode_samples.jsonl").read_bytes().splitlines()]
    assert sorted(e["intended_ns"] for e in eps) == [i * 50_000_000 for i in range(10)]
    assert all(e["sent_ns"] >= e["intended_ns"] for e in eps)
    assert row["episode_schedule_lag_p99_ms"] is not None and row["achieved_episode_rate_per_s"] > 0


def test_point_names_closed_loop_by_concurrency_and_open_loop_by_its_rate():
    assert replay_point_name("closed:8") == ReplayPoint(load="closed:8").name == "c8"
    assert replay_point_name("closed:16") == "c16"
    assert replay_point_name("poisson:0.5") == "poisson-0.5"


async def test_episode_plan_cycles_with_a_shards_stride_in_duration_mode(tmp_path: Path, example) -> None:
    traj, trajs = example
    with start_replay_server(traj) as srv:
        played = await play_episodes(
            trajs,
            srv.url,
            tmp_path / "w1",
            ReplayPoint(load="closed:2", episodes=3, duration_s=60.0),
            run_id="r1",
            sweep_point="c2",
            episode_prefix="c2-w1",
            index_start=1,
            index_step=2,
            keep_results=True,
        )
    # at most 3 episodes: seq 0, 1, 2 -> indices 1, 3, 5 of the one cycle
    assert sorted(r.episode.episode_id for r in played.workload.results) == ["c2-w1-1", "c2-w1-3", "c2-w1-5"]
    assert played.n_calls == 12


@pytest.mark.slow  # spawns 2 engine worker processes (~3 s of interpreter start-up)
async def test_point_in_two_engine_workers_splits_the_episodes_and_merges_the_files(tmp_path: Path, example) -> None:
    traj, trajs = example
    with start_replay_server(traj) as srv:
        row = await run_point(
            trajs, srv.url, tmp_path / "run", ReplayPoint(load="closed:4", episodes=8, workers=2), run_id="r1"
        )
    pdir = point_dir(tmp_path / "run", "c4")
    # closed:4 over 2 workers: 2 episodes in flight on each, 8 episodes x 4 turns
    assert (row["n_episodes"], row["n_requests"], row["misses_total"]) == (8, 32, 0)
    assert sorted(p.name for p in pdir.glob("*samples-w*.jsonl")) == [
        "episode_samples-w0.jsonl",
        "episode_samples-w1.jsonl",
        "samples-w0.jsonl",
        "samples-w1.jsonl",
    ]
    eps = [orjson.loads(x) for x in (pdir / "episodes.jsonl").read_bytes().splitlines()]
    assert sorted({e["worker"] for e in eps}) == [0, 1, 2, 3]  # slot j on worker k -> j * 2 + k
    engine = orjson.loads((pdir / "engine_summary.json").read_bytes())
    assert (engine["workers"], engine["target"]["target_concurrency"]) == (2, 4)
    assert len(engine["self_checks"]["workers"]) == 2


async def test_a_model_call_cancelled_in_flight_is_a_cancelled_sample(example) -> None:
    _, trajs = example
    calls: list[Sample] = []
    async with ScenarioServer(Scenario(ttft_ms=2_000)) as srv:  # the first token would take 2 s
        task = asyncio.ensure_future(run_episode(trajs[0], srv.url, sample_sink=calls.append))
        while srv.n_requests == 0:  # the request arrived: the call is in flight
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    (s,) = calls  # written as the engine writes a request cancelled at the run deadline
    assert (s.outcome, s.meta["turn_index"], s.first_token_ns) == ("cancelled", 0, None)
    assert s.sent_ns is not None and s.end_ns >= s.sent_ns and s.bytes_sent > 0
