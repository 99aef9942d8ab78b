"""`ignore_eos` on every API: `benchmaker llm --ignore-eos`, the YAML key and llm-sweep's workload put `"ignore_eos": true` in the body of chat, completions, Responses and
Messages requests (vLLM reads it on all but Messages), against the real scenario server on
127.0.0.1, which records the body it was sent (the llm-sweep flow: tests/flows/test_llm_sweep_ignore_eos.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson
import pytest

from benchmaker.recipes.cli import main
from benchmaker.sweep.point import LlmPoint
from benchmaker.tasks.shard import point_workload
from benchmaker.testing.scenario_server import Scenario, ScenarioServer
from benchmaker.workloads.registry import OpenAIChatSpec, OpenAICompletionsSpec, build_workload

# the body field that carries each API's cap on generated tokens
CAP = {"chat": "max_tokens", "completions": "max_tokens", "responses": "max_output_tokens", "messages": "max_tokens"}
PATH = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}


def _llm(url: str, api: str, out: Path, *extra: str) -> int:
    return main(
        [
            "llm",
            "--url",
            url,
            "--model",
            "m",
            "--api",
            api,
            "--max-requests",
            "2",
            "--max-tokens",
            "5",
            "--out-dir",
            str(out),
            "--no-progress",
            "--max-loop-lag-ms",
            "1000",
            *extra,
        ]
    )


@pytest.mark.parametrize("api", list(CAP))
async def test_llm_ignore_eos_is_in_the_body_of_every_api(tmp_path, api):
    async with ScenarioServer(Scenario(content_chunks=5)) as server:
        url = server.url + PATH[api]
        code = await asyncio.to_thread(_llm, url, api, tmp_path / "on", "--ignore-eos")
        on = server.last_body
        code_off = await asyncio.to_thread(_llm, url, api, tmp_path / "off")
        off = server.last_body
    assert (code, code_off) == (0, 0)
    assert (on["ignore_eos"], on[CAP[api]], on["stream"]) == (True, 5, True)
    assert "ignore_eos" not in off and off[CAP[api]] == 5
    (bundle,) = (tmp_path / "on").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["workload"]["ignore_eos"] is True
    rows = [json.loads(line) for line in (bundle / "samples.jsonl").read_text().splitlines()]
    assert [(r["outcome"], r["output_tokens"]) for r in rows] == [("ok", 5), ("ok", 5)]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_yaml_ignore_eos_key_reaches_the_body_of_every_api(api):
    spec = OpenAIChatSpec(
        type="openai-chat",
        api=api,
        url="http://127.0.0.1:9" + PATH[api],
        model="m",
        max_tokens=32,
        ignore_eos=True,
        dataset={"type": "static", "items": ["hi"]},
    )
    body = orjson.loads(build_workload(spec).request(0).body)
    assert (body["ignore_eos"], body[CAP[api]]) == (True, 32)
    # extra_body is merged last: an explicit false there wins
    spec = spec.model_copy(update={"extra_body": {"ignore_eos": False}})
    assert orjson.loads(build_workload(spec).request(0).body)["ignore_eos"] is False


def test_yaml_ignore_eos_key_on_completions():
    spec = OpenAICompletionsSpec(
        type="openai-completions",
        url="http://127.0.0.1:9/v1/completions",
        model="m",
        max_tokens=8,
        ignore_eos=True,
        dataset={"type": "static", "items": ["hi"]},
    )
    body = orjson.loads(build_workload(spec).request(0).body)
    assert (body["ignore_eos"], body["max_tokens"], body["prompt"]) == (True, 8, "hi")


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_point_workload_sends_ignore_eos_only_when_asked(api):
    point = LlmPoint(base_url="http://127.0.0.1:9", model="m", api=api, load="closed:1", prompt_words=4, max_tokens=16)
    on = point_workload(point.model_copy(update={"ignore_eos": True}))
    off = point_workload(point)
    assert on.url == "http://127.0.0.1:9" + PATH[api]
    body_on, body_off = (orjson.loads(w.request(0).body) for w in (on, off))
    assert (body_on["ignore_eos"], body_on[CAP[api]]) == (True, 16)
    assert "ignore_eos" not in body_off and body_off[CAP[api]] == 16
