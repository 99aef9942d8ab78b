"""Replay a recording with a real agent in the loop (`benchmaker swebench-replay --mode
command`) and keep one row per agent, API and concurrency for the table `make
conformance` prints.

    rows = replay_in_command_mode(
        agent="pi", api="anthropic-messages", trajectories=rec, command=cmd,
        task_dir=TASK, tmp=tmp_path, out_dir=out_dir,
    )
    rows[0].misses, rows[0].resolved          # per sweep point (concurrency 1, then 4)

Each run: `--concurrency 1,4 --episodes-per-point 4 --divergence content` into a
DuckDB warehouse of its own (Prefect's temporary server given 180 s to start on a busy
host); the rows are read from its `v_sweep_summary`. The run's
output goes to `<out_dir>/<agent>-<api>-replay.log`. Every row is appended to
`<out_dir>/agents.jsonl` and `<out_dir>/agents.md` is rewritten from it: one line per
agent, API and concurrency with requests, turns, misses, divergences and episodes
resolved (re-verified by the task's tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb

from conformance.venvs import REPO

__all__ = [
    "AgentRow",
    "assert_clean_replay",
    "invalid_but_for_lag",
    "replay_in_command_mode",
    "row_counts",
    "write_table",
]

BENCHMAKER = str(Path(sys.executable).with_name("benchmaker"))


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One sweep point of one agent's command-mode replay: `concurrency` the target,
    `achieved` the most episodes in flight, `episodes`/`failed` episode counts,
    `requests` and `turns` the model calls made and served, `misses` the replay misses,
    `divergences` the observations that differed, `resolved` of `reverified` the
    episodes whose workspace passed the task's tests, `valid` the point's verdict and
    `invalid_reason` why not (None when valid)."""

    agent: str
    api: str
    concurrency: int
    achieved: int
    episodes: int
    failed: int
    requests: int
    turns: int
    misses: int
    divergences: int
    reverified: int
    resolved: int
    valid: bool
    invalid_reason: str | None

    @property
    def counts(self) -> tuple[int, ...]:
        """(concurrency, achieved, episodes, failed, requests, turns, misses, divergences,
        resolved): what a conformance test asserts of a point."""
        return (
            self.concurrency,
            self.achieved,
            self.episodes,
            self.failed,
            self.requests,
            self.turns,
            self.misses,
            self.divergences,
            self.resolved,
        )

    @property
    def valid_but_for_lag(self) -> bool:
        """True when the point is valid, or invalid for event-loop lag only (a busy host)."""
        return self.valid or all("event-loop lag" in x for x in (self.invalid_reason or "").split("; "))


COUNTS = (
    "concurrency",
    "achieved",
    "episodes",
    "failed",
    "requests",
    "turns",
    "misses",
    "divergences",
    "reverified",
    "resolved",
)
"""The AgentRow fields row_counts gives, in order."""


def row_counts(rows: list[AgentRow]) -> list[tuple[int, ...]]:
    """Each row's COUNTS (concurrency, achieved, episodes, failed, requests, turns,
    misses, divergences, reverified, resolved), for one exact comparison per run."""
    return [tuple(getattr(r, f) for f in COUNTS) for r in rows]


def invalid_but_for_lag(rows: list[AgentRow]) -> list[AgentRow]:
    """The rows whose point is invalid for a reason other than the engine's event-loop
    lag check, which fires on a busy host (the run then exits 1); [] when none."""
    return [
        r for r in rows if not r.valid and any("event-loop lag" not in x for x in (r.invalid_reason or "").split("; "))
    ]


def replay_in_command_mode(
    *,
    agent: str,
    api: str,
    trajectories: Path,
    command: str,
    task_dir: Path,
    tmp: Path,
    out_dir: Path,
    concurrency: str = "1,4",
    episodes: int = 4,
    timeout_s: float = 1800.0,
) -> list[AgentRow]:
    """Run the replay (module docstring) and return its rows, by concurrency. Raises
    AssertionError with the output tail when the run ends with an exit code other than
    0 or 1 (1: a point is invalid, which the caller judges from the rows) or loaded no
    warehouse."""
    wh = tmp / "warehouse.duckdb"
    proc = subprocess.run(
        [
            BENCHMAKER,
            "swebench-replay",
            "--trajectories",
            str(trajectories),
            "--mode",
            "command",
            "--command",
            command,
            "--task-dirs",
            str(task_dir),
            "--concurrency",
            concurrency,
            "--episodes-per-point",
            str(episodes),
            "--divergence",
            "content",
            "--out-dir",
            str(tmp / "art"),
            "--warehouse",
            str(wh),
            "--label",
            f"conformance-{agent}-{api}",
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
        # the flow's temporary Prefect server: on a loaded 2-core host it can take longer
        # than Prefect's default 20 s (counted in its own 0.1 s sleeps) to answer
        env={**os.environ, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"},
    )
    (out_dir / f"{agent}-{api}-replay.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode in (0, 1) and wh.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    with duckdb.connect(str(wh), read_only=True) as con:
        found = con.sql(
            "SELECT target_concurrency, achieved_max_concurrency, n_episodes, n_episodes_failed, n_requests, n_turns, "
            "misses_total, divergences, n_reverified, n_resolved_reverified, valid, invalid_reason "
            "FROM v_sweep_summary ORDER BY target_concurrency"
        ).fetchall()
    rows = [AgentRow(agent, api, *(int(v) for v in r[:10]), bool(r[10]), r[11]) for r in found]
    with open(out_dir / "agents.jsonl", "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(asdict(row)) + "\n")
    write_table(out_dir)
    return rows


def assert_clean_replay(rows: list[AgentRow], *, turns: int, episodes: int = 4) -> None:
    """Assert the rows of a replay at concurrency 1 and 4 (`episodes` each) of a
    `turns`-turn recording: concurrency reached, no episode failed, every episode made
    the recorded `turns` requests and each was served as a turn, 0 misses, 0
    divergences, every episode re-verified and resolved; a point may be invalid only
    for event-loop lag (a busy host), for no other reason."""
    n = episodes * turns
    assert [
        (r.concurrency, r.achieved, r.episodes, r.failed, r.requests, r.turns, r.misses, r.divergences)
        + (r.reverified, r.resolved)
        for r in rows
    ] == [(1, 1, episodes, 0, n, n, 0, 0, episodes, episodes), (4, 4, episodes, 0, n, n, 0, 0, episodes, episodes)]
    for r in rows:
        assert r.valid or all("event-loop lag" in x for x in (r.invalid_reason or "").split("; ")), r


def write_table(out_dir: Path) -> Path:
    """Rewrite `<out_dir>/agents.md` from `<out_dir>/agents.jsonl` (module docstring);
    returns its path."""
    lines = [
        "# Real agents in command mode (swebench-replay --mode command, --divergence content)",
        "",
        "| agent | API | concurrency | requests | turns | misses | divergences | resolved | valid |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    src = out_dir / "agents.jsonl"
    for line in src.read_text(encoding="utf-8").splitlines() if src.exists() else ():
        r = json.loads(line)
        valid = "yes" if r["valid"] else f"no: {r['invalid_reason']}"
        lines.append(
            f"| {r['agent']} | {r['api']} | {r['concurrency']} (achieved {r['achieved']}) | {r['requests']} | "
            f"{r['turns']} | {r['misses']} | {r['divergences']} | {r['resolved']} of {r['episodes']} | {valid} |"
        )
    path = out_dir / "agents.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
