"""Live progress of the swebench-replay flow (issue #15 item 2): the observers of
replay.progress see every sweep point move to its planned model calls, and each point
leaves a Prefect progress artifact at 100% for runs watched in the UI."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.progress import ProgressEvent, observe

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.usefixtures("prefect_harness"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


async def test_every_point_reports_progress_and_a_progress_artifact(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.swebench_replay import swebench_replay

    events: list[ProgressEvent] = []
    with observe(events.append):
        out = await swebench_replay(logs=[EXAMPLE], concurrency_sweep=[1, 2], out_dir=tmp_path / "artifacts",
                                    warehouse=tmp_path / "wh.duckdb", label="progress")
    last = {e.point: e for e in events if e.finished}
    # the example has 4 turns: c1 plays 1 episode (4 calls), c2 plays 2 (8 calls)
    assert {p: (e.episodes_done, e.episodes_total, e.calls_done, e.calls_total, e.misses)
            for p, e in last.items()} == {"c1": (1, 1, 4, 4, 0), "c2": (2, 2, 8, 8, 0)}
    key = f"sweep-progress-{out['run_id']}-c2".lower()
    async with get_client() as client:
        arts = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert [(a.type, float(a.data)) for a in arts] == [("progress", 100.0)]
    assert "model calls 8/8" in arts[0].description
