"""A sweep point's verdict in plain words, its key figures, and how to get valid points.

    verdict_line(row)   "c4: INVALID: your machine was busy: the client's event loop lagged 38 ms ..."
    key_figures(row)    "4 episodes, 16 requests (16 ok), 7.33 req/s, E2E p50 1.57 ms / p99 8.1 ms, ..."
    advice(rows)        what to change to get valid points (quieter machine, fewer points, a limit)
    pipeline_failures(rows)   the points at which nothing was measured or no episode succeeded

`row` is a sweep point's summary row (benchmaker/sweep/sql/sweep_summary.sql: `valid`,
`invalid_reason`, the counts and percentiles). `invalid_reason` joins the reasons with
"; ", each possibly prefixed with where it was found ("engine: ", "shard 1: "); the
reason texts come from benchmaker.engine.selfcheck.verdict and sweep_summary.sql, and a
reason this module does not know is shown as it is.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["Reason", "advice", "key_figures", "pipeline_failures", "reasons_of", "verdict_line"]

_LOOP_LAG = re.compile(r"event-loop lag p99 (?P<got>[\d.]+) ms > (?P<limit>[\d.]+) ms")
_SCHEDULE_LAG = re.compile(r"client-saturated: schedule lag p99 (?P<got>[\d.]+) ms > (?P<limit>[\d.]+) ms")
_CONCURRENCY = re.compile(r"achieved concurrency (?P<got>\d+) (?:< target|never reached the target) (?P<target>\d+)")
_PROOF = re.compile(r"concurrency proof failed: (?P<why>.*)")
# where a sharded point's reason was found: "shard 1 engine: ...", "shard 1: ..."
_SHARD = re.compile(r"shard (?P<k>\d+)\b")


class Reason:
    """One verdict reason: `text` as recorded, `kind` ("loop_lag", "schedule_lag",
    "concurrency", "proof", "nothing_measured", "no_episode_succeeded" or "other"), `got_ms` / `limit_ms` for the
    two lag kinds (p99, in ms), and `plain`, the reason in plain words."""

    __slots__ = ("got_ms", "kind", "limit_ms", "plain", "text")

    def __init__(self, text: str):
        self.text = text
        self.got_ms: float | None = None
        self.limit_ms: float | None = None
        if m := _LOOP_LAG.search(text):
            self.kind = "loop_lag"
            self.got_ms, self.limit_ms = float(m["got"]), float(m["limit"])
            self.plain = (
                f"your machine was busy: the client's event loop lagged {_ms(self.got_ms)} "
                f"(p99; the limit is {self.limit_ms:g} ms), so the timings include client delay"
            )
        elif m := _SCHEDULE_LAG.search(text):
            self.kind = "schedule_lag"
            self.got_ms, self.limit_ms = float(m["got"]), float(m["limit"])
            self.plain = (
                f"the client fell behind its schedule: requests started {_ms(self.got_ms)} late "
                f"(p99; the limit is {self.limit_ms:g} ms); the machine was busy or the rate is "
                "more than this client can send"
            )
        elif m := _CONCURRENCY.search(text):
            self.kind = "concurrency"
            self.plain = (
                f"the target concurrency was never reached: at most {m['got']} of {m['target']} were in flight at once"
            )
        elif m := _PROOF.search(text):
            self.kind = "proof"
            self.plain = f"the target concurrency was not proven: {m['why']}"
        elif text.startswith("no episode succeeded: "):
            self.kind = "no_episode_succeeded"
            self.plain = f"no episode ran to its end: {text.removeprefix('no episode succeeded: ')}"
        elif "no request succeeded" in text or "nothing ran at this point" in text:
            self.kind = "nothing_measured"
            self.plain = f"nothing was measured: {text}"
        else:
            self.kind = "other"
            self.plain = text
        if self.kind != "other" and (m := _SHARD.match(text)):
            self.plain = f"shard {m['k']}: {self.plain}"  # the shards of a point differ

    def __repr__(self) -> str:
        return f"Reason({self.text!r})"


def _ms(v: float) -> str:
    return f"{v:.0f} ms" if v >= 10 else f"{v:.3g} ms"


def reasons_of(row: dict[str, Any]) -> list[Reason]:
    """The reasons of a point row's `invalid_reason` ("; "-joined), [] for a valid point."""
    text = row.get("invalid_reason") or ""
    return [Reason(part.strip()) for part in text.split("; ") if part.strip()]


