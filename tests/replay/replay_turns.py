"""Test helper (no tests here): replay a trajectory turn by turn through a real replay
server on 127.0.0.1, as a replaying agent does (each request built by
`benchmaker.trajectories.context.request_messages` with the responses received so far)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmaker.trajectories.context import request_messages
from benchmaker.trajectories.trajectory import Trajectory
from tests.replay.test_server_fixtures import running_server


@dataclass
class Replayed:
    """What a turn-by-turn replay sent and got: per turn the request messages, their
    JSON size (chars of `json.dumps`), the response body and headers; the server's
    /stats after."""

    requests: list[list[dict[str, Any]]]
    sizes: list[int]
    responses: list[dict[str, Any]]
    headers: list[dict[str, str]]
    stats: dict[str, Any]


def replay_turns(store: Path, traj: Trajectory, *, divergence: str = "off") -> Replayed:
    """Serve `store` (trajectories.jsonl, divergence policy `divergence`) and send every
    turn of `traj` in order; asserts each answer is 200 and names its turn
    (`x-replay-turn`)."""
    requests, sizes, responses, headers = [], [], [], []
    with running_server(store, divergence=divergence) as url, httpx.Client() as client:
        received: list[dict[str, Any]] = []
        for k in range(len(traj.turns)):
            messages = request_messages(traj, k, responses_so_far=received)
            requests.append(messages)
            sizes.append(len(json.dumps(messages)))
            r = client.post(url + "/v1/chat/completions", json={"model": "m", "messages": messages})
            assert r.status_code == 200, r.text
            assert r.headers["x-replay-turn"] == str(k)
            responses.append(r.json())
            headers.append(dict(r.headers))
            received.append(r.json()["choices"][0]["message"])
        stats = client.get(url + "/stats").json()
    return Replayed(requests, sizes, responses, headers, stats)


async def point_samples(
    store: Path, traj: Trajectory, run_dir: Path
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """Run one sweep point (concurrency 1, one episode of `traj`) against a replay server
    process on `store`; returns the point's summary row, the server's /stats after, and
    the point's samples (samples.jsonl) in turn order."""
    import orjson

    from benchmaker.replay_server.process import start_replay_server
    from benchmaker.sweep.point import ReplayPoint
    from benchmaker.sweep.point_run import run_point
    from benchmaker.sweep.sweep import point_dir

    with start_replay_server(store) as srv:
        row = await run_point([traj], srv.url, run_dir, ReplayPoint(load="closed:1"), run_id="r1")
        stats = httpx.get(srv.url + "/stats").json()
    lines = [orjson.loads(x) for x in (point_dir(run_dir, "c1") / "samples.jsonl").read_bytes().splitlines()]
    return row, stats, sorted(lines, key=lambda s: s["meta"]["turn_index"])


async def harness_bodies(store: Path, traj: Trajectory, *, mode: str = "recorded") -> tuple[Any, list[list[dict]]]:
    """Run one episode of `traj` with the engine harness against a replay server on
    `store` (execute mode in a local sandbox); returns the episode result and a copy
    of the messages of every request it sent, in order."""
    from benchmaker.agent.harness import local_sandbox_factory, run_episode
    from benchmaker.agent.model_client import ModelClient

    bodies: list[list[dict]] = []
    orig = ModelClient.stream

    def stream(self, messages, **kw):  # keep a copy of each request's messages as sent (a list or a MessageLog)
        bodies.append(json.loads(json.dumps(list(messages))))
        return orig(self, messages, **kw)

    ModelClient.stream = stream
    try:
        with running_server(store) as url:
            res = await run_episode(
                traj, url, mode=mode, sandbox=local_sandbox_factory() if mode == "execute" else None
            )
    finally:
        ModelClient.stream = orig
    return res, bodies
