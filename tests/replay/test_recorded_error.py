"""A replayed turn that failed in the original run (an aborted pi turn) is served as
recorded with `x-replay-recorded-error`; the model client makes it outcome
`recorded_error`, which summary.sql counts apart (`n_recorded_error`), out of the error
rate and of the latency over successes, and which leaves the point valid (on the engine
harness). Real replay server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from benchmaker.agent.harness import run_episode
from benchmaker.engine.records import Sample
from benchmaker.engine.summary import nest_summary, summarize_samples
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import run_point
from benchmaker.sweep.sweep import point_dir
from benchmaker.trajectories.convert import convert_paths, read_trajectories
from tests.replay.test_server_fixtures import running_server

# pi v3 session tree, replayed whole: turn 0 tool call, turn 1 stop (an abandoned branch),
# turn 2 stop, turn 3 `stopReason: aborted` (empty)
ABORTED = Path(__file__).resolve().parent / "fixtures" / "pi_v3_tree.jsonl"


@pytest.fixture
def aborted(tmp_path: Path) -> tuple[Path, list]:
    out = tmp_path / "trajectories.jsonl"
    convert_paths([ABORTED], out)
    trajs = list(read_trajectories(out))
    assert [t.response.finish_reason for t in trajs[0].turns] == ["tool_calls", "stop", "stop", "aborted"]
    return out, trajs


async def test_aborted_turn_replays_as_recorded_error_out_of_the_error_rate(tmp_path: Path, aborted) -> None:
    store, trajs = aborted
    with start_replay_server(store) as srv:
        row = await run_point(trajs, srv.url, tmp_path / "run", ReplayPoint(load="closed:1"), run_id="r1")
        stats = httpx.get(srv.url + "/stats").json()
    assert stats["misses"]["total"] == 0 and stats["served"] == 4
    samples_path = point_dir(tmp_path / "run", "c1") / "samples.jsonl"
    lines = sorted(
        (orjson.loads(x) for x in samples_path.read_bytes().splitlines()), key=lambda s: s["meta"]["turn_index"]
    )
    assert [s["outcome"] for s in lines] == ["ok", "ok", "ok", "recorded_error"]
    assert lines[3]["error"] == "failed in the original run (finish_reason aborted), served as recorded"
    assert lines[3]["finish_reason"] == "aborted"
    run = nest_summary(summarize_samples([samples_path]))["run"]
    # 4 sent, 3 ok, 1 recorded_error: error rate 1 - 3 / (4 - 1) = 0; latency over the 3 ok
    assert (run["n_sent"], run["n_ok"], run["n_recorded_error"], run["n_aborted"]) == (4, 3, 1, 0)
    assert run["error_rate"] == 0
    assert run["e2e_ms"]["count"] == 3 and run["e2e_all_ms"]["count"] == 4
    # the point: error rate 0, no miss, the episode ok, valid
    assert (row["n_requests"], row["n_ok"], row["error_rate"], row["misses_total"]) == (4, 3, 0, 0)
    assert (row["n_recorded_error"], row["n_aborted"]) == (1, 0)  # columns of the sweep row
    assert row["n_episodes_failed"] == 0 and row["valid"] is True, row.get("invalid_reason")


@pytest.mark.parametrize("stream", [True, False])
async def test_recorded_error_streamed_and_whole(tmp_path: Path, aborted, stream: bool) -> None:
    store, trajs = aborted
    with running_server(store) as url:
        res = await run_episode(trajs[0], url, mode="recorded", stream=stream)
    assert [c.outcome for c in res.calls] == ["ok", "ok", "ok", "recorded_error"]
    # each turn is keyed to its call's sample, which carries the outcome
    assert (
        [(c.sample.meta["episode_id"], c.sample.meta["turn_index"]) for c in res.calls]
        == [(t.episode_id, t.turn_index) for t in res.turns]
        == [(res.episode.episode_id, i) for i in range(4)]
    )
    assert res.episode.outcome == "ok" and res.episode.n_turns == 4  # served: the episode went on


def test_summary_without_a_sent_request_but_recorded_errors_has_no_error_rate(tmp_path: Path) -> None:
    # only recorded errors sent: n_sent - n_recorded_error = 0, so the error rate is
    # unknown (NULL), never 0 or a division error
    path = tmp_path / "samples.jsonl"
    rows = [
        Sample(run_id="r", seq=i, outcome="recorded_error", intended_ns=i, sent_ns=i, end_ns=i + 10) for i in range(2)
    ]
    path.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))
    run = nest_summary(summarize_samples([path]))["run"]
    assert (run["n_sent"], run["n_recorded_error"], run["error_rate"]) == (2, 2, None)


def test_engine_verdict_error_rate_leaves_recorded_errors_out() -> None:
    from benchmaker.engine.selfcheck import service_error_rate

    # 4 sent, 2 ok, 1 recorded_error, 1 timeout: 1 failed of 4 - 1 = 3
    assert service_error_rate({"n_sent": 4, "n_ok": 2, "n_recorded_error": 1, "n_timeout": 1}) == 1 / 3
    assert service_error_rate({"n_sent": 2, "n_ok": 0, "n_recorded_error": 2}) is None


def test_engine_verdict_counts_failed_requests_without_recorded_errors() -> None:
    from benchmaker.engine.config import SelfCheckLimits
    from benchmaker.engine.selfcheck import verdict

    run = {"n_sent": 10, "n_ok": 5, "n_recorded_error": 2, "n_timeout": 3}
    v = verdict(run, limits=SelfCheckLimits(), open_loop=False, target_concurrency=None, loop_lag={}, interrupted=False)
    # 3 failed of 10 - 2 = 8: 37.50% > the default 10%
    assert any("error rate 37.50% exceeds" in r and "(3 of 8 requests failed: 3 timeout)" in r for r in v["reasons"]), (
        v["reasons"]
    )
