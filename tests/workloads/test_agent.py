"""benchmaker.workloads.agent: user-defined agent classes as a workload, one episode per sample,
through the runner against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.runner import BenchRunner
from benchmaker.recipes.runfile import read_run_file
from benchmaker.testing.scenario_server import Scenario, ScenarioServer
from benchmaker.workloads.agent import AgentWorkload, load_agent_class
from examples.agents.echo_agent import EchoAgent


def _rows(res) -> list[dict]:
    return sorted((json.loads(x) for x in res.samples_path.read_text().splitlines()), key=lambda r: r["seq"])


async def test_echo_agent_episodes_are_samples_with_usage_sums(tmp_path: Path):
    async with ScenarioServer(Scenario()) as srv:
        wl = AgentWorkload(EchoAgent, url=srv.url, model="m", options={"word": "tok", "turns": 2})
        cfg = BenchConfig(load="closed:2", max_requests=4, out_dir=tmp_path)
        res = await BenchRunner(cfg, workload=wl).run()
    rows = _rows(res)
    assert [r["outcome"] for r in rows] == ["ok"] * 4
    # Scenario(): 8 content chunks of "tok ", usage prompt 10 / completion 8 per call; 2 calls per episode
    assert [(r["prompt_tokens"], r["output_tokens"], r["usage_present"]) for r in rows] == [(20, 16, True)] * 4
    for r in rows:
        m = r["meta"]
        assert (m["episode_index"], m["n_model_calls"]) == (r["seq"], 2)
        assert m["result"] == {"ok": True, "answers": ["tok " * 8, "tok " * 8]}
        assert 0 < m["model_time_ms"] <= (r["end_ns"] - r["sent_ns"]) / 1e6
        assert r["sent_ns"] < r["first_token_ns"] < r["end_ns"]
    assert res.summary["target"]["target_concurrency"] == 2


async def test_result_ok_false_is_graded_wrong(tmp_path: Path):
    async with ScenarioServer(Scenario()) as srv:
        wl = AgentWorkload(EchoAgent, url=srv.url, options={"word": "banana"})
        res = await BenchRunner(BenchConfig(load="closed:1", max_requests=1, out_dir=tmp_path), workload=wl).run()
    (row,) = _rows(res)
    assert (row["outcome"], row["error"]) == ("graded_wrong", "'banana' missing from an answer")


async def test_model_http_error_reported_by_the_agent(tmp_path: Path):
    async with ScenarioServer(Scenario(status=500)) as srv:
        wl = AgentWorkload(EchoAgent, url=srv.url)
        res = await BenchRunner(BenchConfig(load="closed:1", max_requests=1, out_dir=tmp_path), workload=wl).run()
    (row,) = _rows(res)
    assert row["outcome"] == "graded_wrong" and row["error"].startswith("model call failed: http_error")
    assert (row["meta"]["n_model_calls"], row["usage_present"]) == (1, False)


class _Sleeper:
    def __init__(self, sleep_s: float = 0.1):
        self.sleep_s = sleep_s
        self.active = 0
        self.peak = 0

    async def run_episode(self, episode_index: int, client) -> dict:
        assert client is None  # no url: no model client
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(self.sleep_s)
        self.active -= 1
        return {"i": episode_index}


async def test_closed_loop_runs_episodes_concurrently(tmp_path: Path):
    agent = _Sleeper(0.1)
    wl = AgentWorkload(agent)
    runner = BenchRunner(BenchConfig(load="closed:3", max_requests=6, out_dir=tmp_path), workload=wl)
    res = await runner.run()
    rows = _rows(res)
    assert [r["meta"]["result"] for r in rows] == [{"i": i} for i in range(6)]
    assert agent.peak == 3 and runner.live.max_in_flight == 3
    assert all((r["end_ns"] - r["sent_ns"]) >= 100e6 for r in rows)  # each episode sleeps 100 ms


async def test_yaml_agent_workload_with_module_beside_the_file(tmp_path: Path):
    (tmp_path / "my_agents_7x.py").write_text(
        "class Counter:\n"
        "    def __init__(self, step=1):\n        self.step = step\n"
        "    async def run_episode(self, episode_index, client):\n"
        "        return {'ok': episode_index % 2 == 0, 'value': episode_index * self.step}\n"
    )
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "load: closed:2\nmax_requests: 4\nout_dir: runs\n"
        "workload: {type: agent, class: 'my_agents_7x:Counter', options: {step: 10}}\n"
    )
    rf = read_run_file(cfg)
    rf.out_dir = tmp_path / "runs"
    res = await BenchRunner(rf, lanes=rf.lanes(tmp_path)).run()
    rows = _rows(res)
    assert [(r["outcome"], r["meta"]["result"]["value"]) for r in rows] == [
        ("ok", 0),
        ("graded_wrong", 10),
        ("ok", 20),
        ("graded_wrong", 30),
    ]
    manifest = json.loads((res.bundle_dir / "manifest.json").read_text())
    assert manifest["config"]["lanes"][0]["workload"]["class"] == "my_agents_7x:Counter"


def test_load_agent_class_errors_name_the_reference():
    with pytest.raises(ConfigError, match=r"class: expected 'module:Class' \(got 'nocolon'\)"):
        load_agent_class("nocolon")
    with pytest.raises(ConfigError, match="cannot import module 'no_such_mod_q'"):
        load_agent_class("no_such_mod_q:X")
    with pytest.raises(ConfigError, match="has no attribute 'Nope'"):
        load_agent_class("examples.agents.echo_agent:Nope")
    with pytest.raises(ConfigError, match="has no `async def run_episode"):
        load_agent_class("json:JSONDecoder")
    assert load_agent_class("examples.agents.echo_agent:EchoAgent") is EchoAgent
