"""One replay run through the real swebench-replay flow: every summary number of a sweep
point is the same in point_summary.json, the flow's rows (the CLI table), sweep_points.jsonl,
v_sweep_summary, the HTML report and a hand-written SQL over `requests`, `episodes` and
`turns` joined to `requests` (every metric defined once; a turn keeps only what
a turn has)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import duckdb
import pytest
from rich.console import Console

from tests.warehouse.test_report import cells

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.usefixtures("prefect_harness"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

# Request metrics written by hand over the warehouse's `requests` (docs/metrics.md): window from
# the first intended send to the last completion, percentiles linear over successes.
HAND_REQUESTS = """
SELECT
    sweep_point,
    count(*) AS n_requests,
    count(*) FILTER (outcome = 'ok') AS n_ok,
    (max(end_ns) - min(intended_ns)) / 1e9 AS window_s,
    count(*) FILTER (outcome = 'ok') / ((max(end_ns) - min(intended_ns)) / 1e9) AS request_throughput_per_s,
    quantile_cont((end_ns - sent_ns) / 1e6, 0.5) FILTER (outcome = 'ok') AS p50_e2e_ms,
    quantile_cont((end_ns - sent_ns) / 1e6, 0.99) FILTER (outcome = 'ok') AS p99_e2e_ms,
    quantile_cont((first_token_ns - sent_ns) / 1e6, 0.5) FILTER (outcome = 'ok') AS p50_ttft_ms,
    quantile_cont((first_token_ns - sent_ns) / 1e6, 0.99) FILTER (outcome = 'ok') AS p99_ttft_ms,
    count(*) FILTER (outcome = 'ok' AND usage_present) / count(*) FILTER (outcome = 'ok') AS usage_coverage,
    count(*) FILTER (outcome = 'recorded_error') AS n_recorded_error,
    count(*) FILTER (outcome = 'aborted') AS n_aborted
FROM requests
WHERE run_id = ? AND phase = 'measure'
GROUP BY sweep_point
ORDER BY sweep_point
"""

# Episode metrics by hand: the most episodes in flight is the most that overlap the start
# of one of them (an episode ending at that very instant does not count).
HAND_EPISODES = """
SELECT
    a.sweep_point,
    count(DISTINCT a.episode_id) AS n_episodes,
    max((SELECT count(*) FROM episodes AS b
         WHERE b.run_id = a.run_id AND b.sweep_point = a.sweep_point
           AND b.started_ns <= a.started_ns AND b.ended_ns > a.started_ns)) AS achieved_max_concurrency,
    sum(a.misses_unknown_key + a.misses_beyond_turns + a.misses_diverged) AS misses_total
FROM episodes AS a
WHERE a.run_id = ?
GROUP BY a.sweep_point
ORDER BY a.sweep_point
"""


# Turns joined to their requests by hand: a turn keeps only what a turn has,
# its call's figures are read from the request of the same (episode, turn index).
# Every turn has exactly one request and every request of the point one turn, so counts
# and percentiles over the join are the point's.
HAND_TURNS = """
SELECT
    t.sweep_point,
    count(*) AS n_requests,
    count(*) FILTER (r.outcome = 'ok') AS n_ok,
    quantile_cont((r.end_ns - r.sent_ns) / 1e6, 0.5) FILTER (r.outcome = 'ok') AS p50_e2e_ms,
    quantile_cont((r.first_token_ns - r.sent_ns) / 1e6, 0.99) FILTER (r.outcome = 'ok') AS p99_ttft_ms,
    count(*) FILTER (t.byte_equal = false) AS n_turns_not_byte_equal,
    count(*) FILTER (t.miss_kind IS NOT NULL) AS misses_total,
    count(*) FILTER (r.outcome = 'recorded_error') AS n_recorded_error