def verdict_line(row: dict[str, Any]) -> str:
    """`"<point>: valid"`, or `"<point>: INVALID: <reasons in plain words, '; '-joined>"`."""
    point = row.get("sweep_point")
    if row.get("valid"):
        return f"{point}: valid"
    reasons = reasons_of(row)
    return f"{point}: INVALID: " + ("; ".join(r.plain for r in reasons) if reasons else "no reason recorded")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def key_figures(row: dict[str, Any]) -> str:
    """The figures a user reads first, comma-separated, each only when the row has it:
    episodes, requests (ok), request throughput (req/s), E2E p50/p99 (ms), TTFT p50/p99
    (ms), replay misses, resolved rate among re-verified episodes with its n."""
    parts: list[str] = []
    if row.get("n_episodes"):  # an engine point (llm-sweep) has none
        parts.append(_count(row["n_episodes"], "episode"))
    if row.get("n_requests") is not None:
        ok = row.get("n_ok")
        parts.append(_count(row["n_requests"], "request") + (f" ({ok} ok)" if ok is not None else ""))
    if row.get("request_throughput_per_s") is not None:
        parts.append(f"{_num(row['request_throughput_per_s'])} req/s")
    for name, key in (("E2E", "e2e"), ("TTFT", "ttft")):
        p50, p99 = row.get(f"p50_{key}_ms"), row.get(f"p99_{key}_ms")
        if p50 is not None and p99 is not None:
            parts.append(f"{name} p50 {_num(p50)} ms / p99 {_num(p99)} ms")
    if row.get("misses_total") is not None:
        parts.append(f"{row['misses_total']} replay misses")
    n_ver = row.get("n_reverified")
    if n_ver:
        parts.append(f"resolved {row.get('n_resolved_reverified') or 0} of {n_ver} re-verified")
    return ", ".join(parts)


def pipeline_failures(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The sweep_point names of the points at which nothing was measured (a
    "no request succeeded" or "nothing ran at this point" reason) or no episode
    succeeded ("no episode succeeded: ..."): the pipeline failed there, whatever the
    host's load."""
    failed = ("nothing_measured", "no_episode_succeeded")
    return [str(r.get("sweep_point")) for r in rows if any(reason.kind in failed for reason in reasons_of(r))]


def _raised(limit_ms: float, got_ms: float) -> int:
    """A limit above `got_ms` by a quarter, rounded up to 10 ms, at least twice `limit_ms`."""
    return int(max(2 * limit_ms, math.ceil(got_ms * 1.25 / 10) * 10))


def advice(
    rows: Sequence[dict[str, Any]], load_average: float | None = None, cores: int | None = None, this_host: bool = True
) -> list[str]:
    """Lines saying how to get valid points, from the reasons of the invalid `rows`
    ([] when every point is valid): for lag, a quieter machine (on `this_host`, the
    one running now: `load_average`, default os.getloadavg()'s 1-min figure, over
    `cores`, default os.cpu_count(); a report read later names no load), fewer points,
    or the limit raised with its flag and variable, to a value above the worst lag seen;
    for a concurrency target not reached or not proven, more episodes per point."""
    reasons = [reason for r in rows if not r.get("valid") for reason in reasons_of(r)]
    if not reasons:
        return []
    lines: list[str] = []
    for kind, flag, env in (
        ("loop_lag", "--max-loop-lag-ms", "BENCHMAKER_MAX_LOOP_LAG_MS"),
        ("schedule_lag", "--max-schedule-lag-ms", "BENCHMAKER_MAX_SCHEDULE_LAG_MS"),
    ):
        lags = [r for r in reasons if r.kind == kind]
        if not lags:
            continue
        worst = max(lags, key=lambda r: r.got_ms or 0.0)
        if not lines:
            if load_average is None and this_host:
                try:
                    load_average = os.getloadavg()[0]
                except OSError:  # not available on this platform
                    load_average = None
            cores = cores or os.cpu_count() or 1
            busy = "" if load_average is None else f" (load average now {load_average:.1f} on {cores} cores)"
            busy = busy if this_host else ""
            lines.append(
                f"To get valid points: run on a quieter machine{busy}, sweep fewer points or lower "
                "concurrency, or raise the limit a point broke:"
            )
        value = _raised(worst.limit_ms or 10.0, worst.got_ms or 0.0)
        lines.append(
            f"  {flag} {value}  (or {env}={value}); a raised limit is kept in the run's manifest: "
            "timings may then include up to that much client delay"
        )
    if any(r.kind in ("concurrency", "proof") for r in reasons):
        lines.append(
            "To reach and prove a concurrency target: more episodes per point (--episodes-per-point) "
            "or a longer point (--duration), so that the target's episodes run at once."
        )
    other = [r for r in reasons if r.kind in ("nothing_measured", "no_episode_succeeded", "other")]
    if other:
        lines.append("Other reasons are the endpoint's or the replay's: see the run's samples and its report.")
    return lines
