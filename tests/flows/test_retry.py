"""benchmaker.flows.retry for real: a swebench-replay flow run that fails at its second sweep point,
resumed in another process under the same flow run id (the first point from the task
cache, its files untouched; the failed point measured), then a new run measuring all."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
POINT_FILES = ("episodes.jsonl", "turns.jsonl", "samples.jsonl", "point_summary.json")

pytestmark = [
    pytest.mark.prefect,
    pytest.mark.usefixtures("prefect_harness"),
    # Prefect's own API clients leave sockets to its test server for the GC (see
    # test_swebench_replay_flow.py); not ours to close.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


def _fingerprint(pdir: Path) -> dict[str, tuple[int, str]]:
    return {
        name: ((pdir / name).stat().st_mtime_ns, hashlib.sha256((pdir / name).read_bytes()).hexdigest())
        for name in POINT_FILES
    }


def _sweep_states(flow_run_id: str) -> dict[int, list[str]]:
    """flow run attempt (run count) -> state names of its run-sweep-point task runs, in
    the order they were created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    out: dict[int, list[str]] = {}
    for tr in sorted(runs, key=lambda tr: tr.expected_start_time):
        if tr.name.startswith("run-sweep-point"):
            # a task run just created may have no state yet
            out.setdefault(tr.flow_run_run_count, []).append(tr.state.name if tr.state else None)
    return out


