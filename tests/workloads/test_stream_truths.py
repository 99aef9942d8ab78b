"""Stream truths (docs/stream-rules.md): every case file of tests/data/cases/streams and
tests/data/cases/streams-timed (copies of ../shared/cases) gives its right value from the
cases README, first with a fake clock (exact values through the parser and summary.sql),
then through `benchmaker llm` against a real local server sending the bytes with their
delays (sse_timed_server.py, copied from ../shared/cases/streams-timed) and through a
replayed turn (the replay model client reads streams with the same parser), and into
the warehouse (v_tpot_definitions: ours beside vLLM's and aiperf's TPOT)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import orjson
import pytest
from aiohttp import web

from benchmaker.agent.model_client import ModelClient
from benchmaker.apis.generated import settle, usage_problem
from benchmaker.apis.openai_chat import OpenAIChatParser
from benchmaker.engine.records import Sample
from benchmaker.engine.summary import nest_summary, summarize_samples
from benchmaker.recipes.cli import main
from benchmaker.warehouse.loader import load_run
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.registry import OpenAIChatSpec, build_workload

MS = 1_000_000  # ns per ms
CASES = Path(__file__).resolve().parents[1] / "data" / "cases"
TIMED_SERVER = CASES / "streams-timed" / "sse_timed_server.py"
ROOT = Path(__file__).resolve().parents[2]
SHARED = next((p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.is_dir()), None)

# Right values (../shared/cases/README.md and, for our own cases, the kinds it names).
# events: token events; tokens: usage completion_tokens; hidden: hidden reasoning tokens;
# invalid: start of usage_invalid_reason (None: the counts can be true); max_tokens: the
# request's cap as sent (None: none sent).
RIGHT = {
    "streams/refusal-only.sse": dict(
        outcome="ok", error=None, finish_reason="stop", finish_class="stop", events=2, tokens=9
    ),
    "streams/finish-abort.sse": dict(
        outcome="aborted",
        error="finish_reason 'abort' (class abort): the server aborted the request",
        finish_reason="abort",
        finish_class="abort",
        events=2,
        tokens=4,
    ),
    "streams/finish-unknown.sse": dict(
        outcome="aborted",
        error="finish_reason 'insufficient_system_resource' (class abort): the server aborted the request",
        finish_reason="insufficient_system_resource",
        finish_class="abort",
        events=1,
        tokens=1,
    ),
    "streams/finish-unrecognized.sse": dict(
        outcome="ok", error=None, finish_reason="stop_token_hit", finish_class="unknown", events=2, tokens=2
    ),
    "streams/surrogate-split.sse": dict(
        outcome="ok", error=None, finish_reason="stop", finish_class="stop", events=2, tokens=3
    ),
    "streams/typed-parts-crlf.sse": dict(
        outcome="ok", error=None, finish_reason="length", finish_class="length", events=9, tokens=16
    ),
    "streams-timed/finish-reason-empty-string.sse": dict(
        outcome="ok", error=None, finish_reason="stop", finish_class="stop", events=4, tokens=4
    ),
    "streams-timed/hidden-reasoning-tokens.sse": dict(
        outcome="ok",
        error=None,
        finish_reason="stop",
        finish_class="stop",
        events=20,
        tokens=220,
        hidden=200,
        tpot_ms=20.0,
    ),  # (1385 - 1005) / (220 - 200 - 1)
    "streams-timed/usage-after-delay.sse": dict(
        outcome="ok",
        error=None,
        finish_reason="stop",
        finish_class="stop",
        events=10,
        tokens=10,
        tpot_ms=20.0,
        e2e_ms=785.0,
    ),  # (285 - 105) / (10 - 1); the body ends at 785
    "streams-timed/usage-exceeds-max-tokens.sse": dict(
        outcome="ok",
        error=None,
        finish_reason="length",
        finish_class="length",
        events=16,
        tokens=136,
        max_tokens=16,
        invalid="usage.completion_tokens 136 > the request's max_tokens 16; "
        "usage.completion_tokens 136 = 1 + 2 + ... + 16 over 16 token events",
    ),
}


def _timed_events(name: str) -> list[tuple[int, bytes]]:
    """(arrival ms from the request, event bytes) as sse_timed_server.py sends them."""
    out, t = [], 0.0
    for event in (CASES / name).read_bytes().split(b"\n\n"):
        if not event.strip():
            continue
        m = re.match(rb": delay_ms=(\d+(?:\.\d+)?)\n", event)
        if m:
            t += float(m.group(1))
            event = event[m.end() :]
        out.append((round(t), event + b"\n\n"))
    return out


def test_every_case_file_has_a_right_value():
    files = sorted(f"{p.parent.name}/{p.name}" for p in CASES.glob("streams*/*.sse"))
    assert files == sorted(RIGHT)


def test_the_timed_fixtures_are_the_shared_cases_byte_for_byte():
    if SHARED is None or not (SHARED / "cases" / "streams-timed").is_dir():
        pytest.skip("../shared/cases/streams-timed absent")
    for path in sorted((SHARED / "cases" / "streams-timed").iterdir()):
        assert (CASES / "streams-timed" / path.name).read_bytes() == path.read_bytes(), path.name


# -- a fake clock: each event at its delay, exact values ----------------------------------------------


def _parsed(name: str) -> Sample:
    exp = RIGHT[name]
    parser, sample = OpenAIChatParser(max_tokens=exp.get("max_tokens")), Sample(run_id="truths", seq=0)
    sample.intended_ns = sample.sent_ns = 0
    events = _timed_events(name)
    for t_ms, event in events:
        parser.feed(event, t_ms * MS, sample)
    parser.finish(sample)
    sample.end_ns = events[-1][0] * MS
    return sample


@pytest.mark.parametrize("name", list(RIGHT))
def test_case_gives_its_right_value_through_the_parser(name):
    exp, s = RIGHT[name], _parsed(name)
    assert (s.outcome, s.error) == (exp["outcome"], exp["error"])
    assert (s.finish_reason, s.finish_class) == (exp["finish_reason"], exp["finish_class"])
    assert (s.n_token_events, s.output_tokens) == (exp["events"], exp["tokens"])
    assert s.hidden_reasoning_tokens == exp.get("hidden")
    invalid = exp.get("invalid")
    assert (s.usage_invalid_reason or "").startswith(invalid or "") and (s.usage_invalid_reason is None) == (
        invalid is None
    ), s.usage_invalid_reason


def _summary(tmp_path: Path, samples: list[Sample]) -> dict:
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b"".join(orjson.dumps(s.to_dict(), option=orjson.OPT_APPEND_NEWLINE) for s in samples))
    return nest_summary(summarize_samples([path]))["run"]


@pytest.mark.parametrize("name", ["streams-timed/hidden-reasoning-tokens.sse", "streams-timed/usage-after-delay.sse"])
def test_tpot_is_the_token_span_over_the_visible_tokens_after_the_first(tmp_path, name):
    exp = RIGHT[name]
    run = _summary(tmp_path, [_parsed(name)])
    assert run["tpot_ms"]["count"] == 1 and run["tpot_ms"]["p50"] == pytest.approx(exp["tpot_ms"])
    assert run["n_tpot_first_event_assumed"] == 1  # chat states no per-event count: the summary says so
    if "e2e_ms" in exp:
        assert run["e2e_ms"]["p50"] == exp["e2e_ms"]  # E2E still ends at the end of the body
    assert run["hidden_reasoning_tokens_total"] == exp.get("hidden")  # None: usage stated no reasoning


def test_impossible_counts_are_flagged_counted_and_never_summed(tmp_path):
    run = _summary(
        tmp_path, [_parsed("streams-timed/usage-exceeds-max-tokens.sse"), _parsed("streams/refusal-only.sse")]
    )
    assert (run["n_ok"], run["n_usage_invalid"]) == (2, 1)
    assert (run["output_tokens_total"], run["prompt_tokens_total"], run["cached_tokens_total"]) == (None, None, None)
    assert run["token_totals_null_reason"] == (
        "1 of 2 successful requests have server token counts that cannot be true (usage_invalid_reason)"
    )
    assert run["tpot_ms"]["count"] == 1  # the flagged sample's TPOT is not computed from 136


def test_an_unknown_finish_reason_completes_and_is_counted(tmp_path):
    run = _summary(tmp_path, [_parsed("streams/finish-unrecognized.sse"), _parsed("streams/finish-abort.sse")])
    assert (run["n_ok"], run["n_aborted"], run["n_finish_unknown"]) == (1, 1, 1)


def test_the_first_event_counts_as_its_stated_tokens(tmp_path):
    # SGLang-style per-event counts: 4 tokens came with the first event, 1 with each of 3 more
    s = Sample(
        run_id="truths",
        seq=0,
        intended_ns=0,
        sent_ns=0,
        first_token_ns=100 * MS,
        end_ns=160 * MS,
        token_event_ns=[100 * MS, 120 * MS, 140 * MS, 160 * MS],
        token_event_tokens=[4, 1, 1, 1],
        n_token_events=4,
        usage_present=True,
        output_tokens=7,
        prompt_tokens=5,
    )
    run = _summary(tmp_path, [s])
    assert run["tpot_ms"]["p50"] == 20.0 and run["n_tpot_first_event_assumed"] == 0  # 60 / (7 - 4)


@pytest.mark.parametrize(
    ("fields", "total", "cap", "reason"),
    [
        (
            dict(prompt_tokens=10, output_tokens=5),
            16,
            None,
            "usage.prompt_tokens 10 + completion_tokens 5 != total_tokens 16",
        ),
        (
            dict(prompt_tokens=10, output_tokens=5, reasoning_tokens=6),
            15,
            None,
            "usage reasoning_tokens 6 > completion_tokens 5",
        ),
        (
            dict(prompt_tokens=10, output_tokens=5, cached_tokens=11),
            15,
            None,
            "usage cached_tokens 11 > prompt_tokens 10",
        ),
        (dict(prompt_tokens=10, output_tokens=5), 15, 5, None),
        (
            dict(prompt_tokens=10, output_tokens=6, n_token_events=3, output_chars=30),
            16,
            None,
            None,
        ),  # 6 = 1+2+3, 30 chars
        (
            dict(prompt_tokens=10, output_tokens=6, n_token_events=3, output_chars=3),
            16,
            None,
            "usage.completion_tokens 6 = 1 + 2 + ... + 3 over 3 token events (3 characters generated): counts summed "
            "cumulatively",
        ),
    ],
)
def test_usage_checks_name_what_cannot_be_true(fields, total, cap, reason):
    assert usage_problem(Sample(run_id="r", seq=0, **fields), total_tokens=total, max_tokens=cap) == reason


def test_settle_is_the_one_call_a_parser_makes():
    s = Sample(run_id="r", seq=0, output_tokens=30, reasoning_tokens=20, n_token_events=10, output_chars=40)
    assert settle(s, "cancelled", reasoning_seen=False) == (
        "finish_reason 'cancelled' (class cancelled): the server cancelled the request"
    )
    assert (s.finish_reason, s.finish_class, s.hidden_reasoning_tokens, s.usage_invalid_reason) == (
        "cancelled",
        "cancelled",
        20,
        None,
    )
    assert settle(s, "weird_end", reasoning_seen=True, max_tokens=16) is None
    assert (s.finish_class, s.hidden_reasoning_tokens) == ("unknown", 0)
    assert s.usage_invalid_reason == "usage.completion_tokens 30 > the request's max_tokens 16"


# -- a real server sending the bytes with their delays ------------------------------------------------


class TimedServer:
    """sse_timed_server.py FILE on 127.0.0.1 (its own process): any POST gets the file's
    events, each after its `: delay_ms=N`."""

    def __init__(self, name: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(TIMED_SERVER), str(CASES / name)], stdout=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline().split()  # type: ignore[union-attr]
        assert line[:1] == ["PORT"], line
        self.base = f"http://127.0.0.1:{line[1]}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def timed_server():
    servers: list[TimedServer] = []

    def start(name: str) -> TimedServer:
        servers.append(TimedServer(name))
        return servers[-1]

    yield start
    for srv in servers:
        srv.close()


def _llm(base: str, out: Path, max_tokens: int | None) -> int:
    args = [
        "llm",
        "--url",
        base + "/v1/chat/completions",
        "--model",
        "m",
        "--max-requests",
        "1",
        "--out-dir",
        str(out),
        "--no-progress",
        "--max-loop-lag-ms",
        "1000",
    ]
    return main(args + (["--max-tokens", str(max_tokens)] if max_tokens else []))


def _bundle(out: Path) -> Path:
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    return bundle


@pytest.mark.parametrize("name", list(RIGHT))
def test_case_gives_its_right_value_through_benchmaker_llm(timed_server, tmp_path, name):
    exp = RIGHT[name]
    code = _llm(timed_server(name).base, tmp_path, exp.get("max_tokens"))
    bundle = _bundle(tmp_path)
    (s,) = [orjson.loads(x) for x in (bundle / "samples.jsonl").read_bytes().splitlines()]
    run = orjson.loads((bundle / "summary.json").read_bytes())["run"]
    assert code == (1 if exp["outcome"] == "aborted" else 0)  # a failed request fails the run (error rate)
    assert (s["outcome"], s["error"]) == (exp["outcome"], exp["error"])
    assert (s["finish_reason"], s["finish_class"]) == (exp["finish_reason"], exp["finish_class"])
    assert (s["n_token_events"], s["output_tokens"], s["hidden_reasoning_tokens"]) == (
        exp["events"],
        exp["tokens"],
        exp.get("hidden"),
    )
    assert (s["usage_invalid_reason"] or "").startswith(exp.get("invalid") or "")
    assert (s["usage_invalid_reason"] is None) == ("invalid" not in exp)
    assert run["n_finish_unknown"] == (1 if exp["finish_class"] == "unknown" else 0)
    assert run["n_usage_invalid"] == (1 if "invalid" in exp else 0)
    if "tpot_ms" in exp:  # real sleeps of 20 ms: never the old 1.7-1.9 ms or 75-77 ms
        assert 18.0 <= run["tpot_ms"]["p50"] <= 45.0, run["tpot_ms"]
    if "e2e_ms" in exp:
        assert run["e2e_ms"]["p50"] >= exp["e2e_ms"]  # the body ends after the late usage chunk
    if "invalid" in exp:
        assert run["output_tokens_total"] is None and run["token_totals_null_reason"].startswith("1 of 1 ")


@pytest.mark.parametrize("name", [n for n in RIGHT if n.startswith("streams-timed/")])
async def test_timed_case_through_the_replay_model_client(timed_server, name):
    # a replayed turn: the replay model client parses with the engine's parser, so the same truths
    exp = RIGHT[name]
    client = ModelClient(timed_server(name).base)
    try:
        extra = {"max_tokens": exp["max_tokens"]} if "max_tokens" in exp else {}
        result = await client.chat([{"role": "user", "content": "hi"}], **extra)
    finally:
        await client.aclose()
    s = result.sample
    assert (result.outcome, result.error) == (exp["outcome"], exp["error"])
    assert (s.finish_reason, s.n_token_events, s.output_tokens) == (exp["finish_reason"], exp["events"], exp["tokens"])
    assert s.hidden_reasoning_tokens == exp.get("hidden")
    assert (s.usage_invalid_reason or "").startswith(exp.get("invalid") or "")
    assert (s.usage_invalid_reason is None) == ("invalid" not in exp)


def test_the_warehouse_sets_our_tpot_beside_vllms_and_aiperfs(timed_server, tmp_path):
    out = tmp_path / "runs"
    assert _llm(timed_server("streams-timed/hidden-reasoning-tokens.sse").base, out, None) == 0
    load_run(tmp_path / "w.duckdb", _bundle(out))
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        ours, vllm, aiperf, hidden, assumed = con.execute(
            "SELECT tpot_ms, tpot_vllm_ms, tpot_aiperf_ms, hidden_reasoning_tokens, first_event_tokens_assumed "
            "FROM v_tpot_definitions"
        ).fetchone()
        (compat,) = con.execute("SELECT median_tpot_ms FROM v_vllm_compat WHERE sweep_point IS NULL").fetchone()
        (summary,) = con.execute("SELECT tpot_ms.p50 FROM v_run_summary").fetchone()
        span, after_first = con.execute(
            "SELECT (token_event_ns[20] - token_event_ns[1]) / 1e6, (end_ns - first_token_ns) / 1e6 FROM requests"
        ).fetchone()
    finally:
        con.close()
    assert (hidden, assumed) == (200, True)
    assert ours == pytest.approx(span / 19) and summary == pytest.approx(ours)  # 19 visible tokens after the first
    assert vllm == pytest.approx(after_first / 219) and aiperf == pytest.approx(after_first / 219)
    assert compat == pytest.approx(vllm)  # v_vllm_compat keeps vLLM's own definition
    assert 18.0 <= ours <= 45.0 and vllm < 4.0


# -- ignore_eos ---------------------------------------------------------------------------------------


async def _recording_server(bodies: list[dict]) -> tuple[web.AppRunner, str]:
    stream = (CASES / "streams" / "refusal-only.sse").read_bytes()

    async def chat(request: web.Request) -> web.StreamResponse:
        bodies.append(orjson.loads(await request.read()))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(stream)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions"


def test_llm_ignore_eos_is_sent_in_the_body_as_vllm_and_sglang_expect(tmp_path):
    import asyncio
    import threading

    bodies: list[dict] = []
    loop = asyncio.new_event_loop()
    runner, url = loop.run_until_complete(_recording_server(bodies))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        code = main(
            [
                "llm",
                "--url",
                url,
                "--model",
                "m",
                "--max-requests",
                "2",
                "--max-tokens",
                "32",
                "--ignore-eos",
                "--out-dir",
                str(tmp_path / "on"),
                "--no-progress",
                "--max-loop-lag-ms",
                "1000",
            ]
        )
        code_off = main(
            [
                "llm",
                "--url",
                url,
                "--model",
                "m",
                "--max-requests",
                "1",
                "--max-tokens",
                "32",
                "--out-dir",
                str(tmp_path / "off"),
                "--no-progress",
                "--max-loop-lag-ms",
                "1000",
            ]
        )
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert (code, code_off) == (0, 0)
    assert [(b["ignore_eos"], b["max_tokens"]) for b in bodies[:2]] == [(True, 32), (True, 32)]
    assert "ignore_eos" not in bodies[2]
    manifest = orjson.loads((_bundle(tmp_path / "on") / "manifest.json").read_bytes())
    assert manifest["workload"]["ignore_eos"] is True


def test_yaml_ignore_eos_key_is_sent_in_the_body():
    spec = OpenAIChatSpec(
        type="openai-chat",
        url="http://127.0.0.1:9/v1/chat/completions",
        model="m",
        max_tokens=32,
        ignore_eos=True,
        dataset={"type": "static", "items": ["hi"]},
    )
    body = orjson.loads(build_workload(spec).request(0).body)
    assert (body["ignore_eos"], body["max_tokens"]) == (True, 32)
    plain = OpenAIChatSpec(
        type="openai-chat",
        url="http://127.0.0.1:9/v1/chat/completions",
        model="m",
        dataset={"type": "static", "items": ["hi"]},
    )
    assert "ignore_eos" not in orjson.loads(build_workload(plain).request(0).body)
    assert StaticDataset(["hi"]).item(0).as_messages() == body["messages"]
