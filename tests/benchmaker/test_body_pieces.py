"""A request body given as a list of byte pieces (RequestSpec.body; the raw transport
sends them as if joined): the sample counts its bytes and the trace records it joined."""

from __future__ import annotations

import orjson

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.records import RequestSpec
from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.transport import NullTransport
from benchmaker.workloads.http import HttpWorkload


def _in_pieces(spec: RequestSpec) -> RequestSpec:
    return RequestSpec(spec.method, spec.url, spec.headers, [b'{"a": ', b"12", b"345}"])


async def test_a_body_of_pieces_counts_its_bytes_and_is_traced_joined(tmp_path):
    cfg = BenchConfig(load="closed:1", max_requests=2, out_dir=tmp_path / "runs")
    wl = HttpWorkload("http://null/", "POST", {}, None, [200])
    trace = tmp_path / "trace.jsonl"
    result = await BenchRunner(
        cfg, workload=wl, transport=NullTransport(chunks=(b"x",)), pre_hooks=[_in_pieces], record_trace=trace
    ).run()
    samples = [orjson.loads(x) for x in result.samples_path.read_bytes().splitlines()]
    assert [(s["outcome"], s["bytes_sent"]) for s in samples] == [("ok", 12), ("ok", 12)]
    lines = [orjson.loads(x) for x in trace.read_bytes().splitlines()]
    assert [(t["body"], t["body_b64"]) for t in lines] == [('{"a": 12345}', None)] * 2