FROM turns AS t
JOIN requests AS r USING (run_id, sweep_point, episode_id, turn_index)
WHERE t.run_id = ?
GROUP BY t.sweep_point
ORDER BY t.sweep_point
"""


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    return a == b


async def test_one_replay_run_shows_the_same_numbers_everywhere(tmp_path: Path) -> None:
    from benchmaker.flows.swebench_replay import swebench_replay
    from benchmaker.recipes.swebench_replay import print_sweep
    from benchmaker.sweep.point_summary import sweep_table_rows

    out = await swebench_replay(
        logs=[EXAMPLE],
        concurrency_sweep=[1, 2],
        latency="fixed:20:2",
        out_dir=tmp_path / "artifacts",
        warehouse=tmp_path / "wh.duckdb",
    )
    run_id, run_dir = out["run_id"], Path(out["run_dir"])
    rows = out["points"]
    assert [r["sweep_point"] for r in rows] == ["c1", "c2"]

    # point_summary.json and sweep_points.jsonl hold the flow's rows
    files = [json.loads((run_dir / "points" / r["sweep_point"] / "point_summary.json").read_text()) for r in rows]
    lines = [json.loads(x) for x in (run_dir / "sweep_points.jsonl").read_text().splitlines()]
    assert files == lines == json.loads(json.dumps(rows))

    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        cur = con.execute("SELECT * FROM v_sweep_summary WHERE run_id = ? ORDER BY sweep_point", [run_id])
        names = [d[0] for d in cur.description]
        view = [dict(zip(names, v, strict=False)) for v in cur.fetchall()]
        cur = con.execute(HAND_REQUESTS, [run_id])
        hand = [dict(zip([d[0] for d in cur.description], v, strict=False)) for v in cur.fetchall()]
        cur = con.execute(HAND_EPISODES, [run_id])
        hand_eps = [dict(zip([d[0] for d in cur.description], v, strict=False)) for v in cur.fetchall()]
        cur = con.execute(HAND_TURNS, [run_id])
        hand_turns = [dict(zip([d[0] for d in cur.description], v, strict=False)) for v in cur.fetchall()]
        n_turn_rows = con.execute("SELECT count(*) FROM turns WHERE run_id = ?", [run_id]).fetchone()[0]
    finally:
        con.close()

    # v_sweep_summary: every column equal to the point's row (same SQL, other relations)
    for point, row in zip(view, files, strict=False):
        differ = {k: (v, row.get(k)) for k, v in point.items() if k != "run_id" and not _same(v, row.get(k))}
        assert differ == {}, point["sweep_point"]
    # 1 trajectory of 4 turns: max(c, 1) episodes per point, every turn served with usage
    # (`valid` holds on a busy host too: the suite's host-load limits, tests/conftest.py)
    assert [(p["n_episodes"], p["n_requests"], p["n_ok"], p["usage_coverage"], p["valid"]) for p in view] == [
        (1, 4, 4, 1.0, True),
        (2, 8, 8, 1.0, True),
    ]

    # hand-written SQL over requests and episodes
    for h, row in zip(hand, files, strict=False):
        assert {k: (v, row[k]) for k, v in h.items() if not _same(v, row[k])} == {}, h["sweep_point"]
    for h, row in zip(hand_eps, files, strict=False):
        assert {k: (v, row[k]) for k, v in h.items() if not _same(v, row[k])} == {}, h["sweep_point"]
    # turns joined to requests: one request per turn (4 + 8 turns), the same numbers
    assert n_turn_rows == sum(h["n_requests"] for h in hand_turns) == 12
    assert [h["sweep_point"] for h in hand_turns] == ["c1", "c2"]
    for h, row in zip(hand_turns, files, strict=False):
        assert {k: (v, row[k]) for k, v in h.items() if not _same(v, row[k])} == {}, h["sweep_point"]

    # the CLI table: the same cells whether formatted from the rows or from the view, and
    # print_sweep prints them
    assert sweep_table_rows(rows) == sweep_table_rows(view)
    buf = io.StringIO()
    print_sweep(out, "swebench-replay", console=Console(file=buf, width=300, force_terminal=False))
    printed = buf.getvalue()
    headers, table = sweep_table_rows(rows)
    for line in table:
        assert all(cell in printed for cell in line)

    # the report: its sweep table carries the view's values
    report = cells((run_dir / "report.html").read_text(encoding="utf-8"))["sweep"]
    for point in view:
        for key in (
            "n_requests",
            "n_ok",
            "window_s",
            "request_throughput_per_s",
            "p50_e2e_ms",
            "p99_e2e_ms",
            "p50_ttft_ms",
            "p99_ttft_ms",
            "usage_coverage",
            "n_episodes",
            "achieved_max_concurrency",
            "misses_total",
            "resolved_rate_carried",
            "resolved_rate_reverified",
            "n_recorded_error",
            "n_aborted",
            "valid",
        ):
            assert _same(report[(key, point["sweep_point"])][0], point[key]), (key, point["sweep_point"])
