"""Live progress of the swebench-replay flow: the observers of
benchmaker.progress see every sweep point move to its planned model calls, and each point
leaves a Prefect progress artifact at 100% for runs watched in the UI."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmaker.progress import ProgressEvent, StageEvent, observe

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.usefixtures("prefect_harness"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


async def _progress_artifacts(flow_run_id, key_suffix: str) -> list:
    """The progress artifacts of a flow run whose key ends with `key_suffix` (a point)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterType

    async with get_client() as client:
        arts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]), type=ArtifactFilterType(any_=["progress"])
            )
        )
    return [a for a in arts if a.key and a.key.endswith(key_suffix)]


async def test_every_point_reports_progress_and_a_progress_artifact(tmp_path: Path) -> None:
    from benchmaker.flows.swebench_replay import swebench_replay

    events: list[ProgressEvent] = []
    with observe(events.append):
        # return_state: a run whose points a busy host judged invalid (loop lag) ends Failed
        # ('every sweep point is invalid'), and its progress is still what is tested here
        state = await swebench_replay(
            logs=[EXAMPLE],
            concurrency_sweep=[1, 2],
            out_dir=tmp_path / "artifacts",
            warehouse=tmp_path / "wh.duckdb",
            label="progress",
            return_state=True,
        )
    last = {e.point: e for e in events if isinstance(e, ProgressEvent) and e.finished}  # not the StageEvents
    # the example has 4 turns: c1 plays 1 episode (4 calls), c2 plays 2 (8 calls)
    assert {p: (e.episodes_done, e.episodes_total, e.calls_done, e.calls_total, e.misses) for p, e in last.items()} == {
        "c1": (1, 1, 4, 4, 0),
        "c2": (2, 2, 8, 8, 0),
    }
    arts = await _progress_artifacts(state.state_details.flow_run_id, "-c2")
    # one artifact per attempt of the point (a retried point on a busy host adds one): the
    # last attempt's is at 100%
    latest = max(arts, key=lambda a: a.updated)
    assert {a.type for a in arts} == {"progress"} and float(latest.data) == 100.0
    assert "model calls 8/8" in latest.description
    # the conversion stage reports per file: start, the one log file done, the end
    convert = [
        (e.done, e.total, e.finished, e.detail.split(" · ")[0])
        for e in events
        if isinstance(e, StageEvent) and e.stage == "convert"
    ]
    assert convert == [(0, 1, False, "files"), (1, 1, False, "files"), (1, 1, True, "files")]


async def test_llm_sweep_points_report_requests_done_and_a_progress_artifact(tmp_path: Path) -> None:
    from benchmaker.flows.llm_sweep import llm_sweep
    from benchmaker.testing.scenario_server import Scenario, ScenarioServer

    events: list[ProgressEvent] = []
    async with ScenarioServer(Scenario(ttft_ms=20)) as server:
        base = server.chat_url.rsplit("/v1/", 1)[0]
        with observe(events.append):
            state = await llm_sweep(
                base_url=base,
                model="m",
                concurrency_sweep=[1, 3],
                max_requests=12,
                duration_s=None,
                out_dir=tmp_path / "a",
                warehouse=tmp_path / "w.duckdb",
                return_state=True,
            )
    last = {e.point: e for e in events if isinstance(e, ProgressEvent) and e.finished}  # not the StageEvents
    # max_requests=12 per point: every request finished, none failed
    assert {p: (e.calls_done, e.calls_total, e.errors) for p, e in last.items()} == {
        "closed-1": (12, 12, 0),
        "closed-3": (12, 12, 0),
    }
    arts = await _progress_artifacts(state.state_details.flow_run_id, "-closed-3")
    latest = max(arts, key=lambda a: a.updated)  # one per attempt of the point
    assert {a.type for a in arts} == {"progress"} and float(latest.data) == 100.0
