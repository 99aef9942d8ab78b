"""convert_paths in worker processes gives exactly what one process
gives: the output bytes, the report, the progress events, the errors (class, text,
path/line/field), the lenient counts, and no file at `out` on an error; the workers'
part files are joined (also by read/write where copy_file_range is refused) and
removed, and the parent's own first units fit in between. Ctrl-C and SIGTERM stop the
workers and remove the temporary and part files; the workers exit when their parent is
killed, removing their part files.

Inputs: the public recordings of tests/data/corpus, the cases of tests/data/cases/logs,
the converter fixtures (a harbor job with its trial directories among them), and the
real recordings of ../shared/data/real when present (their two OpenAI chunk captures
match no log format and its predictions file is a companion file: the walked directory
is an error unless lenient)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import benchmaker.trajectories.convert as convert_mod
from benchmaker.trajectories.convert import WORKERS_ENV, ConvertProgress, convert_paths
from benchmaker.trajectories.errors import ConvertError, UnreadableFilesError

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
FIXTURES = REPO / "tests" / "replay" / "fixtures"
REAL = REPO / ".." / "shared" / "data" / "real"
REAL_PI = REAL / "pi-session-v1-large.jsonl"

needs_real = pytest.mark.skipif(not REAL_PI.exists(), reason="../shared/data/real is absent")


@pytest.fixture(autouse=True)
def every_unit_in_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent converts no unit itself while its workers start (on these small inputs
    it would convert them all): every test below goes through the workers unless it
    turns that back on."""
    monkeypatch.setattr(convert_mod, "_CONVERT_WHILE_POOL_STARTS", False)


def counting_clock() -> Callable[[], float]:
    """A clock that reads 0.0, 1.0, 2.0, ...: the same events need the same reads."""
    reads = iter(range(10**6))
    return lambda: float(next(reads))


def run(paths: list[Path], out: Path | None, workers: int, **kw: Any) -> dict[str, Any]:
    """Everything a caller can observe of one conversion: the output's bytes, the report
    (without `out` and `workers*`), the progress events, or the error's class, text and fields,
    and what is left in out's directory."""
    events: list[ConvertProgress] = []
    seen: dict[str, Any] = {}
    try:
        report = convert_paths(paths, out, workers=workers, progress=events.append, clock=counting_clock(), **kw)
    except ConvertError as exc:
        seen["error"] = (type(exc).__name__, str(exc), exc.path, exc.line, exc.field, exc.problem)
        if isinstance(exc, UnreadableFilesError):
            seen["errors"] = [(type(e).__name__, str(e), e.path, e.line, e.field) for e in exc.errors]
    else:
        assert report.workers == workers
        assert (report.workers_cpu_s > 0) == (workers > 1)
        assert report.workers_units == (len(report.files) if workers > 1 else 0)  # every unit (fixture)
        seen["report"] = {k: v for k, v in report.to_dict().items() if k != "out" and not k.startswith("workers")}
    seen["events"] = events
    if out is not None:
        seen["left"] = sorted(p.name for p in out.parent.iterdir())
        seen["bytes"] = out.read_bytes() if out.exists() else None
    return seen


