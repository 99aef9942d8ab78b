"""The documented multi-host setup, on this machine: a real Prefect
server on a private port, the `process` work pool, the distributed and shard
deployments of llm-sweep and swebench-replay from prefect.yaml (`prefect deploy`), TWO
Prefect workers, then `prefect deployment run llm-sweep/distributed --watch` against the
scenario server and `prefect deployment run swebench-replay/distributed --watch` on the
bundled recording: exit 0, and the warehouse holds one run whose rows carry two shards.
Shard runs past the shard timeout end CANCELLED, also those no worker had picked up and
those whose worker never confirms the cancel (benchmaker.tasks.shard_runs.cancel_flow_runs).
Every process is started here and stopped (its process group) in teardown."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import orjson
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.client.schemas.objects import FlowRun, State
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Pending, Scheduled

from benchmaker.sweep.point import LlmPoint
from benchmaker.tasks.shard import ShardPoint
from benchmaker.tasks.shard_runs import cancel_flow_runs
from benchmaker.testing.scenario_server import Scenario, ScenarioServer
from tests.reaper import Reaper

REPO = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")
POOL = "benchmaker-process"  # prefect.yaml definitions.work_pool.name
_STARTUP_S = 120.0
# one Prefect stack (module fixture, ~30 s to start) for every test here: under
# pytest-xdist (--dist loadfile) they run on one worker, this file first (`long`)
pytestmark = pytest.mark.long


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group we started (server/worker and their children), then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def prefect_stack(tmp_path_factory: pytest.TempPathFactory, process_reaper: Reaper):
    """A Prefect server (own PREFECT_HOME and SQLite database), the work pool, the
    distributed and shard deployments of llm-sweep and swebench-replay, and two
    workers; yields the environment that talks to that server. Each process group is
    also given to the session's reaper: a test process killed from outside, whose
    `finally` never runs, takes them with it."""
    tmp_path = tmp_path_factory.mktemp("prefect-stack")
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",  # workers poll every 1 s (default 10)
        "PREFECT_CLI_COLORS": "false",
        "BENCHMAKER_HOME": str(REPO),
    }  # prefect.yaml's pull step
    procs: list[subprocess.Popen] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def spawn(name: str, *args: str) -> subprocess.Popen:
        out = open(logs / f"{name}.log", "wb")
        p = subprocess.Popen(
            [PREFECT, *args], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        procs.append(p)
        process_reaper.watch(p.pid)
        return p

    def run(*args: str) -> None:
        r = subprocess.run([PREFECT, *args], env=env, cwd=REPO, capture_output=True, timeout=_STARTUP_S)
        assert r.returncode == 0, (args, r.stdout.decode()[-3000:], r.stderr.decode()[-3000:])

    try:
        server = spawn("server", "server", "start", "--host", "127.0.0.1", "--port", str(port))
        deadline = time.monotonic() + _STARTUP_S
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None, (logs / "server.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "Prefect server not healthy after 120 s"
                time.sleep(0.5)
        run("work-pool", "create", POOL, "--type", "process")
        run(
            "--no-prompt",
            "deploy",
            "--prefect-file",
            str(REPO / "prefect.yaml"),
            "--name",
            "llm-sweep/distributed",
            "--name",
            "llm-sweep-shard/shard",
            "--name",
            "swebench-replay/distributed",
            "--name",
            "swebench-replay-shard/shard",
        )
        for k in (1, 2):
            spawn(f"worker-{k}", "worker", "start", "--pool", POOL, "--name", f"load-host-{k}")
        yield env, logs
    finally:
        for p in reversed(procs):
            _stop(p)
            process_reaper.forget(p.pid)


async def _deployment_run(env: dict, logs: Path, *args: str, expect: int = 0) -> str:
    """`prefect deployment run ARGS --watch`; asserts exit `expect` (output and worker logs
    in the message) and returns the output."""
    proc = await asyncio.create_subprocess_exec(
        PREFECT,
        "deployment",
        "run",
        *args,
        "--watch",
        "--watch-interval",
        "1",
        env=env,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=240)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    worker_logs = "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(logs.glob("worker-*.log")))
    assert proc.returncode == expect, out.decode()[-4000:] + worker_logs
    return out.decode()


@pytest.mark.slow
@pytest.mark.prefect
async def test_deployment_run_of_a_two_shard_sweep_on_two_workers(tmp_path: Path, prefect_stack) -> None:
    env, logs = prefect_stack
    wh = tmp_path / "w.duckdb"
    async with ScenarioServer(Scenario(ttft_ms=5)) as server:
        await _deployment_run(
            env,
            logs,
            "llm-sweep/distributed",
            "--param",
            f'base_url="{server.url}"',
            "--param",
            'model="m"',
            "--param",
            "shards=2",
            "--param",
            "concurrency_sweep=[]",
            "--param",
            'loads=["constant:40"]',
            "--param",
            "duration_s=1",
            "--param",
            "max_tokens=8",
            "--param",
            f'out_dir="{tmp_path / "a"}"',
            "--param",
            f'warehouse="{wh}"',
        )
        served = server.n_requests
    assert served == 40  # constant:40 for 1 s, split over two shards
    con = duckdb.connect(str(wh), read_only=True)
    try:
        assert con.execute("SELECT count(*), any_value(kind), any_value(workers) FROM runs").fetchone() == (
            1,
            "llm-sweep",
            2,
        )
        # every request row carries its shard; 40 arrivals dealt round-robin: 20 each
        assert con.execute("SELECT shard, count(*) FROM requests GROUP BY 1 ORDER BY 1").fetchall() == [
            (0, 20),
            (1, 20),
        ]
        assert con.execute("SELECT sweep_point, from_file FROM sweep_points").fetchall() == [("constant-40", True)]
        [run_dir] = [Path(r[0]) for r in con.execute("SELECT source_dir FROM runs").fetchall()]
    finally:
        con.close()
    summary = orjson.loads((run_dir / "points" / "constant-40" / "engine_summary.json").read_bytes())
    assert [(s["worker"], s["state"]) for s in summary["shards"]] == [(0, "COMPLETED"), (1, "COMPLETED")]
    workers = summary["self_checks"]["workers"]
    assert len({w["pid"] for w in workers}) == 2  # two flow-run processes
    # the default start lead: the shards started together once both were ready (the
    # readiness barrier), however long the pool took to pick them up
    for w in workers:  # each shard measured its clock and started on the shared start
        assert 0 <= w["start_late_ns"] < 50_000_000 and abs(w["clock"]["wall_offset_ns"]) < 10_000_000, w
    # the shards' own reasons (died, started late); lag reasons depend on what else shares the cores
    assert [r for r in summary["verdict"]["reasons"] if r.startswith(("worker ", "no request"))] == []


@pytest.mark.slow
@pytest.mark.prefect
async def test_deployment_run_of_a_distributed_agent_replay_on_two_workers(tmp_path: Path, prefect_stack) -> None:
    env, logs = prefect_stack
    wh = tmp_path / "w.duckdb"
    await _deployment_run(
        env,
        logs,
        "swebench-replay/distributed",
        "--param",
        "concurrency_sweep=[4]",
        "--param",
        "shards=2",
        "--param",
        'latency="fixed:50:0"',
        "--param",
        f'out_dir="{tmp_path / "a"}"',
        "--param",
        f'warehouse="{wh}"',
    )
    con = duckdb.connect(str(wh), read_only=True)
    try:
        assert con.execute("SELECT count(*), any_value(kind), any_value(workers) FROM runs").fetchone() == (
            1,
            "swebench-replay",
            2,
        )
        # the bundled recording (one trajectory of 4 turns) at concurrency 4: two episodes per shard
        assert con.execute("SELECT shard, count(*) FROM episodes GROUP BY 1 ORDER BY 1").fetchall() == [(0, 2), (1, 2)]
        assert con.execute("SELECT shard, count(*) FROM requests GROUP BY 1 ORDER BY 1").fetchall() == [(0, 8), (1, 8)]
        assert con.execute("SELECT sweep_point, shards, proof_ok FROM sweep_points").fetchall() == [("c4", 2, True)]
        [run_dir] = [Path(r[0]) for r in con.execute("SELECT source_dir FROM runs").fetchall()]
    finally:
        con.close()
    row = orjson.loads((run_dir / "points" / "c4" / "point_summary.json").read_bytes())
    assert (row["valid"], row["achieved_max_concurrency"]) == (True, 4), row["invalid_reason"]
    shards = orjson.loads((run_dir / "points" / "c4" / "shards.json").read_bytes())
    assert [(s["worker"], s["state"], s["exit_code"]) for s in shards] == [(0, "COMPLETED", 0), (1, "COMPLETED", 0)]
    assert len({s["pid"] for s in shards}) == 2  # two flow-run processes
    for s in shards:  # each shard measured its clock and started on the shared start
        assert 0 <= s["start_late_ns"] < 50_000_000 and abs(s["clock"]["wall_offset_ns"]) < 10_000_000, s


@pytest.mark.slow
@pytest.mark.prefect
async def test_shards_not_done_by_the_shard_timeout_are_cancelled(tmp_path: Path, prefect_stack) -> None:
    env, logs = prefect_stack
    wh = tmp_path / "w.duckdb"
    async with ScenarioServer(Scenario()) as server:
        # the shared start is 20 s away and the shards get 3 s in all: both are cancelled
        # (waiting for the start, or not yet picked up), and nothing reaches the server
        # every point invalid: the flow run ends Failed (benchmaker.flows.outcome), so --watch exits 1
        out = await _deployment_run(
            env,
            logs,
            "llm-sweep/distributed",
            "--param",
            f'base_url="{server.url}"',
            "--param",
            'model="m"',
            "--param",
            "shards=2",
            "--param",
            "concurrency_sweep=[]",
            "--param",
            'loads=["constant:40"]',
            "--param",
            "duration_s=1",
            "--param",
            "start_lead_s=20",
            "--param",
            "shard_timeout_s=3",
            "--param",
            f'out_dir="{tmp_path / "a"}"',
            "--param",
            f'warehouse="{wh}"',
            expect=1,
        )
        assert "Failed" in out
        # until 2 s past the shards' earliest start: a straggler would have sent by then
        start_s = await _earliest_start_s(env, tmp_path / "a")
        await asyncio.sleep(max(0.0, start_s + 2 - time.time()))
        served = server.n_requests
    assert served == 0
    con = duckdb.connect(str(wh), read_only=True)
    try:
        [run_dir] = [Path(r[0]) for r in con.execute("SELECT source_dir FROM runs").fetchall()]
        assert con.execute("SELECT count(*) FROM requests").fetchone() == (0,)
    finally:
        con.close()
    summary = orjson.loads((run_dir / "points" / "constant-40" / "engine_summary.json").read_bytes())
    assert [(s["worker"], s["state"]) for s in summary["shards"]] == [(0, "CANCELLED"), (1, "CANCELLED")]
    assert [r for r in summary["verdict"]["reasons"] if r.startswith("worker ")] == [
        "worker 0 did not finish in time (stopped)",
        "worker 1 did not finish in time (stopped)",
    ]
    assert summary["verdict"]["valid"] is False


async def _earliest_start_s(env: dict, out_dir: Path) -> float:
    """The earliest start (wall clock, s) given to the shard runs of the run under
    `out_dir`: read from the parameters of the shard deployment's flow runs."""
    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        async with get_client() as client:
            deployment = await client.read_deployment_by_name("llm-sweep-shard/shard")
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
            )
    starts = [
        r.parameters["point"]["start_wall_ns"]
        for r in runs
        if str(r.parameters["point"]["run_dir"]).startswith(str(out_dir))
    ]
    assert len(starts) == 2, starts
    return max(starts) / 1e9


