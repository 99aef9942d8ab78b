"""Suite-wide isolation: no test reads this machine's real calibration file. One local
Prefect server per test process for the CLI's flow runs, and one Dask LocalCluster for
the tests that run shards through prefect-dask; both, and every server a test starts in
a session of its own, die with the test process (tests/reaper.py)."""

from __future__ import annotations

import fcntl
import gc
import itertools
import os
import signal
import warnings
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tests.reaper import Reaper

# Host-load thresholds of every run the suite makes (benchmaker.engine.selfcheck): a test that
# checks a bundle, a merge or warehouse rows must not turn on this host's load (loop and
# schedule lag p99 pass 10 ms on a busy 2-core machine; with two CPU hogs at load
# average 13, tests/busy.sh measured loop lag p99 382 ms and schedule lag p99 549 ms in a
# 2 s poisson:100 run). Set here, before any fixture starts a subprocess (CLI, Prefect
# workers, Dask workers inherit it); tests of the checks pass their limits explicitly.
# Export a value to run the suite stricter.
HOST_LOAD_LIMIT_MS = "2000"
EPHEMERAL_STARTUP_S = "300"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-per-file",
        type=int,
        default=None,
        metavar="N",
        help="list the N test files with the largest summed test time (setup + call + teardown, s; "
        "under pytest-xdist the sum over workers, not wall time); 0 for all",
    )


_FILE_SECONDS: defaultdict[str, float] = defaultdict(float)
_FILE_TESTS: defaultdict[str, set[str]] = defaultdict(set)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum every phase's duration per test file (under pytest-xdist the controller sees
    every worker's reports here)."""
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] += report.duration
    _FILE_TESTS[path].add(report.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """With --durations-per-file N: the N test files with the most summed test time."""
    n = config.getoption("--durations-per-file")
    if n is None or os.environ.get("PYTEST_XDIST_WORKER") or not _FILE_SECONDS:
        return
    ranked = sorted(_FILE_SECONDS.items(), key=lambda kv: kv[1], reverse=True)
    shown = ranked if n == 0 else ranked[:n]
    terminalreporter.write_sep("=", f"slowest {len(shown)} test files (summed test time)")
    for path, seconds in shown:
        terminalreporter.write_line(f"{seconds:8.2f}s {len(_FILE_TESTS[path]):4d} tests  {path}")
    terminalreporter.write_line(f"{sum(_FILE_SECONDS.values()):8.2f}s in all {len(ranked)} files")


def pytest_configure(config: pytest.Config) -> None:
    for name in ("BENCHMAKER_MAX_LOOP_LAG_MS", "BENCHMAKER_MAX_SCHEDULE_LAG_MS"):
        os.environ.setdefault(name, HOST_LOAD_LIMIT_MS)
    # A Prefect server's first start migrates a new database: Prefect's 20 s (the CLI's own
    # 90 s) ran out at load 18 on this 2-core host. For the temporary servers the suite
    # still starts (tests that ask for BENCHMAKER_PREFECT_SERVER=ephemeral).
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_S)
    # Each test process (each pytest-xdist worker; `main` without xdist) has a PREFECT_HOME
    # of its own, kept between sessions so that its database's migrations run once, and
    # held by one session at a time (two sessions at once take gw0 and gw0-2): its local
    # Prefect server (`prefect_server` below) serves this session alone, and no session
    # stops a server another one uses. The controller of xdist workers runs no test.
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        base = Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser() / "pytest-workers"
        home = _session_home(base, os.environ.get("PYTEST_XDIST_WORKER") or "main")
        os.environ["PREFECT_HOME"] = str(home)
    # A suite started in the background by a shell without job control (`nohup make
    # test &`, a script's `cmd &`) inherits SIGINT ignored and hands that to every child
    # it starts, so the tests that stop a command with SIGINT would wait out their
    # timeouts. A handler, unlike SIG_IGN, is reset to the default in an exec'd child.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_HOME_LOCKS: list[IO[Any]] = []  # held open (flock) until this process exits


def _session_home(base: Path, name: str) -> Path:
    """`base`/NAME, else NAME-2, NAME-3, ...: the first whose `session.lock` no other live
    session holds (it is released when this process exits, SIGKILL included)."""
    for k in itertools.count(1):
        home = base / (name if k == 1 else f"{name}-{k}")
        home.mkdir(mode=0o700, parents=True, exist_ok=True)  # Prefect makes only the last level
        fh = open(home / "session.lock", "a")  # held until this process exits
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        _HOME_LOCKS.append(fh)
        return home
    raise AssertionError("unreachable")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the local Prefect server of this process's PREFECT_HOME if one still runs: a CLI
    flow run of a test without the `prefect` marker may have started it."""
    if _HOME_LOCKS:
        from benchmaker.recipes import prefect_server as ps

        ps.stop_server(ps.prefect_home(), grace_s=5)


def pytest_unconfigure(config: pytest.Config) -> None:
    for fh in _HOME_LOCKS:
        fh.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that runs a real Prefect flow (marker `prefect`) is also `slow`: a flow
    run starts a Prefect server or harness and takes seconds even on a quiet host, so
    `make test-quick` (`-m "not slow"`) leaves them out."""
    for item in items:
        if item.get_closest_marker("prefect") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers collect; the controller deals out in their order
        items[:] = _longest_first(items)


