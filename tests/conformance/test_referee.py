"""The referee's pieces without a vLLM venv (so `make test` keeps them honest):
conformance/referee.py reading vLLM-shaped /metrics text from a real local HTTP server,
and the per-request means and pooled ITL of conformance/clients.py."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from conformance.clients import pooled_itl_ms, vllm_means
from conformance.referee import scrape, server_means


def _text(
    ttft: tuple[float, int],
    tpot: tuple[float, int],
    itl: tuple[float, int],
    e2e: tuple[float, int],
    gen: float,
    prompt: float,
    *,
    drop: str = "",
) -> str:
    """vLLM 0.32.0's exposition of the histograms and counters the referee reads (two
    engines' label sets for TTFT, so the sum over label sets is checked)."""
    lines = [
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{engine="0",model_name="tiny"}} {prompt}',
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {gen}',
    ]
    for name, (total, count) in (
        ("vllm:time_to_first_token_seconds", ttft),
        ("vllm:request_time_per_output_token_seconds", tpot),
        ("vllm:inter_token_latency_seconds", itl),
        ("vllm:e2e_request_latency_seconds", e2e),
    ):
        if name == drop:
            continue
        lines += [f"# HELP {name} Histogram.", f"# TYPE {name} histogram"]
        engines = (
            (("0", total / 2, count // 2), ("1", total / 2, count - count // 2))
            if "first" in name
            else (("0", total, count),)
        )
        for engine, s, c in engines:
            lines += [
                f'{name}_bucket{{engine="{engine}",le="0.5",model_name="tiny"}} {float(c)}',
                f'{name}_bucket{{engine="{engine}",le="+Inf",model_name="tiny"}} {float(c)}',
                f'{name}_count{{engine="{engine}",model_name="tiny"}} {float(c)}',
                f'{name}_sum{{engine="{engine}",model_name="tiny"}} {s}',
            ]
    return "\n".join(lines) + "\n"


async def _serve(texts: list[str]) -> tuple[web.AppRunner, str]:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=texts.pop(0), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_server_means_are_the_histogram_deltas_over_one_run():
    before = _text((3.0, 10), (0.5, 10), (15.5, 310), (40.0, 10), 320.0, 1500.0)
    # 4 requests of 32 tokens: TTFT 0.1 s each, TPOT 0.02 s, 4 x 31 decode steps of 0.02 s, E2E 0.72 s
    after = _text((3.4, 14), (0.58, 14), (15.5 + 2.48, 434), (42.88, 14), 448.0, 2104.0)
    runner, url = await _serve([before, after])
    try:
        a = await asyncio.to_thread(scrape, url)
        b = await asyncio.to_thread(scrape, url)
    finally:
        await runner.cleanup()
    got = server_means(a, b)
    assert got["n"] == 4 and got["n_itl"] == 124
    assert got["ttft_ms"] == pytest.approx(100.0)
    assert got["tpot_ms"] == pytest.approx(20.0)
    assert got["itl_ms"] == pytest.approx(20.0)
    assert got["e2e_ms"] == pytest.approx(720.0)
    assert (got["generation_tokens"], got["prompt_tokens"]) == (128.0, 604.0)
    assert server_means(a, a)["ttft_ms"] is None  # no request between the scrapes


async def test_scrape_names_a_metric_the_server_does_not_export():
    runner, url = await _serve([_text((1, 1), (1, 1), (1, 1), (1, 1), 1, 1, drop="vllm:inter_token_latency_seconds")])
    try:
        with pytest.raises(KeyError, match="vllm:inter_token_latency_seconds_count"):
            await asyncio.to_thread(scrape, url)
    finally:
        await runner.cleanup()


def test_vllm_clients_means_follow_serve_py():
    # two successes (TTFT 0.1 s; latency 0.72 and 0.40 s; 32 and 16 tokens) and a failure (ttft 0)
    res = {
        "ttfts": [0.1, 0.0, 0.1],
        "latencies": [0.72, 0.0, 0.40],
        "itls": [[0.02] * 31, [], [0.02] * 15],
        "output_lens": [32, 16],  # successful requests only
    }
    got = vllm_means(res)
    assert got["ttft_mean_ms"] == pytest.approx(100.0)
    assert got["tpot_mean_ms"] == pytest.approx(20.0)  # (0.72 - 0.1) / 31 and (0.40 - 0.1) / 15
    assert got["itl_mean_ms"] == pytest.approx(20.0)
    assert got["e2e_mean_ms"] == pytest.approx(560.0)
    assert got["itl_pooled_ms"] == pytest.approx(20.0)
    assert pooled_itl_ms([(620.0, 31), (30.0, 15)]) == pytest.approx(650.0 / 46) and pooled_itl_ms([]) is None


@pytest.mark.parametrize("client", ["ours", "vllm"])
def test_presend_times_each_request_from_the_clients_clock_to_the_server(tmp_path, client):
    from conformance.presend import presend_us

    got = presend_us(client, 5, tmp_path)
    # one figure per request, each after the client's clock started (one monotonic clock)
    # and within the test's own time
    assert len(got) == 5 and all(0 < us < 30e6 for us in got)
