"""examples/ as users start from it: every script and config runs against local servers
started here (scenario server, a tiny Prometheus /metrics app, a signing-checking API,
a fake QA model), and the test asserts values read from the written bundle.

agent.yaml, sandbox-exec.yaml and sandbox-lifecycle.yaml are exercised in
tests/recipes/test_examples_agent_sandbox.py; `test_every_example_is_exercised` keeps
this list complete.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from benchmaker.engine.config import BenchConfig
from benchmaker.recipes.cli import main as cli_main
from benchmaker.testing.scenario_server import Scenario, ScenarioServer
from benchmaker.warehouse.loader import load_run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CONFIGS = EXAMPLES / "configs"


# -- helpers -----------------------------------------------------------------------------


def _bundle(out: Path) -> Path:
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    return bundle


def _read(out: Path) -> tuple[dict, dict, list[dict]]:
    """(manifest, summary, samples sorted by seq) of the only bundle under `out`."""
    b = _bundle(out)
    rows = [orjson.loads(x) for x in (b / "samples.jsonl").read_bytes().splitlines()]
    return (
        orjson.loads((b / "manifest.json").read_bytes()),
        orjson.loads((b / "summary.json").read_bytes()),
        sorted(rows, key=lambda r: (r["lane"], r["seq"])),
    )


def _exit_matches(code: int, summary: dict) -> None:
    """0 for a valid run, 1 for an invalid one (a loaded host can make a run invalid by
    event-loop lag alone; the values asserted do not depend on it)."""
    assert code == (0 if summary["verdict"]["valid"] else 1), summary["verdict"]


def _patched(src: Path, dst: Path, *pairs: tuple[str, str]) -> Path:
    """Copy `src` to `dst` with each (old, new) replaced exactly once (fails when the
    example changed and the replacement no longer applies)."""
    text = src.read_text()
    for old, new in pairs:
        assert text.count(old) == 1, f"{src.name}: {old!r} expected once"
        text = text.replace(old, new)
    dst.write_text(text)
    return dst


def _arrivals(load: str, duration_s: float, seed: int) -> int:
    """Arrivals the runner sends for an open-loop `load` in `duration_s` (those with
    intended_ns < duration, as BenchRunner._open_lane)."""
    model = BenchConfig(load=load, duration_s=duration_s).load_model()
    return sum(1 for _ in itertools.takewhile(lambda a: a[0] < duration_s * 1e9, model.arrivals(seed=seed)))


class _App:
    """A tiny aiohttp app on 127.0.0.1 (port 0) for the duration of an `async with`."""

    def __init__(self, routes: list[web.RouteDef]) -> None:
        self.app = web.Application()
        self.app.add_routes(routes)
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> _App:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()


def _metrics_app() -> tuple[_App, list[int]]:
    """A /metrics endpoint: a vLLM gauge fixed at 3, a vLLM counter that grows by 10
    per scrape, and a non-vLLM gauge (filtered out by the example's `metrics:`)."""
    scrapes = [0]

    async def metrics(request: web.Request) -> web.Response:
        scrapes[0] += 1
        text = (
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="my-model"} 3\n'
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{model_name="my-model"}} {10 * scrapes[0]}\n'
            "# TYPE process_open_fds gauge\nprocess_open_fds 12\n"
        )
        return web.Response(text=text, content_type="text/plain")

    return _App([web.get("/metrics", metrics)]), scrapes