def _longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The test files marked `long` (minutes: e.g. one shared Prefect stack) first, then
    the files with a `slow` test, then the rest; in collection order within each tier
    and each file kept whole. pytest-xdist (`--dist loadfile --no-loadscope-reorder`)
    hands out files in this order, so the long units start at once instead of at the
    end of one worker's queue while the others sit idle."""
    tier: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        rank = 0 if item.get_closest_marker("long") else 1 if item.get_closest_marker("slow") else 2
        tier[path] = min(tier.get(path, 2), rank)
    return sorted(items, key=lambda item: tier[item.nodeid.split("::", 1)[0]])


def pytest_report_header(config: pytest.Config) -> str:
    return "benchmaker host-load limits: loop lag p99 <= {} ms, schedule lag p99 <= {} ms (tests/conftest.py)".format(
        os.environ["BENCHMAKER_MAX_LOOP_LAG_MS"], os.environ["BENCHMAKER_MAX_SCHEDULE_LAG_MS"]
    )


@pytest.fixture(autouse=True)
def _no_host_calibration(tmp_path_factory, monkeypatch):
    """Point BENCHMAKER_CALIBRATION at a file that does not exist (tests that calibrate
    set their own path), so a developer's ~/.cache calibration never leaks into runs."""
    monkeypatch.setenv("BENCHMAKER_CALIBRATION", str(tmp_path_factory.getbasetemp() / "no-calibration.json"))
    # CLI flow runs in tests use this process's local Prefect server (`prefect_server`);
    # the tests of that server's start and stop use PREFECT_HOMEs of their own.
    monkeypatch.setenv("BENCHMAKER_PREFECT_SERVER", "reuse")


@pytest.fixture(scope="session")
def process_reaper() -> Iterator[Reaper]:
    """This test process's reaper (tests/reaper.py): a process group given to its `watch`
    is killed when the process ends, also when it is SIGKILLed."""
    reaper = Reaper()
    yield reaper
    reaper.close()


@pytest.fixture(scope="session")
def prefect_server(process_reaper: Reaper) -> Iterator[Any]:
    """The local Prefect server of this process's PREFECT_HOME (pytest_configure), as the
    CLI starts and reuses it (recipes/prefect_server.py `ensure_server`: authenticated,
    loopback), started once for the session instead of a temporary server in every CLI
    flow run (10-40 s each); stopped at the session's end, or by the reaper. Yields its
    ServerState."""
    from benchmaker.recipes import prefect_server as ps

    home = ps.prefect_home()
    state = ps.ensure_server(home, say=lambda message: None)
    process_reaper.watch(state.pid)
    yield state
    ps.stop_server(home, grace_s=5)
    process_reaper.forget(state.pid)


@pytest.fixture(autouse=True)
def _prefect_server_for_flow_tests(request: pytest.FixtureRequest) -> None:
    """Start the session's `prefect_server` before the first test that runs a real Prefect
    flow (marker `prefect`), so that no CLI run in a test starts it (nor says so)."""
    if request.node.get_closest_marker("prefect") is not None and "prefect_harness" not in request.fixturenames:
        request.getfixturevalue("prefect_server")


@pytest.fixture(scope="session")
def _session_local_cluster():
    """A distributed.LocalCluster of two worker processes with one thread each (each
    shard gets a process, and a core, of its own). Skips without the `dask` extra."""
    pytest.importorskip("prefect_dask", reason="prefect-dask (the `dask` extra) is not installed")
    from distributed import LocalCluster

    # dashboard on a free port: the default 8787 is taken when two test sessions run at once (its
    # fallback warning would fail the fixture)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        yield cluster


@pytest.fixture
def local_cluster(_session_local_cluster):
    """The session's LocalCluster (above) for one test. The DaskTaskRunner's clients
    leave sockets for the garbage collector: they are collected right after the test
    that made them, where their ResourceWarnings are not errors, instead of at whatever
    later test the collector happens to run in (which then failed on an unraisable
    ResourceWarning that was not its own)."""
    yield _session_local_cluster
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
