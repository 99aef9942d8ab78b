"""Grading of replayed episodes → grades.jsonl (docs/architecture.md, docs/metrics.md).

    grades = grade_files(out / "episodes.jsonl", out / "turns.jsonl", out / "grades.jsonl",
                         samples=sorted(out.glob("samples*.jsonl")),
                         server_stats=out / "server_stats.json", concurrency=out / "concurrency.json")

Per episode (grader name → verdict, score):
- `replay_integrity`: "correct" (1.0) when the episode ended ok with no miss of any
  kind, no divergence and every served turn byte-equal to the recording; else
  "wrong" (0.0) with the reasons in `detail`.
- `usage_coverage`: "correct" when every model call carried usage (token totals
  known), else "wrong" naming how many calls lacked it (never a partial sum),
  counted over the episode's requests in samples.jsonl (a model call is a request:
  turns.jsonl keeps only what a turn alone has; a bundle written
  before that still has prompt/output tokens on its turn lines, read when no sample of
  the episode is given).
- `task_outcome`: "resolved"/"unresolved" (1.0/0.0) when a verifier ran; "carried"
  when the recorded outcome was carried (score 1.0/0.0 from it, None when unknown);
  "error" when the episode failed before it could be verified and nothing is known.
Per sweep point (episode_id null):
- `server_integrity` from the replay server's /stats: "correct" when misses.total and
  divergences.total are 0;
- `concurrency_proof` from concurrency.json: "correct" when valid, else "wrong" with
  its reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmaker.trajectories.errors import InputError

GRADE_KEYS = ("run_id", "sweep_point", "episode_id", "seq", "grader", "verdict", "score", "detail")


def grade_line(
    ep: dict[str, Any] | None,
    grader: str,
    verdict: str,
    score: float | None,
    detail: str | None,
    run_id: str | None = None,
    sweep_point: str | None = None,
) -> dict[str, Any]:
    """One grades.jsonl line (keys GRADE_KEYS) of episode `ep` (its run_id, sweep_point
    and episode_id), or of a sweep point (`ep` None: `run_id`, `sweep_point`)."""
    return {
        "run_id": ep["run_id"] if ep else run_id,
        "sweep_point": ep["sweep_point"] if ep else sweep_point,
        "episode_id": ep["episode_id"] if ep else None,
        "seq": None,
        "grader": grader,
        "verdict": verdict,
        "score": score,
        "detail": detail,
    }


def grade_episode(
    ep: dict[str, Any], turns: list[dict[str, Any]], requests: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The three per-episode grades (module docstring) of one episodes.jsonl record,
    its turns.jsonl records and its requests (samples.jsonl lines of its model calls;
    only `prompt_tokens` / `output_tokens` are read)."""
    out: list[dict[str, Any]] = []
    reasons = []
    if ep["outcome"] != "ok":
        reasons.append(f"outcome {ep['outcome']}: {ep.get('error')}")
    for kind in ("unknown_key", "beyond_turns", "diverged"):
        if ep[f"misses_{kind}"]:
            reasons.append(f"{ep[f'misses_{kind}']} {kind} misses")
    if ep["divergences"]:
        reasons.append(f"{ep['divergences']} divergences")
    unequal = [t["turn_index"] for t in turns if t.get("byte_equal") is False]
    if unequal:
        reasons.append(f"turns not byte-equal: {unequal}")
    out.append(
        grade_line(
            ep,
            "replay_integrity",
            "wrong" if reasons else "correct",
            0.0 if reasons else 1.0,
            "; ".join(reasons) or None,
        )
    )
    if ep["usage_complete"]:
        out.append(grade_line(ep, "usage_coverage", "correct", 1.0, None))
    else:
        calls = requests or [t for t in turns if "prompt_tokens" in t]  # else an old bundle's turn lines
        missing = (
            str(sum(1 for c in calls if c.get("prompt_tokens") is None or c.get("output_tokens") is None))
            if calls
            else "an unknown number"
        )
        out.append(
            grade_line(
                ep,
                "usage_coverage",
                "wrong",
                0.0,
                f"usage missing on {missing} of {ep['n_requests']} model calls; token totals null",
            )
        )
    resolved = ep["resolved"]
    if ep["reverified"]:
        v = "resolved" if resolved else "unresolved"
        out.append(grade_line(ep, "task_outcome", v, 1.0 if resolved else 0.0, "verifier ran"))
    elif resolved is None and ep["outcome"] != "ok":
        out.append(grade_line(ep, "task_outcome", "error", None, f"not verified: {ep.get('error')}"))
    else:
        score = None if resolved is None else (1.0 if resolved else 0.0)
        detail = "recorded outcome carried, not re-verified" + ("" if resolved is not None else " (unknown)")
        out.append(grade_line(ep, "task_outcome", "carried", score, detail))
    return out


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise InputError(path, n, None, f"not JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise InputError(path, n, None, "expected an object", obj)
            rows.append(obj)
    return rows


def _requests_by_episode(samples: Sequence[Path]) -> dict[str, list[dict[str, Any]]]:
    """Episode id -> {prompt_tokens, output_tokens} of each of its model calls, from
    samples.jsonl files (lines whose meta names no episode are skipped)."""
    by_ep: dict[str, list[dict[str, Any]]] = {}
    for path in samples:
        for s in _read_jsonl(path):
            eid = (s.get("meta") or {}).get("episode_id")
            if eid is not None:
                by_ep.setdefault(eid, []).append(
                    {"prompt_tokens": s.get("prompt_tokens"), "output_tokens": s.get("output_tokens")}
                )
    return by_ep


def grade_files(
    episodes: Path,
    turns: Path,
    out: Path,
    *,
    samples: Sequence[Path] = (),
    server_stats: Path | None = None,
    concurrency: Path | None = None,
    run_id: str | None = None,
    sweep_point: str | None = None,
) -> list[dict[str, Any]]:
    """Grade every episode of `episodes` (with its turns from `turns` and its model
    calls from the `samples` files: the point's samples*.jsonl), plus the sweep-point
    grades when `server_stats` / `concurrency` files exist; write them to `out` (one
    JSON object per line, keys GRADE_KEYS) and return them. The sweep-point grades
    carry the episodes' run_id and sweep_point, or `run_id` / `sweep_point` when no
    episode ran (a point whose shards all failed). Raises InputError naming the file
    and line of a bad record."""
    eps = _read_jsonl(episodes)
    by_ep: dict[str, list[dict[str, Any]]] = {}
    for t in _read_jsonl(turns):
        by_ep.setdefault(t["episode_id"], []).append(t)
    calls = _requests_by_episode(samples)
    grades: list[dict[str, Any]] = []
    for ep in eps:
        eid = ep["episode_id"]
        grades += grade_episode(ep, by_ep.get(eid, []), calls.get(eid))
    if eps:
        run_id, sweep_point = eps[0]["run_id"], eps[0]["sweep_point"]
    if server_stats is not None and server_stats.exists():
        st = json.loads(server_stats.read_text())
        m, d = st["misses"]["total"], st["divergences"]["total"]
        bad = m or d
        grades.append(
            grade_line(
                None,
                "server_integrity",
                "wrong" if bad else "correct",
                0.0 if bad else 1.0,
                f"server misses {st['misses']}, divergences {st['divergences']}",
                run_id,
                sweep_point,
            )
        )
    if concurrency is not None and concurrency.exists():
        pr = json.loads(concurrency.read_text())
        grades.append(
            grade_line(
                None,
                "concurrency_proof",
                "correct" if pr["valid"] else "wrong",
                1.0 if pr["valid"] else 0.0,
                pr["reason"] or f"max in flight {pr['max_in_flight']} of {pr['concurrency']}",
                run_id,
                sweep_point,
            )
        )
    tmp = out.with_suffix(out.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for g in grades:
            f.write(json.dumps(g) + "\n")
    tmp.replace(out)
    return grades
