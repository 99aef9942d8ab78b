"""Events/s of SSE framing + OpenAI chat chunk parsing on one core (not part of CI).

    .venv/bin/python benchmarks/sse_parse.py [--events 200000] [--stream-len 500]

The stream is built from the real gpt-4o capture
(../shared/data/real/openai-gpt4o-toolcall.chunks.jsonl: its content chunk, ~330 bytes
with id, fingerprint and obfuscation fields, is repeated with varying text), framed as
`data: {...}\\n\\n`, with the role chunk first and the finish, usage and [DONE] last.
Without the capture an identical embedded chunk is used. Each stream gets a fresh
`OpenAIChatParser` and ends with finish(), as in the runner.

Read patterns (how the transport hands bytes to feed()):
    1 event/read     every event in its own read (a slow server, low load)
    4 KiB reads      fixed 4,096-byte reads, cutting events anywhere (a fast server)
    CRLF, 1/read     the same stream with CRLF line ends (the general path)
Target: >= 60,000 streaming events/s per core for the whole engine, so this
part must be well above it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import orjson

from benchmaker.apis.openai_chat import OpenAIChatParser
from benchmaker.engine.records import Sample

REAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "real" / "openai-gpt4o-toolcall.chunks.jsonl"
_FALLBACK = [
    b'{"id":"chatcmpl-E6yvi7cuDcHZEHTMxcLDyf3CMKIO2","object":"chat.completion.chunk","created":1785332890,'
    b'"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_627de6ad19","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"obfuscation":"dOvUml6hFbj"}',
    b'{"id":"chatcmpl-E6yvi7cuDcHZEHTMxcLDyf3CMKIO2","object":"chat.completion.chunk","created":1785332890,'
    b'"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_627de6ad19","choices":[{"index":0,'
    b'"delta":{"content":"PRE"},"logprobs":null,"finish_reason":null}],"obfuscation":"kxfWAnRUqJ"}',
]
_WORDS = [
    " the",
    " quick",
    " brown",
    " fox",
    " jumps",
    " over",
    " lazy",
    " dog",
    ",",
    " caf\u00e9",
    "\u2028",
    " \u4e16",
]


def build_stream(stream_len: int) -> bytes:
    """One framed stream: role chunk, `stream_len` content chunks, finish, usage, [DONE]."""
    lines = REAL.read_bytes().splitlines() if REAL.exists() else _FALLBACK
    role, content = orjson.loads(lines[0]), orjson.loads(lines[1])
    out = [role]
    for i in range(stream_len):
        c = orjson.loads(orjson.dumps(content))
        c["choices"][0]["delta"]["content"] = _WORDS[i % len(_WORDS)]
        out.append(c)
    finish = orjson.loads(orjson.dumps(content))
    finish["choices"][0]["delta"] = {}
    finish["choices"][0]["finish_reason"] = "stop"
    usage = dict(role, choices=[], usage={"prompt_tokens": 10, "completion_tokens": stream_len})
    out += [finish, usage]
    return b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in out) + b"data: [DONE]\n\n"


def _per_event(stream: bytes) -> list[bytes]:
    return [part + b"\n\n" for part in stream.split(b"\n\n") if part]


def _fixed(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def measure(reads: list[bytes], n_events_per_stream: int, total_events: int) -> float:
    """Parse the stream repeatedly until `total_events` token events; return events/s."""
    streams = max(1, total_events // n_events_per_stream)
    start = time.perf_counter_ns()
    for k in range(streams):
        parser = OpenAIChatParser(stream=True)
        sample = Sample(run_id="bench", seq=k)
        feed = parser.feed
        t = 0
        for data in reads:
            t += 1000
            feed(data, t, sample)
        parser.finish(sample)
        assert sample.outcome == "ok" and sample.n_token_events == n_events_per_stream, sample.error
    elapsed_s = (time.perf_counter_ns() - start) / 1e9
    return streams * n_events_per_stream / elapsed_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=200_000, help="token events per pattern (default 200000)")
    ap.add_argument("--stream-len", type=int, default=500, help="content chunks per stream (default 500)")
    args = ap.parse_args()
    stream = build_stream(args.stream_len)
    patterns = {
        "1 event/read": _per_event(stream),
        "4 KiB reads": _fixed(stream, 4096),
        "CRLF, 1/read": [p.replace(b"\n", b"\r\n") for p in _per_event(stream)],
    }
    src = "real gpt-4o capture" if REAL.exists() else "embedded gpt-4o chunk"
    print(
        f"SSE + OpenAI chat parsing, {src}, {len(stream) / (args.stream_len + 4):.0f} B/event, "
        f"{args.stream_len} content chunks/stream"
    )
    for name, reads in patterns.items():
        rate = measure(reads, args.stream_len, args.events)
        print(f"  {name:<14} {rate:>12,.0f} events/s  ({1e6 / rate:.2f} us/event)")


if __name__ == "__main__":
    main()