class _AuthScenarioServer(ScenarioServer):
    """The scenario server, also keeping the Authorization headers it was sent."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.authorization: set[str | None] = set()

    async def _serve(self, request: web.Request, kind: str) -> web.StreamResponse:
        self.authorization.add(request.headers.get("Authorization"))
        return await super()._serve(request, kind)


# -- scripts -----------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["minimal_get.py", "hooks.py", "streaming_chat.py"])
def test_script_without_url_prints_usage_and_exits_2(script: str):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.startswith(f"usage: python examples/{script}")


async def test_minimal_get(tmp_path: Path, capsys):
    from examples.minimal_get import main

    async with ScenarioServer() as srv:
        code = await asyncio.to_thread(main, [srv.url + "/health", "--requests", "5", "--out-dir", str(tmp_path)])
    manifest, summary, rows = _read(tmp_path)
    _exit_matches(code, summary)
    assert [(r["seq"], r["outcome"], r["http_status"], r["bytes_received"]) for r in rows] == [
        (i, "ok", 200, 2) for i in range(5)
    ]  # /health answers "ok" (2 bytes)
    assert (manifest["kind"], manifest["label"]) == ("http", "example-get")
    assert summary["run"]["e2e_ms"]["count"] == 5
    assert f"run {manifest['run_id']}: 5 ok of 5" in capsys.readouterr().out


async def test_minimal_get_takes_the_clis_concurrency_and_rate(tmp_path: Path, capsys):
    from examples.minimal_get import main

    async with ScenarioServer() as srv:
        url = srv.url + "/health"
        code = await asyncio.to_thread(main, [url, "--requests", "4", "--concurrency", "2", "--out-dir", str(tmp_path)])
    manifest, summary, _ = _read(tmp_path)
    _exit_matches(code, summary)
    assert manifest["config"]["load"] == "closed:2"
    with pytest.raises(SystemExit) as exc:
        main([url, "--concurrency", "2", "--rate", "poisson:5", "--out-dir", str(tmp_path / "b")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith("error: --concurrency and --rate: give one (--concurrency 2 is --rate closed:2)\n")
    assert not (tmp_path / "b").exists()


def _signed_api(secret: bytes) -> tuple[_App, list[str]]:
    """POST /api/score: 401 unless X-Signature is the HMAC of the request (the example's
    own `signature`), else {"result": {"score": <n-th good request>}}."""
    from examples.hooks import signature

    seen: list[str] = []

    async def score(request: web.Request) -> web.Response:
        body = await request.read()
        ts = request.headers.get("X-Timestamp", "")
        want = signature(secret, ts, request.method, request.path_qs, body)
        if request.headers.get("X-Signature") != want:
            return web.json_response({"error": "bad signature"}, status=401)
        seen.append(body.decode())
        return web.json_response({"result": {"score": len(seen)}})

    return _App([web.post("/api/score", score)]), seen


async def test_hooks_sign_requests_and_parse_a_response_field(tmp_path: Path, monkeypatch, capsys):
    from examples.hooks import main

    monkeypatch.setenv("HOOKS_SECRET", "s3cret-for-test")
    app, seen = _signed_api(b"s3cret-for-test")
    async with app:
        code = await asyncio.to_thread(
            main,
            [
                app.url + "/api/score?v=1",
                "--field",
                "result.score",
                "--body",
                '{"q": 7}',
                "--requests",
                "4",
                "--out-dir",
                str(tmp_path),
            ],
        )
    _, summary, rows = _read(tmp_path)
    _exit_matches(code, summary)
    assert seen == ['{"q":7}'] * 4  # every request passed the signature check (body as orjson wrote it)
    # closed:1 sends one at a time, so the n-th request (seq n-1) got score n
    assert [(r["outcome"], r["meta"]["result.score"]) for r in rows] == [("ok", n) for n in (1, 2, 3, 4)]
    bundle_text = "".join(p.read_text() for p in _bundle(tmp_path).iterdir() if p.is_file())
    assert "s3cret-for-test" not in bundle_text


async def test_hooks_with_the_wrong_secret_are_rejected(tmp_path: Path, monkeypatch, capsys):
    from examples.hooks import main

    monkeypatch.setenv("HOOKS_SECRET", "wrong")
    app, seen = _signed_api(b"right")
    async with app:
        code = await asyncio.to_thread(main, [app.url + "/api/score", "--requests", "2", "--out-dir", str(tmp_path)])
    _, _, rows = _read(tmp_path)
    assert code == 1 and seen == []  # no request succeeded: invalid run
    assert [(r["outcome"], r["http_status"]) for r in rows] == [("http_error", 401)] * 2


def test_hooks_without_secret_exits_2(monkeypatch, capsys):
    from examples.hooks import main

    monkeypatch.delenv("HOOKS_SECRET", raising=False)
    assert main(["http://127.0.0.1:9/api"]) == 2
    assert "set HOOKS_SECRET" in capsys.readouterr().err


async def test_streaming_chat(tmp_path: Path, capsys):
    from examples.streaming_chat import main

    sc = Scenario(ttft_ms=20, itl_ms=2, content_chunks=6)
    async with ScenarioServer(sc) as srv:
        code = await asyncio.to_thread(
            main, [srv.chat_url, "--model", "m", "--requests", "4", "--input-words", "16", "--out-dir", str(tmp_path)]
        )
    manifest, summary, rows = _read(tmp_path)
    _exit_matches(code, summary)
    # 6 one-token content chunks per answer, usage on the last chunk (scenario default)
    assert [(r["outcome"], r["output_tokens"], r["n_token_events"]) for r in rows] == [("ok", 6, 6)] * 4
    run = summary["run"]
    assert run["output_tokens_total"] == 24 and run["itl_event_ms"]["count"] == 4 * 5  # 5 gaps per answer
    assert run["ttft_ms"]["min"] >= 20.0  # the first token goes out 20 ms after arrival
    out = capsys.readouterr().out
    assert "output tokens 24" in out and re.search(r"ttft_ms: p50 +\d+\.\d\d", out)


def test_llm_demo(tmp_path: Path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("llm_demo", EXAMPLES / "llm_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    demo = module.demo
    monkeypatch.chdir(tmp_path)
    code = demo(["--max-requests", "6", "--no-progress"])  # 10 s at poisson:50, cut at 6 requests
    _, summary, rows = _read(tmp_path / "runs")
    assert code == 0, summary["verdict"]  # valid, or invalid on a busy host: the demo ran either way
    assert [(r["outcome"], r["output_tokens"]) for r in rows] == [("ok", 32)] * 6  # 32 one-token chunks


def test_llm_demo_exits_0_for_an_invalid_run_and_says_how_to_get_a_valid_one(tmp_path: Path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("llm_demo", EXAMPLES / "llm_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(tmp_path)
    # a schedule lag limit of 1 ns: no open-loop run keeps it, so the run is invalid
    code = module.demo(["--max-requests", "3", "--no-progress", "--max-schedule-lag-ms", "0.000001"])
    _, summary, _ = _read(tmp_path / "runs")
    assert summary["verdict"]["valid"] is False
    assert summary["verdict"]["reasons"][0].startswith("client-saturated: schedule lag p99")
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "The demo ran: the run was measured and written, and judged INVALID" in out
    assert "examples/llm_demo.py --max-loop-lag-ms 50 --max-schedule-lag-ms 50" in out
    # bad input is not a run: its exit code stays 2
    assert module.demo(["--max-requests", "0"]) == 2


# -- configs -----------------------------------------------------------------------------


async def test_llm_dotenv_reads_endpoint_and_key_from_dotenv(tmp_path: Path, monkeypatch, capsys):
    for var in ("LLM_URL", "LLM_MODEL", "LLM_API_KEY", "LLM_MAX_TOKENS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # no stray ./.env
    folder = tmp_path / "configs"
    folder.mkdir()
    cfg = shutil.copy(CONFIGS / "llm-dotenv.yaml", folder / "llm-dotenv.yaml")
    async with _AuthScenarioServer(Scenario(content_chunks=3)) as srv:
        env = _patched(
            CONFIGS / ".env.example",
            folder / ".env",
            ("LLM_URL=http://127.0.0.1:8000/v1/chat/completions", f"LLM_URL={srv.chat_url}"),
            ("LLM_MODEL=my-model", "LLM_MODEL=dotenv-model"),
            ("LLM_API_KEY=\n", "LLM_API_KEY=sk-dotenv-secret\n"),
        )
        assert env.exists()
        code = await asyncio.to_thread(cli_main, ["run", str(cfg), "--out-dir", str(tmp_path / "out"), "--no-progress"])
        body = srv.last_body
    manifest, summary, rows = _read(tmp_path / "out")
    _exit_matches(code, summary)
    assert len(rows) == 20 and {r["outcome"] for r in rows} == {"ok"}  # max_requests: 20
    assert (body["model"], body["max_tokens"]) == ("dotenv-model", 64)  # from .env and the default
    assert srv.authorization == {"Bearer sk-dotenv-secret"}
    text = "".join(p.read_text() for p in _bundle(tmp_path / "out").iterdir() if p.is_file())
    assert "sk-dotenv-secret" not in text and manifest["label"] == "example-dotenv"


async def test_llm_monitor_scrapes_metrics_into_the_warehouse(tmp_path: Path, monkeypatch, capsys):
    # 30 s of poisson:10 is long for a test: the same file with 8 requests one at a time
    cfg = _patched(
        CONFIGS / "llm-monitor.yaml",
        tmp_path / "llm-monitor.yaml",
        ("load: poisson:10", "load: closed:1"),
        ("duration_s: 30s", "max_requests: 8"),
    )
    metrics, scrapes = _metrics_app()
    async with ScenarioServer(Scenario(content_chunks=4)) as srv, metrics:
        monkeypatch.setenv("URL", srv.chat_url)
        monkeypatch.setenv("METRICS_URL", metrics.url + "/metrics")
        monkeypatch.setenv("METRICS_INTERVAL", "60s")  # longer than the run: a scrape at start and at stop
        code = await asyncio.to_thread(cli_main, ["run", str(cfg), "--out-dir", str(tmp_path / "out"), "--no-progress"])
    manifest, summary, rows = _read(tmp_path / "out")
    _exit_matches(code, summary)
    assert len(rows) == 8 and scrapes == [2]
    mon = [orjson.loads(x) for x in (_bundle(tmp_path / "out") / "monitor.jsonl").read_bytes().splitlines()]
    gauge = [m for m in mon if m["name"] == "vllm:num_requests_running"]
    rate = [m for m in mon if m["name"] == "vllm:request_success_total:rate_per_s"]
    instance = metrics.url.removeprefix("http://")
    # 2 gauge rows (one per scrape) + 1 counter rate (the first scrape has no previous one);
    # process_open_fds is not in `metrics: [vllm:*, sglang:*]`
    assert len(mon) == 3
    assert [(g["value"], g["labels"]) for g in gauge] == [(3.0, {"model_name": "my-model", "instance": instance})] * 2
    assert len(rate) == 1 and rate[0]["value"] > 0 and rate[0]["t_ns"] > gauge[0]["t_ns"]
    wh = tmp_path / "wh.duckdb"
    report = load_run(wh, _bundle(tmp_path / "out"))
    assert (report.rows["requests"], report.rows["monitor_samples"]) == (8, 3)


class _QAModel:
    """A fake chat model that answers examples/data/qa.jsonl, wrongly for two questions
    (leap year: 365, Apollo 11: 1968), streaming SSE chunks with usage."""

    WRONG = {"leap year": "365", "Apollo 11": "1968"}

    def __init__(self) -> None:
        self.answers = {}
        for line in (EXAMPLES / "data" / "qa.jsonl").read_text().splitlines():
            row = json.loads(line)
            wrong = [v for k, v in self.WRONG.items() if k in row["question"]]
            self.answers[row["question"]] = wrong[0] if wrong else row["answer"]

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = f"The answer is {self.answers[body['messages'][-1]['content']]}."
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}},
        ]
        for c in chunks:
            await resp.write(b"data: " + orjson.dumps({"id": "x", "object": "chat.completion.chunk", **c}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def test_llm_grading_reports_accuracy(tmp_path: Path, monkeypatch, capsys):
    model = _QAModel()
    async with _App([web.post("/v1/chat/completions", model.chat)]) as app:
        monkeypatch.setenv("URL", app.url + "/v1/chat/completions")
        code = await asyncio.to_thread(
            cli_main, ["run", str(CONFIGS / "llm-grading.yaml"), "--out-dir", str(tmp_path / "out"), "--no-progress"]
        )
    manifest, summary, rows = _read(tmp_path / "out")
    _exit_matches(code, summary)
    # qa.jsonl has 8 rows; rows 2 (leap year) and 8 (Apollo 11) are answered wrongly
    assert [(r["meta"]["row"], r["grade"], r["outcome"]) for r in rows] == [
        (n, "wrong" if n in (2, 8) else "correct", "graded_wrong" if n in (2, 8) else "ok") for n in range(1, 9)
    ]
    run = summary["run"]
    assert (run["n_graded"], run["n_correct"], run["accuracy"]) == (8, 6, 0.75)
    wh = tmp_path / "wh.duckdb"
    load_run(wh, _bundle(tmp_path / "out"))
    import duckdb

    con = duckdb.connect(str(wh), read_only=True)
    try:
        grades = con.execute("SELECT grade, count(*) FROM requests GROUP BY grade ORDER BY grade").fetchall()
    finally:
        con.close()
    assert grades == [("correct", 6), ("wrong", 2)]


async def test_llm_grading_against_the_scripted_server_says_what_it_needs(tmp_path: Path, monkeypatch, capsys):
    # the bundled scripted server answers "tok tok ...": every answer graded wrong, and
    # the run says, before and after, that it needs a model that answers arithmetic
    async with ScenarioServer(Scenario()) as srv:
        monkeypatch.setenv("URL", srv.chat_url)
        code = await asyncio.to_thread(
            cli_main, ["run", str(CONFIGS / "llm-grading.yaml"), "--out-dir", str(tmp_path / "out"), "--no-progress"]
        )
    _, summary, _ = _read(tmp_path / "out")
    assert code == 1 and (summary["run"]["n_graded"], summary["run"]["n_correct"]) == (8, 0)
    out = " ".join(capsys.readouterr().out.split())
    needs = (
        "llm-grading.yaml needs: a real model that answers arithmetic questions, its chat endpoint in URL "
        "(and MODEL, OPENAI_API_KEY); no bundled server answers questions: against the scripted one every "
        "answer is graded wrong"
    )
    assert out.startswith(needs) and out.endswith(f"the run is not valid; {needs}"), out


async def test_hooks_as_its_docstring_runs_it_on_the_scripted_server(tmp_path: Path, monkeypatch, capsys):
    from examples.hooks import main

    monkeypatch.setenv("HOOKS_SECRET", "s")
    body = '{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    async with ScenarioServer(Scenario(content_chunks=3)) as srv:
        argv = [srv.chat_url, "--requests", "3"]
        code = await asyncio.to_thread(
            main, [*argv, "--field", "choices[0].message.content", "--body", body, "--out-dir", str(tmp_path / "a")]
        )
        _, summary, rows = _read(tmp_path / "a")
        _exit_matches(code, summary)
        assert [(r["outcome"], r["meta"]["choices[0].message.content"]) for r in rows] == [("ok", "tok tok tok ")] * 3
        assert "needs" not in capsys.readouterr().err
        # the default --field result is not in chat JSON: no request succeeds, and it says what it needs
        code = await asyncio.to_thread(main, [*argv, "--out-dir", str(tmp_path / "b")])
    _, _, rows = _read(tmp_path / "b")
    assert code == 1 and {r["outcome"] for r in rows} == {"grading_error"}
    assert capsys.readouterr().err == (
        f"hooks.py: no request succeeded; it needs an API at {srv.chat_url} that answers with JSON holding "
        "--field result (the bundled scripted server, python -m benchmaker.testing.scenario_server, answers "
        "chat JSON: --field 'choices[0].message.content' with a chat --body)\n"
    )


async def test_http_yaml(tmp_path: Path, monkeypatch, capsys):
    # 30 s at constant:100 is long for a test: the same file for 0.5 s (50 arrivals, 10 ms apart)
    cfg = _patched(CONFIGS / "http.yaml", tmp_path / "http.yaml", ("duration_s: 30s", "duration_s: 0.5s"))
    async with ScenarioServer() as srv:
        monkeypatch.setenv("URL", srv.url + "/health")
        code = await asyncio.to_thread(cli_main, ["run", str(cfg), "--out-dir", str(tmp_path / "out"), "--no-progress"])
    manifest, summary, rows = _read(tmp_path / "out")
    _exit_matches(code, summary)
    assert len(rows) == 50 and {(r["outcome"], r["http_status"]) for r in rows} == {("ok", 200)}
    assert [r["intended_ns"] for r in rows] == [i * 10_000_000 for i in range(50)]  # constant:100 = every 10 ms


async def test_llm_yaml(tmp_path: Path, monkeypatch, capsys):
    # 60 s with 5 s warm-up is long for a test: the same file for 2 s with 0.5 s warm-up
    cfg = _patched(
        CONFIGS / "llm.yaml",
        tmp_path / "llm.yaml",
        ("duration_s: 60s", "duration_s: 2s"),
        ("warmup_s: 5s", "warmup_s: 0.5s"),
    )
    async with ScenarioServer(Scenario(content_chunks=5)) as srv:
        monkeypatch.setenv("URL", srv.chat_url)
        code = await asyncio.to_thread(cli_main, ["run", str(cfg), "--out-dir", str(tmp_path / "out"), "--no-progress"])
        body = srv.last_body
    manifest, summary, rows = _read(tmp_path / "out")
    _exit_matches(code, summary)
    expected = _arrivals("poisson:20", 2.0, seed=1)  # the file's load and seed
    warm = sum(1 for r in rows if r["intended_ns"] < 500_000_000)
    assert len(rows) == expected and {r["outcome"] for r in rows} == {"ok"}
    assert {r["phase"] for r in rows if r["intended_ns"] < 500_000_000} == {"warmup"}
    assert summary["run"]["n_samples"] == expected - warm  # warm-up left out of the summary
    assert summary["run"]["output_tokens_total"] == 5 * (expected - warm)
    assert (body["model"], body["max_tokens"]) == ("my-model", 128)


async def test_mixed_lanes_yaml(tmp_path: Path, monkeypatch, capsys):
    # 120 s of 30 s stages is long for a test: the same file with 250 ms stages for 1 s
    cfg = _patched(
        CONFIGS / "mixed-lanes.yaml",
        tmp_path / "mixed.yaml",
        ("duration_s: 120s", "duration_s: 1s"),
        ("stages:2,8,2,8@30s", "stages:4,16,4,16@250ms"),
        ("stages:8,2,8,2@30s", "stages:16,4,16,4@250ms"),
    )
    async with ScenarioServer() as srv:
        monkeypatch.setenv("URL", srv.chat_url)
        code = await asyncio.to_thread(cli_main, ["run", str(cfg), "--out-dir", str(tmp_path / "out"), "--no-progress"])
    manifest, summary, rows = _read(tmp_path / "out")
    _exit_matches(code, summary)
    n_chat = _arrivals("stages:4,16,4,16@250ms", 1.0, seed=0)
    n_long = _arrivals("stages:16,4,16,4@250ms", 1.0, seed=0)
    assert n_chat == n_long  # anti-correlated but equal totals
    by_lane = {lane: sum(1 for r in rows if r["lane"] == lane) for lane in ("chat", "long-context")}
    assert by_lane == {"chat": n_chat, "long-context": n_long}
    assert {k: v["n_ok"] for k, v in summary["lanes"].items()} == by_lane


def test_every_example_is_exercised():
    """Each script and config in examples/ is named by a test here or in
    tests/recipes/test_examples_agent_sandbox.py (a new example needs a test)."""
    tests = Path(__file__).read_text() + (ROOT / "tests" / "recipes" / "test_examples_agent_sandbox.py").read_text()
    names = [p.name for p in EXAMPLES.glob("*.py")] + [
        p.name for p in CONFIGS.iterdir() if p.is_file() and p.name != ".gitignore"
    ]
    missing = [n for n in names if f'"{n}"' not in tests]
    assert names and missing == []
