"""Hand-written run bundles for the warehouse tests (the layout of docs/architecture.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmaker.engine.records import Sample

MS = 1_000_000  # ns per ms


def write_manifest(
    run_dir: Path, run_id: str, label: str | None = "nightly", created_at: str = "2026-11-29T01:00:00Z"
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "run_id": run_id,
        "kind": "llm",
        "label": label,
        "created_at": created_at,
        "t0_wall_ns": 1_700_000_000_000_000_000,
        "config": {"api_key": "***"},
        "seed": 7,
        "versions": {"benchmaker": "0.1.0"},
        "git_sha": None,
        "host": {"hostname": "h", "platform": "linux", "cpu_count": 2},
        "workers": 1,
        "slo": None,
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def sample(
    run_id: str,
    seq: int,
    sent_ms: float,
    ttft_ms: float,
    e2e_ms: float,
    output_tokens: int,
    events_ms: list[float] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A successful streamed request sent at sent_ms; token events at sent+events_ms
    (default: one at TTFT and one at E2E)."""
    sent = int(sent_ms * MS)
    events = [sent + int(e * MS) for e in (events_ms or [ttft_ms, e2e_ms])]
    s = Sample(
        run_id=run_id,
        seq=seq,
        intended_ns=sent,
        sent_ns=sent,
        first_byte_ns=events[0],
        first_token_ns=sent + int(ttft_ms * MS),
        first_content_ns=sent + int(ttft_ms * MS),
        end_ns=sent + int(e2e_ms * MS),
        token_event_ns=events,
        token_event_tokens=[None] * len(events),
        n_token_events=len(events),
        usage_present=True,
        prompt_tokens=100,
        output_tokens=output_tokens,
        output_chars=4 * output_tokens,
        finish_reason="stop",
        **kw,
    )
    return s.to_dict()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# The reference bundle: 4 requests, TTFT 10/20/30/40 ms, E2E 100/200/300/400 ms,
# 11 output tokens each (TPOT = (E2E - TTFT) / 10), sent 100 ms apart.
TTFTS_MS = [10.0, 20.0, 30.0, 40.0]
E2ES_MS = [100.0, 200.0, 300.0, 400.0]


def reference_bundle(run_dir: Path, run_id: str = "run-a", **manifest_kw: Any) -> Path:
    write_manifest(run_dir, run_id, **manifest_kw)
    rows = [
        sample(
            run_id,
            i,
            sent_ms=100.0 * i,
            ttft_ms=TTFTS_MS[i],
            e2e_ms=E2ES_MS[i],
            output_tokens=11,
            sweep_point="c1" if i < 2 else "c2",
        )
        for i in range(4)
    ]
    write_jsonl(run_dir / "samples.jsonl", rows)
    return run_dir