def both(paths: list[Path], tmp_path: Path, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(1 process, 2 workers) runs of the same conversion, each into its own directory."""
    (tmp_path / "serial").mkdir()
    (tmp_path / "parallel").mkdir()
    serial = run(paths, tmp_path / "serial" / "out.jsonl", 1, **kw)
    parallel = run(paths, tmp_path / "parallel" / "out.jsonl", 2, **kw)
    return serial, parallel


def pi_sessions(d: Path, n: int) -> list[Path]:
    """`n` copies of the real pi session, each cut at a different length (a unit each)."""
    lines = REAL_PI.read_bytes().splitlines(keepends=True)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(n):
        path = d / f"session-{k:02d}.jsonl"
        path.write_bytes(b"".join(lines[: len(lines) * (k + 1) // n]))
        paths.append(path)
    return paths


def test_public_recordings_cases_and_fixtures_give_the_same_bytes_report_and_events(tmp_path: Path) -> None:
    paths = [DATA / "corpus", DATA / "cases" / "logs", FIXTURES]
    serial, parallel = both(paths, tmp_path)
    assert parallel == serial
    assert serial["report"]["trajectories"] == 6 + 5 + 8  # the three directories' counts
    assert serial["report"]["skipped"]["harbor_job_file"] == 1  # the harbor job's result.json
    assert len(serial["events"]) == 1 + len(serial["report"]["files"]) + 1  # start, each unit, finished
    assert serial["left"] == ["out.jsonl"]


@needs_real
def test_real_pi_sessions_give_the_same_bytes(tmp_path: Path) -> None:
    paths = pi_sessions(tmp_path / "logs", 9)
    serial, parallel = both(paths, tmp_path)
    assert parallel == serial
    assert serial["report"]["trajectories"] == 9
    assert serial["bytes"].count(b"\n") == 9


@needs_real
def test_real_recordings_directory_fails_the_same_way_and_leaves_nothing(tmp_path: Path) -> None:
    serial, parallel = both([REAL], tmp_path)
    assert parallel == serial
    assert serial["error"][0] == "UnreadableFilesError"
    assert [e[1].rsplit("/", 1)[1] for e in serial["errors"]] == [
        "deepseek-v4-flash-toolcall.chunks.jsonl: content matches no log format",
        "openai-gpt4o-toolcall.chunks.jsonl: content matches no log format",
    ]
    assert serial["left"] == [] and serial["bytes"] is None
    assert serial["events"][-1].finished and serial["events"][-1].files_done == 7  # every unit was tried


@needs_real
def test_real_recordings_lenient_counts_are_the_same(tmp_path: Path) -> None:
    serial, parallel = both([REAL], tmp_path, lenient=True)
    assert parallel == serial
    assert serial["report"]["trajectories"] == 4
    assert serial["report"]["skipped"]["unrecognized_file"] == 2  # the two chunk captures
    assert serial["report"]["skipped"]["predictions"] == 1  # all_preds.jsonl


def bad_and_good(d: Path) -> list[Path]:
    """Four good logs and two bad ones (a truncated JSONL line, a bad field) in `d`."""
    d.mkdir()
    for src in sorted((DATA / "corpus").iterdir())[:4]:
        shutil.copy(src, d / src.name)
    (d / "b-truncated.jsonl").write_text('{"type":"session","version":3,"id":"s"}\n{"type":"mess', encoding="utf-8")
    (d / "c-bad-field.jsonl").write_text('{"messages": [{"role": "user", "content": 5}]}\n', encoding="utf-8")
    return [d]


def test_bad_files_among_good_ones_raise_the_same_error_and_leave_out_untouched(tmp_path: Path) -> None:
    paths = bad_and_good(tmp_path / "logs")
    (tmp_path / "serial").mkdir()
    (tmp_path / "parallel").mkdir()
    for d in ("serial", "parallel"):
        (tmp_path / d / "out.jsonl").write_bytes(b"an earlier conversion\n")
    serial = run(paths, tmp_path / "serial" / "out.jsonl", 1)
    parallel = run(paths, tmp_path / "parallel" / "out.jsonl", 2)
    assert parallel == serial
    assert serial["error"][1].startswith("2 of 6 log inputs could not be converted (--lenient skips them):\n  ")
    assert [e[0] for e in serial["errors"]] == ["ConvertError", "ConvertError"]
    assert serial["bytes"] == b"an earlier conversion\n" and serial["left"] == ["out.jsonl"]


def test_one_bad_file_raises_its_own_error_with_its_line_and_field(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    bad_and_good(d)
    (d / "b-truncated.jsonl").unlink()
    serial, parallel = both([d], tmp_path)
    assert parallel == serial
    name, text, path, line, fld, problem = serial["error"]
    assert (name, Path(path).name, line) == ("ConvertError", "c-bad-field.jsonl", 1)
    assert text.startswith(f"{path}:1: ")


def test_bad_files_lenient_counts_are_the_same(tmp_path: Path) -> None:
    serial, parallel = both(bad_and_good(tmp_path / "logs"), tmp_path, lenient=True)
    assert parallel == serial
    skipped = serial["report"]["skipped"]
    # the truncated session: its last line skipped, then no entries (a file error); the
    # message row with a bad content: a bad row, leaving zero trajectories (no error)
    assert (skipped["truncated_last_line"], skipped["file_error"], skipped["bad_row"]) == (1, 1, 1)
    assert serial["report"]["trajectories"] == 4


def parts_left(d: Path) -> list[str]:
    """The part files workers write beside the temporary output (`.out.jsonl.XXXX.tmp.K`)."""
    return sorted(p.name for p in d.iterdir() if ".tmp." in p.name)


def test_the_parent_converts_the_first_units_while_its_workers_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    monkeypatch.setattr(convert_mod, "_CONVERT_WHILE_POOL_STARTS", True)
    paths = [DATA / "corpus", DATA / "cases" / "logs", FIXTURES]
    converted_here: list[str] = []
    real_convert_unit, real_start_workers = convert_mod._convert_unit, convert_mod._start_workers
    first_unit_done = threading.Event()
    started: list[threading.Thread] = []

    def convert_unit(unit: Path, *args: Any) -> Any:
        converted_here.append(unit.name)
        return real_convert_unit(unit, *args)

    def start_workers(pool: Any, n_workers: int) -> None:
        # the workers are up once the parent has converted its first unit, not before
        started.append(threading.current_thread())
        assert first_unit_done.wait(60)
        real_start_workers(pool, n_workers)

    def progress(ev: ConvertProgress) -> None:
        if ev.files_done == 1:  # the parent converted unit 0 while the workers started
            first_unit_done.set()
            started[0].join(60)

    (tmp_path / "serial").mkdir()
    (tmp_path / "parallel").mkdir()
    serial = run(paths, tmp_path / "serial" / "out.jsonl", 1)
    monkeypatch.setattr(convert_mod, "_convert_unit", convert_unit)
    monkeypatch.setattr(convert_mod, "_start_workers", start_workers)
    out = tmp_path / "parallel" / "out.jsonl"
    report = convert_paths(paths, out, workers=2, progress=progress)
    assert converted_here == [Path(serial["report"]["files"][0]["path"]).name]  # the other 18 in the workers
    assert report.workers == 2 and report.workers_cpu_s > 0 and report.workers_units == 18
    assert out.read_bytes() == serial["bytes"]
    assert {k: v for k, v in report.to_dict().items() if k != "out" and not k.startswith("workers")} == serial["report"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.jsonl"]


def test_parts_are_joined_by_read_and_write_where_copy_file_range_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    calls: list[int] = []

    def refuse(src: int, dst: int, count: int, *args: Any) -> int:
        calls.append(count)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    monkeypatch.setattr(convert_mod, "_copy_file_range_works", True)
    paths = [DATA / "corpus", FIXTURES]
    serial, parallel = both(paths, tmp_path)
    assert parallel == serial
    assert len(calls) == 1  # refused once, then not tried again
    assert convert_mod._copy_file_range_works is False


def test_check_only_converts_in_workers_too(tmp_path: Path) -> None:
    paths = [DATA / "corpus", FIXTURES]
    assert run(paths, None, 2) == run(paths, None, 1)


def test_automatic_mode_uses_every_usable_cpu_above_the_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [DATA / "corpus", FIXTURES]  # 6 + 8 units, well under PARALLEL_MIN_BYTES
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    assert convert_paths(paths, None, progress=None).workers == 1
    monkeypatch.setattr(convert_mod, "PARALLEL_MIN_BYTES", 0)
    cpus = len(os.sched_getaffinity(0))
    assert convert_paths(paths, None, progress=None).workers == (1 if cpus < 2 else min(cpus, 8))


def test_environment_variable_sets_the_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [DATA / "corpus"]  # 6 units
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert convert_paths(paths, None, progress=None).workers == 3
    assert convert_paths(paths, None, progress=None, workers=1).workers == 1  # the argument wins
    monkeypatch.setenv(WORKERS_ENV, "64")
    assert convert_paths(paths, None, progress=None).workers == 6  # no more than units
    monkeypatch.setenv(WORKERS_ENV, "auto")
    assert convert_paths(paths, None, progress=None).workers == 1  # 6 small files: not worth a pool
    monkeypatch.setenv(WORKERS_ENV, "two")
    with pytest.raises(ConvertError) as err:
        convert_paths(paths, None, progress=None)
    assert (
        str(err.value) == 'BENCHMAKER_CONVERT_WORKERS: expected a number of worker processes >= 1 or auto (got "two")'
    )
    with pytest.raises(ValueError, match=r"^workers: expected None or >= 1 \(got 0\)$"):
        convert_paths(paths, None, progress=None, workers=0)


# --- signals: a child converts with 2 workers and waits in its first progress event

_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from benchmaker.trajectories.convert import convert_paths

def wait_in_first_event(ev):
    if ev.files_done == 1:
        print("converting", flush=True)
        time.sleep(120)  # the signal arrives here, with the workers running

if __name__ == "__main__":
    import benchmaker.trajectories.convert
    benchmaker.trajectories.convert._CONVERT_WHILE_POOL_STARTS = False  # every unit in the workers: part files exist
    convert_paths([Path(sys.argv[2])], Path(sys.argv[3]), workers=2, progress=wait_in_first_event)
"""


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (/proc/*/stat parent ids)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    found, todo = [], [pid]
    while todo:
        for kid in children.get(todo.pop(), []):
            found.append(kid)
            todo.append(kid)
    return found


def running(pids: list[int]) -> list[int]:
    """Those of `pids` that exist and are not zombies."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


@pytest.mark.slow  # a child interpreter and its forkserver (~1 s each)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signal_stops_the_workers_and_removes_the_temporary_file(sig: signal.Signals, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for src in [*sorted((DATA / "corpus").iterdir()), *sorted((DATA / "cases" / "logs").iterdir())]:
        shutil.copy(src, logs / src.name)
    out = tmp_path / "out" / "trajectories.jsonl"
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(REPO), str(logs), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "converting\n"
            helpers = descendants(child.pid)
            assert len(helpers) >= 3  # the forkserver, its 2 workers (and the resource tracker)
            names = sorted(p.name for p in out.parent.iterdir())
            assert names[0].startswith(".trajectories.jsonl.") and names[0].endswith(".tmp")  # the temporary file
            deadline = time.monotonic() + 60
            while not parts_left(out.parent):  # the workers write the next units' part files
                assert time.monotonic() < deadline
                time.sleep(0.01)
            child.send_signal(sig)
            assert child.wait(timeout=60) == -sig  # ends by the signal, as it would without workers
        finally:
            if child.poll() is None:
                child.kill()
    deadline = time.monotonic() + 30
    while running(helpers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running(helpers) == []  # no worker left behind, killed parent included
    left = sorted(p.name for p in out.parent.iterdir())
    if sig == signal.SIGKILL:
        assert len(left) == 1 and left[0].endswith(".tmp")  # the workers removed their part files; nothing runs
        # in a SIGKILLed process to remove its temporary file
    else:
        assert left == []


def test_two_copies_of_one_session_are_refused_naming_both_files_in_workers_too(tmp_path: Path) -> None:
    example = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        shutil.copyfile(example, logs / name)
    serial, parallel = both([logs], tmp_path)
    assert serial == parallel
    name, text, path, *_ = serial["error"]
    assert (name, path) == ("ConvertError", str(logs / "b.jsonl"))
    assert text.startswith(f"{logs / 'b.jsonl'}: holds the same session as {logs / 'a.jsonl'} (trajectory_id ")
    assert serial["bytes"] is None and serial["left"] == []  # nothing written


def test_a_copy_of_a_session_is_skipped_and_counted_when_lenient(tmp_path: Path) -> None:
    example = REPO / "examples" / "recordings" / "tiny-task.pi.jsonl"
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        shutil.copyfile(example, logs / name)
    alone = convert_paths([logs / "a.jsonl"], tmp_path / "alone.jsonl", progress=None)
    serial, parallel = both([logs], tmp_path, lenient=True)
    assert serial == parallel
    assert serial["bytes"] == (tmp_path / "alone.jsonl").read_bytes()  # the first copy only
    report = serial["report"]
    assert report["trajectories"] == alone.trajectories == 1
    assert report["skipped"]["duplicate_session"] == 2
    assert [f["trajectories"] for f in report["files"]] == [1, 0, 0]
    assert serial["left"] == ["out.jsonl"]  # no part file left
