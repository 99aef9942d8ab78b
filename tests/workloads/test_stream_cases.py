"""Stream cases: every file of tests/data/cases/streams/ gives the right value
of ../shared/cases/README.md (and of the table below for the cases we added of the same
kinds), and any split of its bytes into transport reads gives the same result as the
whole stream (hypothesis), as do the real chunk recordings of ../shared/data/real turned
into SSE. Then through a real HTTP server, the runner, the summary and the warehouse."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmaker.agent.model_client import ModelClient
from benchmaker.apis.openai_chat import OpenAIChatParser
from benchmaker.engine.config import BenchConfig
from benchmaker.engine.records import Sample
from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.sse import SSEParser
from benchmaker.warehouse.connection import open_readonly
from benchmaker.warehouse.loader import load_run
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from tests.workloads._drive import drive

MS = 1_000_000  # ns per ms
CASES_DIR = Path(__file__).resolve().parents[1] / "data" / "cases" / "streams"
REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"

# Right values. `events`: indexes (0-based, in dispatch order, comments excluded) of the
# token-bearing events; `content`: index of the first content event (TTFC), or None.
CASES = {
    # README: outcome ok, TTFT at the first non-empty refusal delta (event 1: event 0 is the
    # role chunk with refusal ""), 2 token events; flagged refusal; no content so no TTFC
    "refusal-only.sse": dict(
        outcome="ok",
        error=None,
        events=[1, 2],
        content=None,
        text="",
        refusal=True,
        finish_reason="stop",
        finish_class="stop",
        chars=10 + 24,  # "I'm sorry," + " I can't help with that."
        output_tokens=9,
    ),
    # README: not a success: failed (aborted) with its reason; its tokens still timed
    "finish-abort.sse": dict(
        outcome="aborted",
        error="finish_reason 'abort' (class abort): the server aborted the request",
        events=[1, 2],
        content=1,
        text="One, two, three",
        refusal=False,
        finish_reason="abort",
        finish_class="abort",
        chars=9 + 6,  # "One, two," + " three"
        output_tokens=4,
    ),
    # U+1F600 as "\ud83d" (event 2) then "\ude00!" (event 3): joined in event 3, the one
    # that completes the character (event 2 carries half a character: no token), 1 char
    "surrogate-split.sse": dict(
        outcome="ok",
        error=None,
        events=[1, 3],
        content=1,
        text="Hi \U0001f600!",
        refusal=False,
        finish_reason="stop",
        finish_class="stop",
        chars=3 + 1 + 1,  # "Hi " + emoji + "!"
        output_tokens=3,
    ),
    # CRLF, comments, reasoning in 4 spellings (events 1-4; event 5 is encrypted only),
    # content as typed parts with raw 2/3/4-byte UTF-8 and U+2028 (6, 7), a refusal part
    # (8), tool name (9) and arguments (10); finish "length" is ok, named in the class
    "typed-parts-crlf.sse": dict(
        outcome="ok",
        error=None,
        events=[1, 2, 3, 4, 6, 7, 8, 9, 10],
        content=6,
        text="caf\u00e9 \u4e2d \U0001f600\u2028x",
        refusal=True,
        finish_reason="length",
        finish_class="length",
        chars=2 + 2 + 1 + 3 + 7 + 3 + 3 + 1 + 2,  # th in k ing, "café 中 ", "😀\u2028x", "no.", f, {}
        output_tokens=16,
    ),
    # DeepSeek's insufficient_system_resource says the server gave up: failed, class abort
    "finish-unknown.sse": dict(
        outcome="aborted",
        error="finish_reason 'insufficient_system_resource' (class abort): the server aborted the request",
        events=[1],
        content=1,
        text="Part",
        refusal=False,
        finish_reason="insufficient_system_resource",
        finish_class="abort",
        chars=4,
        output_tokens=1,
    ),
    # a reason the product does not know completes the response: ok, kept, class unknown
    "finish-unrecognized.sse": dict(
        outcome="ok",
        error=None,
        events=[1, 2],
        content=1,
        text="Done.",
        refusal=False,
        finish_reason="stop_token_hit",
        finish_class="unknown",
        chars=5,
        output_tokens=2,
    ),
}


def _case_bytes(name: str) -> bytes:
    return (CASES_DIR / name).read_bytes()


def _real_streams() -> dict[str, bytes]:
    """The real chunk recordings as the SSE a server sends: `data: <line>` + blank line per
    chunk, then `data: [DONE]`."""
    out = {}
    for path in sorted(REAL.glob("*.chunks.jsonl")) if REAL.is_dir() else []:
        lines = [ln for ln in path.read_bytes().splitlines() if ln.strip()]
        out[path.name] = b"".join(b"data: " + ln + b"\n\n" for ln in lines) + b"data: [DONE]\n\n"
    return out


def _dispatch_offsets(data: bytes) -> list[int]:
    """For each SSE event of `data`, the number of bytes after which it is dispatched."""
    parser, offsets = SSEParser(), []
    for i in range(len(data)):
        offsets += [i + 1] * len(parser.feed(data[i : i + 1]))
    return offsets


def _feed(pieces: list[tuple[int, bytes]]) -> tuple[Sample, OpenAIChatParser]:
    parser, sample = OpenAIChatParser(stream=True), Sample(run_id="t", seq=0)
    for t_ns, piece in pieces:
        parser.feed(piece, t_ns, sample)
    parser.finish(sample)
    return sample, parser


def _by_event(data: bytes) -> tuple[Sample, OpenAIChatParser]:
    """Feed one read per event, event i at i ms."""
    cuts = [0, *_dispatch_offsets(data)]
    cuts[-1] = len(data)  # trailing bytes (a final LF) ride with the last event
    return _feed([(i * MS, data[a:b]) for i, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False))])


@pytest.mark.parametrize("name", list(CASES))
def test_stream_case_gives_the_right_value(name):
    exp = CASES[name]
    s, p = _by_event(_case_bytes(name))
    assert (s.outcome, s.error) == (exp["outcome"], exp["error"])
    assert s.token_event_ns == [i * MS for i in exp["events"]]
    assert s.first_token_ns == exp["events"][0] * MS  # TTFT at the first token event
    assert s.n_token_events == len(exp["events"])
    assert s.first_content_ns == (None if exp["content"] is None else exp["content"] * MS)
    assert p.text == exp["text"]
    assert (s.refusal, s.finish_reason, s.finish_class) == (exp["refusal"], exp["finish_reason"], exp["finish_class"])
    assert (s.output_chars, s.output_tokens, s.usage_present) == (exp["chars"], exp["output_tokens"], True)


def test_every_stream_case_file_has_a_right_value():
    assert sorted(p.name for p in CASES_DIR.glob("*.sse")) == sorted(CASES)


def test_fixtures_are_the_shared_cases_byte_for_byte():
    shared = REAL.parent.parent / "cases" / "streams"  # ../shared/cases/streams
    if not shared.is_dir():
        pytest.skip("../shared/cases/streams absent")
    for path in sorted(shared.glob("*.sse")):
        assert _case_bytes(path.name) == path.read_bytes(), path.name


# -- random splits (hypothesis) --------------------------------------------------------------------

_TIMED = ("first_token_ns", "first_content_ns", "token_event_ns")


def _untimed(s: Sample, p: OpenAIChatParser) -> dict:
    d = s.to_dict()
    for key in _TIMED:
        d.pop(key)
    d["text"] = p.text
    return d


class _Whole:
    """What the whole stream gives, computed once per stream: its untimed result, when
    each event is dispatched (bytes fed), which events carry tokens and the first content."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        s, p = _feed([(len(data), data)])
        self.result = _untimed(s, p)
        self.dispatch = _dispatch_offsets(data)
        by_event, _ = _by_event(data)  # event i at i ms
        self.token_events = [t // MS for t in by_event.token_event_ns or []]
        self.content = None if by_event.first_content_ns is None else by_event.first_content_ns // MS

    def check(self, cuts: list[int]) -> None:
        """Reads cut at `cuts`, each stamped with its end offset, give the whole stream's
        result; each token event's stamp is the end of the read that completed it."""
        data, ends = self.data, [*cuts, len(self.data)]
        s, p = _feed([(b, data[a:b]) for a, b in zip([0, *cuts], ends, strict=False)])
        assert _untimed(s, p) == self.result

        def stamp(event: int) -> int:
            return next(end for end in ends if end >= self.dispatch[event])

        assert s.token_event_ns == ([stamp(i) for i in self.token_events] or None)
        assert s.first_token_ns == (stamp(self.token_events[0]) if self.token_events else None)
        assert s.first_content_ns == (None if self.content is None else stamp(self.content))


def _cuts(n: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(1, n - 1), unique=True, max_size=40).map(sorted)


@pytest.mark.parametrize("name", list(CASES))
def test_random_splits_of_a_stream_case_give_the_whole_stream_result(name):
    whole = _Whole(_case_bytes(name))

    @settings(max_examples=200, deadline=None, database=None)
    @given(cuts=_cuts(len(whole.data)))
    def check(cuts):
        whole.check(cuts)

    check()


@pytest.mark.parametrize("name", ["deepseek-v4-flash-toolcall.chunks.jsonl", "openai-gpt4o-toolcall.chunks.jsonl"])
def test_random_splits_of_a_real_recording_give_the_whole_stream_result(name):
    streams = _real_streams()
    if name not in streams:
        pytest.skip(f"real capture {name} absent (../shared/data/real)")
    whole = _Whole(streams[name])
    assert (whole.result["outcome"], whole.result["finish_class"]) == ("ok", "tool_calls")

    @settings(max_examples=200, deadline=None, database=None)
    @given(cuts=_cuts(len(whole.data)))
    def check(cuts):
        whole.check(cuts)

    check()


def test_every_single_cut_of_the_surrogate_case_gives_the_whole_result():
    # exhaustive for one cut: each byte offset, including inside "\ud83d" and "\ude00"
    whole = _Whole(_case_bytes("surrogate-split.sse"))
    for cut in range(1, len(whole.data)):
        whole.check([cut])


# -- through a real HTTP server, the runner, the summary and the warehouse -------------------------


class RawSSEServer:
    """Serves files as `text/event-stream` on 127.0.0.1 in writes of `piece` bytes; request
    k gets `files[k % len(files)]`."""

    def __init__(self, files: list[bytes], piece: int = 7) -> None:
        self.files, self.piece, self.n = files, piece, 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        data = self.files[self.n % len(self.files)]
        self.n += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(0, len(data), self.piece):
            await resp.write(data[i : i + self.piece])
        await resp.write_eof()
        return resp

    async def __aenter__(self) -> RawSSEServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions"
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()


@pytest.mark.parametrize("name", list(CASES))
async def test_stream_case_over_http_in_7_byte_writes(name):
    exp = CASES[name]
    async with RawSSEServer([_case_bytes(name)]) as srv:
        s, p = await drive(OpenAIChatWorkload(srv.url, "m", StaticDataset(["hi"])))
    assert (s.outcome, s.error, p.text, s.refusal) == (exp["outcome"], exp["error"], exp["text"], exp["refusal"])
    assert (s.n_token_events, s.finish_class, s.output_chars) == (len(exp["events"]), exp["finish_class"], exp["chars"])


@pytest.mark.parametrize("name", list(CASES))
async def test_stream_case_through_the_replay_model_client(name):
    # the replay client parses with the same parser: same outcome, class, refusal flag
    exp = CASES[name]
    async with RawSSEServer([_case_bytes(name)]) as srv:
        client = ModelClient(srv.url.removesuffix("/v1/chat/completions"))
        try:
            result = await client.chat([{"role": "user", "content": "hi"}])
        finally:
            await client.aclose()
    s = result.sample
    assert (result.outcome, result.error, s.n_token_events) == (exp["outcome"], exp["error"], len(exp["events"]))
    assert (s.finish_class, s.refusal, s.output_chars) == (exp["finish_class"], exp["refusal"], exp["chars"])
    if name in ("finish-abort.sse", "surrogate-split.sse", "finish-unknown.sse", "finish-unrecognized.sse"):
        assert result.content == exp["text"]
    orjson.dumps(result.message())  # valid Unicode all through: no lone surrogate left


def test_aborted_responses_are_out_of_successful_latency_and_throughput(tmp_path):
    async def main():
        files = [_case_bytes("refusal-only.sse"), _case_bytes("finish-abort.sse")]
        async with RawSSEServer(files) as srv:
            wl = OpenAIChatWorkload(srv.url, "m", StaticDataset(["hi"]))
            cfg = BenchConfig(load="closed:1", max_requests=4, out_dir=tmp_path, run_id="cases")
            return await BenchRunner(cfg, workload=wl).run()

    result = asyncio.run(main())
    lines = [orjson.loads(x) for x in result.samples_path.read_bytes().splitlines()]
    by_seq = sorted(lines, key=lambda x: x["seq"])
    # closed:1 sends seq 0..3 one after another: refusal, abort, refusal, abort
    assert [x["outcome"] for x in by_seq] == ["ok", "aborted", "ok", "aborted"]
    assert [x["finish_class"] for x in by_seq] == ["stop", "abort", "stop", "abort"]
    run = result.summary["run"]
    assert (run["n_ok"], run["n_aborted"], run["n_refusal"]) == (2, 2, 2)
    assert run["error_rate"] == 0.5  # 2 aborted of 4 sent
    assert run["ttft_ms"]["count"] == 2 and run["e2e_ms"]["count"] == 2  # successes only
    assert run["e2e_all_ms"]["count"] == 4
    assert run["output_tokens_total"] == 18  # 2 refusals x 9 completion tokens; the aborted 4+4 left out
    assert any(r.endswith("of 4 requests failed: 2 aborted)") for r in result.summary["verdict"]["reasons"])

    db = tmp_path / "w.duckdb"
    load_run(db, result.samples_path.parent)
    con = open_readonly(db)
    try:
        rows = con.execute(
            "SELECT outcome, finish_reason, finish_class, refusal, count(*) FROM requests GROUP BY ALL ORDER BY outcome"
        ).fetchall()
        summary = con.execute("SELECT n_ok, n_aborted, n_refusal FROM v_run_summary WHERE run_id = 'cases'").fetchall()
    finally:
        con.close()
    assert rows == [("aborted", "abort", "abort", False, 2), ("ok", "stop", "stop", True, 2)]
    assert summary == [(2, 2, 2)]