async def _shard_run(state: State) -> FlowRun:
    """A flow run of the shard deployment created in `state` (no worker involved)."""
    point = ShardPoint(
        LlmPoint(base_url="http://127.0.0.1:9", model="m", load="constant:1"),
        "/nonexistent",
        "r",
        None,
        worker=0,
        start_wall_ns=0,
    )
    async with get_client() as client:
        deployment = await client.read_deployment_by_name("llm-sweep-shard/shard")
        return await client.create_flow_run_from_deployment(
            deployment.id, parameters={"point": point.as_params()}, state=state
        )


@pytest.mark.prefect
async def test_a_shard_run_no_worker_has_picked_up_is_cancelled_at_once(prefect_stack) -> None:
    # a shard run still SCHEDULED when the shard timeout passes (its worker had not polled
    # yet, as on a busy host): the server cancels it in the same call (no infrastructure
    # to stop), so cancel_flow_runs returns it CANCELLED without waiting; scheduled an
    # hour ahead, no worker takes it during the test
    env, _ = prefect_stack
    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        fr = await _shard_run(Scheduled(scheduled_time=datetime.now(UTC) + timedelta(hours=1)))
        t0 = time.monotonic()
        out = await cancel_flow_runs([fr.id], "not done within shard_timeout_s (3 s)", wait_s=30)
        waited = time.monotonic() - t0
    assert out[fr.id].state.type.value == "CANCELLED", out[fr.id].state
    assert waited < 15, waited  # nothing to wait for


@pytest.mark.prefect
async def test_a_shard_run_whose_worker_never_confirms_the_cancel_ends_cancelled_with_a_message(prefect_stack) -> None:
    # a run left CANCELLING by its worker (Prefect's runner returns without a state when
    # the attempt had already concluded): here PENDING with no process and no worker
    # holding it, so nobody acts on CANCELLING; at the deadline cancel_flow_runs marks it
    # CANCELLED and says why
    env, _ = prefect_stack
    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        fr = await _shard_run(Pending())
        t0 = time.monotonic()
        out = await cancel_flow_runs([fr.id], "not done within shard_timeout_s (3 s)", wait_s=4)
        waited = time.monotonic() - t0
        async with get_client() as client:
            history = [s.type.value for s in await client.read_flow_run_states(fr.id)]
    state = out[fr.id].state
    assert (state.type.value, state.message) == (
        "CANCELLED",
        "not done within shard_timeout_s (3 s); its worker did not confirm the cancellation within 4 s",
    )
    assert history == ["PENDING", "CANCELLING", "CANCELLED"]
    assert 4 <= waited < 20, waited
