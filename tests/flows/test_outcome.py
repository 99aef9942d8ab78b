"""benchmaker.flows.outcome: a sweep flow run with invalid points ends in a state a scheduler can
alert on, and the CLI still gets its table."""

from __future__ import annotations

import json

import pytest

from benchmaker.flows.outcome import AllPointsInvalid, final_state, grading_summary, invalid_summary

OK = {"sweep_point": "c1", "valid": True, "invalid_reason": None}
LATE = {"sweep_point": "c2", "valid": False, "invalid_reason": "worker 1 did not finish in time (stopped)"}
LOW = {"sweep_point": "c4", "valid": False, "invalid_reason": "achieved concurrency 3 never reached the target 4"}


def test_every_point_valid_returns_out_itself():
    out = {"run_id": "r", "points": [OK]}
    assert final_state(out) is out
    assert invalid_summary([OK]) is None


def test_some_points_invalid_is_completed_named_invalid():
    out = {"run_id": "r", "points": [OK, LATE]}
    state = final_state(out)
    assert (state.type.value, state.name) == ("COMPLETED", "Invalid")
    assert state.message == "1 of 2 sweep points invalid: c2: worker 1 did not finish in time (stopped)"


def test_the_state_message_says_a_busy_machine_in_plain_words():
    busy = {
        "sweep_point": "c8",
        "valid": False,
        "invalid_reason": "engine: event-loop lag p99 38.42 ms > 10 ms: client-side timestamps include client delay",
    }
    assert final_state({"run_id": "r", "points": [OK, busy]}).message == (
        "1 of 2 sweep points invalid: c8: your machine was busy: the client's event loop lagged 38 ms (p99; the "
        "limit is 10 ms), so the timings include client delay"
    )


def test_every_point_invalid_is_failed_carrying_out():
    out = {"run_id": "r", "points": [LATE, LOW]}
    state = final_state(out)
    assert state.type.value == "FAILED"
    # each reason in plain words (benchmaker.sweep.verdicts), an unknown one as recorded
    assert state.message == (
        "every sweep point is invalid (2 of 2): c2: worker 1 did not finish in time (stopped); "
        "c4: the target concurrency was never reached: at most 3 of 4 were in flight at once"
    )
    assert isinstance(state.data, AllPointsInvalid) and state.data.out is out


# graded points: the verifier re-ran the task's tests on 1 and on 4 episodes
GRADED = {**OK, "n_reverified": 1, "n_resolved_reverified": 1}
GRADED_LOW = {**LOW, "n_reverified": 4, "n_resolved_reverified": 3, "n_carried": 2, "n_resolved_carried": 0}


def test_the_accuracy_of_graded_points_is_in_every_state_message():
    assert grading_summary([OK, LATE]) is None  # nothing graded: nothing said
    assert grading_summary([GRADED, GRADED_LOW]) == (
        "accuracy (resolved of re-verified episodes): c1 1 of 1 (100%), c4 3 of 4 (75%); "
        "resolved as recorded (carried from the logs): c4 0 of 2 (0%)"
    )
    state = final_state({"run_id": "r", "points": [GRADED]})  # valid, and graded: said in a Completed state
    assert (state.type.value, state.name, state.message) == (
        "COMPLETED",
        "Completed",
        "1 of 1 sweep points valid; accuracy (resolved of re-verified episodes): c1 1 of 1 (100%)",
    )
    assert final_state({"run_id": "r", "points": [GRADED, GRADED_LOW]}).message == (
        "1 of 2 sweep points invalid: c4: the target concurrency was never reached: at most 3 of 4 were in flight "
        "at once; accuracy (resolved of re-verified episodes): c1 1 of 1 (100%), c4 3 of 4 (75%); "
        "resolved as recorded (carried from the logs): c4 0 of 2 (0%)"
    )
    assert final_state({"run_id": "r", "points": [GRADED_LOW]}).message == (
        "every sweep point is invalid (1 of 1): c4: the target concurrency was never reached: at most 3 of 4 were "
        "in flight at once; accuracy (resolved of re-verified episodes): c4 3 of 4 (75%); "
        "resolved as recorded (carried from the logs): c4 0 of 2 (0%)"
    )


async def _logged(flow_run_id, wait_s: float = 60.0) -> list[str]:
    """The messages the API holds for `flow_run_id`'s logs, waiting up to `wait_s` for
    any (the run's log handler sends them in batches, every 2 s by default)."""
    import asyncio
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    deadline = time.monotonic() + wait_s
    async with get_client() as client:
        while True:
            logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            messages = [log.message for log in logs]
            if any("sweep point" in m for m in messages) or time.monotonic() > deadline:
                return messages
            await asyncio.sleep(0.5)


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_cli_gets_out_and_the_flow_run_keeps_the_state(tmp_path):
    from prefect import flow
    from prefect.client.orchestration import get_client

    from benchmaker.flows.outcome import record_flow_run, run_sweep_flow

    @flow(name="outcome-probe")
    async def probe(points: list[dict], manifest: str) -> object:
        record_flow_run(manifest)
        return final_state({"run_id": "r", "points": points})

    manifest = tmp_path / "manifest.json"
    said: list[str] = []
    cases = (([OK], "Completed"), ([OK, LATE], "Invalid"), ([LATE, LOW], "Failed"), ([GRADED], "Completed"))
    for points, state_name in cases:
        manifest.write_text('{"run_id": "r"}')
        out = await run_sweep_flow(probe, {"points": points, "manifest": str(manifest)}, announce=said.append)
        assert out == {"run_id": "r", "points": points}
        kept = json.loads(manifest.read_text())
        async with get_client() as client:
            fr = await client.read_flow_run(kept["flow_run_id"])
        assert fr.state.name == state_name
        # the API keeps the message final_state gave: the reasons, the accuracy with its n
        expected = final_state({"run_id": "r", "points": points})
        assert fr.state.message == (None if isinstance(expected, dict) else expected.message)
        if not isinstance(expected, dict):  # and the run logged it (`prefect deployment run --watch` prints logs)
            assert expected.message in await _logged(fr.id), state_name
        # announced before the run, with what `benchmaker retry` takes
        assert said[-1] == f"flow run {fr.id} ({fr.name})"
        assert kept["flow_run_name"] == fr.name
    with pytest.raises(AllPointsInvalid):  # called directly, a Failed run raises with `out` attached
        await probe([LATE], str(manifest))


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_a_failed_flow_run_raises_its_reason_and_how_to_resume_it():
    from prefect import flow

    from benchmaker.flows.outcome import FlowRunFailed, run_sweep_flow

    @flow(name="failing-probe")
    async def failing(points: list[dict]) -> object:
        raise OSError("warehouse.duckdb: could not set lock on file")

    said: list[str] = []
    with pytest.raises(FlowRunFailed) as caught:
        await run_sweep_flow(failing, {"points": [OK]}, announce=said.append)
    run_id = caught.value.flow_run_id
    assert said == [f"flow run {run_id} ({said[0].split('(')[1].rstrip(')')})"]
    message = str(caught.value)
    assert message.startswith(f"flow run {run_id} (")
    assert " ended Failed: " in message and "warehouse.duckdb: could not set lock on file" in message
    assert message.endswith(f"`benchmaker retry {run_id}` resumes it, keeping the points already measured")
