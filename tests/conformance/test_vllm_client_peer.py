"""`vllm bench serve` and our engine against servers whose timing is known (a
peer check as benchmarks/peers.py does for aiperf): the scenario server
(benchmaker.testing.scenario_server) and the replay server (`serve-replay --latency
fixed:TTFT:ITL`). Where the truth is scripted, ours must match it; vLLM's must match it
where its definitions coincide with ours and differ by exactly what its definitions say
where they do not (docs/conformance.md; vLLM 0.32.0 sources cited in conformance/clients.py).

Tolerance: 15 ms or 10 % of the scripted value, whichever is larger, for medians (the host
has 2 cores shared with other work; client-side delays only add time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.clients import run_ours, run_vllm_bench, url_process, write_prompts
from conformance.venvs import REPO
from tests.conformance.conftest import need

CONFORMANCE = True  # gated: needs the conformance venvs (conftest)
N = 16  # requests per client
CONCURRENCY = 2
TTFT_MS, ITL_MS, CHUNKS = 200.0, 20.0, 16


def _near(value: float | None, truth: float) -> bool:
    return value is not None and abs(value - truth) <= max(15.0, 0.1 * truth)


def _table(rows: list[tuple[str, str, float | None, float | None, float | None]]) -> str:
    out = ["| server | metric (p50, ms) | truth | benchmaker | vllm bench serve |", "|---|---|---|---|---|"]
    for server, metric, truth, ours, theirs in rows:
        cells = [f"{v:.1f}" if v is not None else "-" for v in (truth, ours, theirs)]
        out.append(f"| {server} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def peer_rows(out_dir):
    rows: list[tuple[str, str, float | None, float | None, float | None]] = []
    yield rows
    if rows:
        (out_dir / "peer_table.md").write_text(_table(rows))
        print("\n" + _table(rows))


def _scenario(tmp: Path, name: str, scenario: dict, tiny_model: Path) -> tuple[dict, dict]:
    """Both clients against a scenario server process; returns (ours, vLLM's) metrics."""
    argv = [
        sys.executable,
        "-m",
        "benchmaker.testing.scenario_server",
        "--port",
        "0",
        "--scenario",
        json.dumps(scenario),
    ]
    prompts = write_prompts(tmp / "prompts.jsonl", N)
    with url_process(argv, log=tmp / f"{name}.log") as url:
        ours = run_ours(url, prompts, n=N, concurrency=CONCURRENCY, output_len=CHUNKS, work=tmp, model="m")
        theirs = run_vllm_bench(
            url, prompts, n=N, concurrency=CONCURRENCY, output_len=CHUNKS, work=tmp, tokenizer=tiny_model, model="m"
        )
    assert ours.metrics["n_ok"] == N and theirs.metrics["n_ok"] == N
    return ours.metrics, theirs.metrics


def test_role_chunk_with_first_token_both_clients_match_the_script(tmp_path, tiny_model, peer_rows):
    # role chunk and first content chunk both at 200 ms (as vLLM's own server sends them),
    # then 15 more one-token chunks 20 ms apart; finish, usage and [DONE] with the last.
    ours, theirs = _scenario(
        tmp_path,
        "with-role",
        {"role_delay_ms": TTFT_MS, "ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "content_chunks": CHUNKS},
        tiny_model,
    )
    # TTFT 200; ITL 20; TPOT (500 - 200) / (16 - 1) = 20
    for key, truth in (("ttft", TTFT_MS), ("itl", ITL_MS), ("tpot", ITL_MS)):
        peer_rows.append(("scenario, role at 200 ms", key, truth, ours[f"{key}_p50_ms"], theirs[f"{key}_p50_ms"]))
        assert _near(ours[f"{key}_p50_ms"], truth), (key, ours)
        assert _near(theirs[f"{key}_p50_ms"], truth), (key, theirs)


def test_early_role_chunk_is_vllm_ttft_but_not_ours(tmp_path, tiny_model, peer_rows):
    # role chunk at 0 ms, first token at 200 ms. vLLM's client takes the first chunk with
    # `choices` (the role chunk) as TTFT: ~0; ours the first token: 200. vLLM's TPOT is
    # (latency - ttft) / 15 = (500 - 0) / 15 = 33.3 where the token gaps are 20; its ITL
    # list gains the 200 ms role->token gap (1 of 17 gaps per request: the p99).
    ours, theirs = _scenario(
        tmp_path,
        "early-role",
        {"role_delay_ms": 0, "ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "content_chunks": CHUNKS},
        tiny_model,
    )
    vllm_tpot = (TTFT_MS + (CHUNKS - 1) * ITL_MS) / (CHUNKS - 1)
    for key, truth, theirs_expected in (("ttft", TTFT_MS, 0.0), ("itl", ITL_MS, ITL_MS), ("tpot", ITL_MS, vllm_tpot)):
        peer_rows.append(("scenario, role at 0 ms", key, truth, ours[f"{key}_p50_ms"], theirs[f"{key}_p50_ms"]))
        assert _near(ours[f"{key}_p50_ms"], truth), (key, ours)
        assert _near(theirs[f"{key}_p50_ms"], theirs_expected), (key, theirs)
    assert theirs["itl_p99_ms"] > TTFT_MS * 0.8  # the role->token gap
    assert _near(ours["itl_p99_ms"], ITL_MS)


def test_replay_server_fixed_latency_both_clients_match(tmp_path, tiny_model, peer_rows):
    # The bundled pi recording, turn 0: content "I'll read the module first." and a read
    # tool call, paced at fixed:200:20 (event i at 200 + 20 i ms, role chunk with event 0).
    need("vllm")
    traj = tmp_path / "trajectories.jsonl"
    conv = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "benchmaker"),
            "convert",
            str(REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"),
            "-o",
            str(traj),
        ],
        capture_output=True,
        text=True,
    )
    assert conv.returncode == 0, conv.stderr
    first = json.loads(traj.read_text().splitlines()[0])
    prompts = tmp_path / "replay-prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": first["first_user"]}) + "\n")
    completion = first["turns"][0]["usage"]["completion_tokens"]
    argv = [
        str(REPO / ".venv" / "bin" / "benchmaker"),
        "serve-replay",
        str(traj),
        "--port",
        "0",
        "--latency",
        f"fixed:{TTFT_MS:g}:{ITL_MS:g}",
    ]
    with url_process(argv, log=tmp_path / "replay.log") as url:
        ours = run_ours(
            url, prompts, n=N, concurrency=CONCURRENCY, output_len=completion, work=tmp_path, model=first["model"]
        ).metrics
        theirs = run_vllm_bench(
            url,
            prompts,
            n=N,
            concurrency=CONCURRENCY,
            output_len=completion,
            work=tmp_path,
            tokenizer=tiny_model,
            model=first["model"],
        ).metrics
    assert ours["n_ok"] == N and theirs["n_ok"] == N
    for key, truth in (("ttft", TTFT_MS), ("itl", ITL_MS)):
        peer_rows.append(("replay fixed:200:20", key, truth, ours[f"{key}_p50_ms"], theirs[f"{key}_p50_ms"]))
        assert _near(ours[f"{key}_p50_ms"], truth), (key, ours)
        assert _near(theirs[f"{key}_p50_ms"], truth), (key, theirs)
    # both divide the same span by usage.completion_tokens - 1, so their TPOTs agree
    peer_rows.append(("replay fixed:200:20", "tpot", None, ours["tpot_p50_ms"], theirs["tpot_p50_ms"]))
    assert abs(ours["tpot_p50_ms"] - theirs["tpot_p50_ms"]) <= 5.0
