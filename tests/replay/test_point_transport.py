"""A replay sweep point's model calls go on the engine transport the point names (issue
#17: the engine's own HTTP/1.1 client by default, aiohttp selectable), and both give the
same samples against the same replay server (one instrument)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from benchmaker.engine.errors import ConfigError
from benchmaker.engine.http1 import RawTransport
from benchmaker.engine.transport import AiohttpTransport
from benchmaker.replay_server.process import start_replay_server
from benchmaker.sweep.point import ReplayPoint
from benchmaker.sweep.point_run import run_point
from benchmaker.sweep.sweep import point_dir
from benchmaker.trajectories.convert import convert_paths, read_trajectories
from benchmaker.workloads.agent import start_model_transport
from benchmaker.workloads.agent_episode import EpisodeWorkload

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"

# what the parser and the wire decide about a call: equal on every transport
_SAME = (
    "outcome",
    "http_status",
    "n_token_events",
    "output_chars",
    "usage_present",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "finish_reason",
    "bytes_sent",
    "bytes_received",
    "error",
)


def _calls(pdir: Path) -> dict[tuple[str, int], dict]:
    rows = [orjson.loads(x) for x in (pdir / "samples.jsonl").read_bytes().splitlines()]
    return {(r["meta"]["episode_id"], r["meta"]["turn_index"]): r for r in rows}


async def test_a_point_gives_the_same_samples_on_raw_and_on_aiohttp(tmp_path: Path) -> None:
    traj = tmp_path / "traj.jsonl"
    convert_paths([EXAMPLE], traj)
    trajs = list(read_trajectories(traj))
    rows = {}
    with start_replay_server(traj) as srv:
        for kind in ("raw", "aiohttp"):
            rows[kind] = await run_point(
                trajs, srv.url, tmp_path / kind, ReplayPoint(load="closed:3"), run_id="r1", transport=kind
            )
    raw, aio = _calls(point_dir(tmp_path / "raw", "c3")), _calls(point_dir(tmp_path / "aiohttp", "c3"))
    # 3 episodes x 4 recorded turns each, every one served
    assert sorted(raw) == sorted(aio) == [(f"c3-{e}", t) for e in range(3) for t in range(4)]
    for key, r in raw.items():
        a = aio[key]
        assert {k: r[k] for k in _SAME} == {k: a[k] for k in _SAME}, key
        assert len(r["token_event_ns"]) == r["n_token_events"] == len(a["token_event_ns"])
        assert r["outcome"] == "ok" and r["bytes_received"] > 0 and r["n_token_events"] >= 1
    for kind in ("raw", "aiohttp"):
        assert (rows[kind]["n_requests"], rows[kind]["n_episodes"], rows[kind]["misses_total"]) == (12, 3, 0), kind
    eps = {
        kind: sorted(
            (
                orjson.loads(x)
                for x in (point_dir(tmp_path / kind, "c3") / "episode_samples.jsonl").read_bytes().splitlines()
            ),
            key=lambda e: e["meta"]["episode_id"],
        )
        for kind in ("raw", "aiohttp")
    }
    for r, a in zip(eps["raw"], eps["aiohttp"], strict=True):
        for k in ("outcome", "bytes_sent", "bytes_received", "prompt_tokens", "output_tokens", "finish_reason"):
            assert r[k] == a[k], k
        assert r["meta"]["n_turns"] == a["meta"]["n_turns"] == 4


@pytest.mark.parametrize(("kind", "cls"), [("raw", RawTransport), ("aiohttp", AiohttpTransport)])
async def test_an_episode_workload_opens_one_transport_of_its_kind_before_the_clock(
    tmp_path: Path, kind: str, cls: type
) -> None:
    traj = tmp_path / "traj.jsonl"
    convert_paths([EXAMPLE], traj)
    wl = EpisodeWorkload(
        list(read_trajectories(traj)),
        "http://127.0.0.1:9",
        tmp_path / "out",
        run_id="r1",
        sweep_point="c1",
        transport=kind,
    )
    assert wl.describe()["transport"] == kind  # the manifest names it
    await wl.start()
    try:
        assert type(wl._transport) is cls
    finally:
        await wl.aclose()
    assert wl._transport is None


async def test_an_unknown_transport_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="transport: unknown transport 'h3'"):
        await start_model_transport("h3")


async def test_episode_lines_reach_the_file_by_the_flush_task_not_per_episode(tmp_path: Path) -> None:
    from benchmaker.engine.records import Sample
    from benchmaker.workloads.agent_episode import FLUSH_S

    traj = tmp_path / "traj.jsonl"
    convert_paths([EXAMPLE], traj)
    with start_replay_server(traj) as srv:
        wl = EpisodeWorkload(list(read_trajectories(traj)), srv.url, tmp_path / "out", run_id="r1", sweep_point="c1")
        await wl.start()
        try:
            await wl.execute(0, Sample(run_id="r1", seq=0, lane="default"), 0)
            # written into the buffers only: no write syscall per episode on the measuring loop
            assert (tmp_path / "out" / "episodes.jsonl").read_bytes() == b""
            await asyncio.sleep(FLUSH_S * 5)  # the flush task ran (wide margin on a busy host)
            (line,) = (tmp_path / "out" / "episodes.jsonl").read_bytes().splitlines()
            assert orjson.loads(line)["episode_id"] == "c1-0"
            assert len((tmp_path / "out" / "samples.jsonl").read_bytes().splitlines()) == 4
            assert len((tmp_path / "out" / "turns.jsonl").read_bytes().splitlines()) == 4
        finally:
            await wl.aclose()