def _flow_run(flow_run_id: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


async def test_failed_run_resumes_at_failed_point_and_new_run_measures_all(tmp_path: Path, monkeypatch) -> None:
    from prefect.settings import PREFECT_API_URL

    from benchmaker.flows.retry import retry_flow_run
    from benchmaker.flows.swebench_replay import swebench_replay
    from benchmaker.tasks.sweep import FAIL_POINT_ENV

    out_dir = tmp_path / "artifacts"
    kw = dict(logs=[EXAMPLE], concurrency_sweep=[1, 2], out_dir=out_dir, warehouse=tmp_path / "wh.duckdb")

    # attempt 1: c1 completes, c2 measures then fails (injected, not transient: no task retry)
    monkeypatch.setenv(FAIL_POINT_ENV, "c2")
    state = await swebench_replay(**kw, return_state=True)
    monkeypatch.delenv(FAIL_POINT_ENV)
    assert state.is_failed()
    flow_run_id = str(state.state_details.flow_run_id)
    [run_dir] = [d for d in out_dir.iterdir() if d.name != "_cache"]
    assert run_dir.name.endswith(flow_run_id[:8])
    c1, c2 = run_dir / "points" / "c1", run_dir / "points" / "c2"
    c1_before, c2_before = _fingerprint(c1), _fingerprint(c2)
    manifest_before = (run_dir / "manifest.json").read_bytes()
    assert not (tmp_path / "wh.duckdb").exists()  # the load stage never ran
    assert _sweep_states(flow_run_id) == {1: ["Completed", "Failed"]}

    # attempt 2: resumed from another process, as a user would (python -m benchmaker.flows.retry ID)
    env = dict(
        os.environ,
        PREFECT_API_URL=PREFECT_API_URL.value(),
        PYTHONPATH=str(REPO),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    env.pop(FAIL_POINT_ENV, None)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmaker.flows.retry", flow_run_id],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().endswith(f"flow run {flow_run_id}: Completed")
    fr = _flow_run(flow_run_id)
    assert (fr.state.name, fr.run_count) == ("Completed", 2)
    # c1 is a cache hit (not measured again), c2 is measured
    assert _sweep_states(flow_run_id) == {1: ["Completed", "Failed"], 2: ["Cached", "Completed"]}
    assert _fingerprint(c1) == c1_before
    c2_after = _fingerprint(c2)
    assert all(c2_after[name][0] > c2_before[name][0] for name in POINT_FILES)
    assert (run_dir / "manifest.json").read_bytes() == manifest_before  # same run, same t0
    assert [d.name for d in out_dir.iterdir() if d.name != "_cache"] == [run_dir.name]
    run_id = json.loads(manifest_before)["run_id"]
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT run_id, sweep_point, n_episodes, achieved_max_concurrency, valid "
        "FROM v_sweep_summary ORDER BY sweep_point"
    ).fetchall()
    con.close()
    # one run, both points; 1 trajectory -> max(c, 1) episodes per point
    assert rows == [(run_id, "c1", 1, 1, True), (run_id, "c2", 2, 2, True)]
    with pytest.raises(ValueError, match=r"only a Failed, Crashed or Cancelled run resumes \(got Completed\)"):
        await retry_flow_run(flow_run_id)

    # a new flow run with the same parameters measures every point again
    new = await swebench_replay(**kw)
    assert new["run_id"] != run_id
    assert _sweep_states(new["flow_run_id"]) == {1: ["Completed", "Completed"]}
    assert _fingerprint(c1) == c1_before  # and leaves the first run's files alone


def test_retry_refuses_a_bad_id() -> None:
    from benchmaker.flows.retry import main

    assert main(["not-a-uuid"]) == 2
    assert main([]) == 2


async def test_a_cached_point_whose_files_were_deleted_is_measured_again(tmp_path: Path, monkeypatch) -> None:
    import shutil

    from benchmaker.flows.retry import retry_flow_run
    from benchmaker.flows.swebench_replay import swebench_replay
    from benchmaker.tasks.sweep import FAIL_POINT_ENV

    out_dir = tmp_path / "artifacts"
    monkeypatch.setenv(FAIL_POINT_ENV, "c2")
    state = await swebench_replay(
        logs=[EXAMPLE], concurrency_sweep=[1, 2], out_dir=out_dir, warehouse=tmp_path / "wh.duckdb", return_state=True
    )
    monkeypatch.delenv(FAIL_POINT_ENV)
    flow_run_id = str(state.state_details.flow_run_id)
    [run_dir] = [d for d in out_dir.iterdir() if d.name != "_cache"]
    shutil.rmtree(run_dir / "points" / "c1")  # the cache says c1 finished; its files are gone
    state = await retry_flow_run(flow_run_id)
    assert state.is_completed()
    # c1: a cache hit whose files were missing, so measured again; c2 measured
    assert _sweep_states(flow_run_id) == {1: ["Completed", "Failed"], 2: ["Cached", "Completed", "Completed"]}
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    rows = con.execute("SELECT sweep_point, n_episodes, n_requests FROM v_sweep_summary ORDER BY 1").fetchall()
    con.close()
    assert rows == [("c1", 1, 4), ("c2", 2, 8)]  # 1 trajectory of 4 turns: max(c, 1) episodes


async def test_retry_takes_the_name_run_id_or_bundle_of_a_flow_run_and_stops_on_ctrl_c(
    tmp_path: Path, monkeypatch
) -> None:
    """The flow run is named by its name, its bundle's run id or the bundle directory
    (manifest.json keeps flow_run_id), and Ctrl-C during the resumed run leaves it
    Cancelled and the process exits at once (130)."""
    import asyncio
    import signal
    import time

    from prefect.settings import PREFECT_API_URL

    from benchmaker.flows.retry import resolve_flow_run_id
    from benchmaker.flows.swebench_replay import swebench_replay
    from benchmaker.tasks.sweep import FAIL_POINT_ENV

    out_dir = tmp_path / "artifacts"
    monkeypatch.setenv(FAIL_POINT_ENV, "c1")
    # 4 turns at 2.5 s to the first token: a point takes >= 10 s, long enough to interrupt
    state = await swebench_replay(
        logs=[EXAMPLE],
        concurrency_sweep=[1],
        out_dir=out_dir,
        latency="fixed:2500:0",
        warehouse=tmp_path / "wh.duckdb",
        return_state=True,
    )
    monkeypatch.delenv(FAIL_POINT_ENV)
    assert state.is_failed()
    flow_run_id = str(state.state_details.flow_run_id)
    fr = _flow_run(flow_run_id)
    [run_dir] = [d for d in out_dir.iterdir() if d.name != "_cache"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["flow_run_id"], manifest["flow_run_name"]) == (flow_run_id, fr.name)
    for ref in (fr.name, run_dir.name, str(run_dir), flow_run_id):
        assert str(await resolve_flow_run_id(ref)) == flow_run_id, ref
    with pytest.raises(ValueError, match="no flow run with the id, name or bundle run id 'no-such-run'"):
        await resolve_flow_run_id("no-such-run")

    env = dict(
        os.environ,
        PREFECT_API_URL=PREFECT_API_URL.value(),
        PYTHONPATH=str(REPO),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmaker.flows.retry", fr.name],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(1200):  # until the resumed run measures (a busy host starts Python slowly)
            await asyncio.sleep(0.1)
            if _flow_run(flow_run_id).state.name == "Running" and _sweep_states(flow_run_id).get(2):
                break
        else:
            pytest.fail("the resumed run never started measuring")
        proc.send_signal(signal.SIGINT)
        t = time.monotonic()
        out, err = proc.communicate(timeout=120)
        waited_s = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err[-4000:]
    assert out.strip().endswith(f"flow run {flow_run_id}: Cancelled (interrupted by SIGINT)")
    assert waited_s < 60  # CANCEL_GRACE_S (5 s) plus one API call; was ~145 s on a loaded host
    assert _flow_run(flow_run_id).state.type.value == "CANCELLED"


async def test_changed_parameters_are_refused_unless_accepted(tmp_path: Path, monkeypatch, capsys) -> None:
    """A run whose parameters were rewritten on the server after it started (as another
    user did through an unauthenticated server) is refused with one line; the
    parameters are printed first; --accept-changed resumes it anyway."""
    from prefect.client.orchestration import get_client

    from benchmaker.flows.retry import ParametersChanged, main, retry_flow_run
    from benchmaker.flows.swebench_replay import swebench_replay
    from benchmaker.tasks.sweep import FAIL_POINT_ENV

    out_dir = tmp_path / "artifacts"
    monkeypatch.setenv(FAIL_POINT_ENV, "c1")
    state = await swebench_replay(
        logs=[EXAMPLE], concurrency_sweep=[1], out_dir=out_dir, warehouse=tmp_path / "wh.duckdb", return_state=True
    )
    monkeypatch.delenv(FAIL_POINT_ENV)
    assert state.is_failed()
    flow_run_id = str(state.state_details.flow_run_id)
    [run_dir] = [d for d in out_dir.iterdir() if d.name != "_cache"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    from benchmaker.flows.outcome import parameters_sha256

    params = _flow_run(flow_run_id).parameters
    assert manifest["flow_run_parameters_sha256"] == parameters_sha256(params)
    proc = json.loads((run_dir / "flow_process.json").read_text())
    assert proc["pid"] == os.getpid() and isinstance(proc["start_ticks"], int)

    async with get_client() as client:
        await client.update_flow_run(flow_run_id, parameters={**params, "label": "changed-by-someone"})
    with pytest.raises(
        ParametersChanged,
        match=r"manifest.json: flow_run_parameters_sha256: the run's parameters "
        r"changed after it started \(stored [0-9a-f]{64}, now [0-9a-f]{64}\)",
    ):
        await retry_flow_run(flow_run_id)
    capsys.readouterr()
    assert await asyncio.to_thread(main, [flow_run_id]) == 2
    out, err = capsys.readouterr()
    assert '"label": "changed-by-someone"' in out and f"flow run {flow_run_id}" in out  # shown before refusing
    assert err.startswith("benchmaker: error: ") and err.count("\n") == 1 and "--accept-changed" in err

    # parameters that point the bundle elsewhere find no manifest of this run: refused too
    async with get_client() as client:
        await client.update_flow_run(flow_run_id, parameters={**params, "out_dir": str(tmp_path / "elsewhere")})
    with pytest.raises(ParametersChanged, match=r"elsewhere/.*manifest.json: no readable manifest"):
        await retry_flow_run(flow_run_id)

    async with get_client() as client:
        await client.update_flow_run(flow_run_id, parameters={**params, "label": "changed-by-someone"})
    capsys.readouterr()
    assert await asyncio.to_thread(main, [flow_run_id, "--accept-changed"]) == 0
    out, _ = capsys.readouterr()
    assert "resuming with changed or unchecked parameters (--accept-changed)" in out
    assert out.strip().endswith(f"flow run {flow_run_id}: Completed")


async def test_a_killed_running_run_is_marked_crashed_and_resumed(tmp_path: Path) -> None:
    """SIGKILL leaves the flow run Running with no process: retry marks it Crashed
    (its bundle's flow_process.json names the dead process) and resumes it."""
    import asyncio
    import signal

    from prefect.settings import PREFECT_API_URL

    from benchmaker.flows.retry import retry_flow_run

    out_dir = tmp_path / "artifacts"
    code = (
        "import asyncio, pathlib; from benchmaker.flows.swebench_replay import swebench_replay; "
        f"asyncio.run(swebench_replay(logs=[pathlib.Path({str(EXAMPLE)!r})], concurrency_sweep=[1], "
        f"out_dir=pathlib.Path({str(out_dir)!r}), latency='fixed:2500:0', "
        f"warehouse=pathlib.Path({str(tmp_path / 'wh.duckdb')!r})))"
    )
    env = dict(
        os.environ,
        PREFECT_API_URL=PREFECT_API_URL.value(),
        PYTHONPATH=str(REPO),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(1800):  # until it measures (a busy host starts Python slowly)
            await asyncio.sleep(0.1)
            found = list(out_dir.glob("swebench-replay-*/flow_process.json"))
            if found and json.loads(found[0].read_text())["pid"] == proc.pid:
                break
        else:
            pytest.fail("the flow run never started")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    manifest = json.loads((found[0].parent / "manifest.json").read_text())
    flow_run_id = manifest["flow_run_id"]
    assert _flow_run(flow_run_id).state.name == "Running"  # nobody told the server
    state = await retry_flow_run(flow_run_id)
    assert state.is_completed() or state.name == "Invalid", state
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        history = [s.name for s in await client.read_flow_run_states(flow_run_id)]
    assert "Crashed" in history and history[-1] in ("Completed", "Invalid")
