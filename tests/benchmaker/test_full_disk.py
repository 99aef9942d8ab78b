"""A full disk under the request trace (--record-trace) and monitor.jsonl: the run ends
with one line naming the file and what it kept (exit 1), the file holds exactly the
whole lines it reports, and the samples and summary are complete. The disk fills by a
fake file (bundle.JsonlAppender's `open` swapped for one whose writes raise ENOSPC past
a byte budget), since no small tmpfs can be mounted here."""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path
from typing import Any

import pytest

import benchmaker.engine.bundle as bundle
from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import RunFailed
from benchmaker.engine.monitors import FunctionMonitor
from benchmaker.engine.runner import BenchRunner
from benchmaker.recipes.cli import main
from benchmaker.testing.instant_server import start_instant_server
from benchmaker.workloads.http import HttpWorkload


class _FullDisk(io.FileIO):
    """A file that takes `budget` bytes, then refuses every write with ENOSPC."""

    def __init__(self, path: str | int, mode: str, budget: int) -> None:
        super().__init__(path, mode)
        self.budget = budget

    def write(self, data: Any) -> int:
        n = len(memoryview(data))
        if n > self.budget:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.budget -= n
        return super().write(data)


def _fill_disk_at(monkeypatch: pytest.MonkeyPatch, name: str, budget: int) -> None:
    """The file called `name` that a JsonlAppender opens fills after `budget` bytes."""

    def fake_open(path: Any, mode: str = "r", buffering: int = -1, **kw: Any) -> Any:
        if Path(path).name == name:
            return io.BufferedWriter(_FullDisk(str(path), mode.replace("b", ""), budget), buffering)
        return open(path, mode, buffering, **kw)

    monkeypatch.setattr(bundle, "open", fake_open, raising=False)


def _lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n")  # whole lines only
    return [json.loads(line) for line in data.splitlines()]


def test_a_full_disk_under_the_trace_keeps_its_whole_lines_and_says_where(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # ~280 requests of ~350 bytes; sent over 1.2 s, flushed every 0.2 s: some whole flushes fit
    _fill_disk_at(monkeypatch, "trace.jsonl", 100_000)
    with start_instant_server(sse_chunks=5) as srv:
        argv = ["llm", "--url", srv.url + "/v1/chat/completions", "--model", "m", "--rate", "constant:500"]
        code = main([*argv, "--max-requests", "600", "--record-trace", "trace.jsonl", "--out-dir", "runs"])
    out, err = capsys.readouterr()
    [run] = list((tmp_path / "runs").iterdir())
    kept = _lines(tmp_path / "trace.jsonl")
    assert code == 1, err
    assert "Traceback" not in out + err
    assert err == (
        f"benchmaker: error: trace.jsonl: cannot write the request trace (No space left on device); the "
        f"{len(kept)} requests written before it are kept there, {600 - len(kept)} later ones are not; the "
        f"samples and summary are complete in {Path('runs') / run.name}\n"
    )
    assert len(kept) < 600 and [r["seq"] for r in kept] == list(range(len(kept)))
    assert len(_lines(run / "samples.jsonl")) == 600 and (run / "summary.json").is_file()


def test_a_full_disk_under_monitor_jsonl_keeps_its_whole_rows_and_says_where(tmp_path, monkeypatch):
    # the first sample's 10 rows (~90 bytes each) fit, the final one's do not: fails however fast the run
    _fill_disk_at(monkeypatch, "monitor.jsonl", 1_000)
    mon = FunctionMonitor(lambda: {f"probe_{i}": i for i in range(10)}, interval_s=0.01, name="probe")
    cfg = BenchConfig(load="closed:1", max_requests=200, out_dir=tmp_path, run_id="disk")
    with start_instant_server(sse_chunks=5) as srv:
        runner = BenchRunner(cfg, workload=HttpWorkload(srv.url + "/json"), monitors=[mon])
        with pytest.raises(RunFailed) as info:
            runner.run_sync()
    run = tmp_path / "disk"
    kept = _lines(run / "monitor.jsonl")
    assert len(kept) == 10 and {r["name"] for r in kept} == {f"probe_{i}" for i in range(10)}
    assert str(info.value).startswith(
        f"{run / 'monitor.jsonl'}: cannot write monitor rows (No space left on device); the "
        f"{len(kept)} rows written before it are kept there, "
    )
    assert str(info.value).endswith(f" later ones are not; the samples and summary are complete in {run}")
    assert len(_lines(run / "samples.jsonl")) == 200 and (run / "summary.json").is_file()


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_convert_on_a_full_disk_is_one_line_and_leaves_the_output_as_it_was(existing, tmp_path, monkeypatch, capsys):
    import os

    example = Path(__file__).resolve().parents[2] / "examples" / "recordings" / "tiny-task.pi.jsonl"
    out = tmp_path / "t.jsonl"
    if existing:
        out.write_bytes(b"kept\n")
    real_fdopen = os.fdopen

    def full_fdopen(fd: int, mode: str = "r", *args: Any, **kw: Any) -> Any:
        if mode == "wb":  # the temporary output: room for 1000 bytes
            return io.BufferedWriter(_FullDisk(fd, "w", 1000))
        return real_fdopen(fd, mode, *args, **kw)

    monkeypatch.setattr(os, "fdopen", full_fdopen)
    code = main(["convert", str(example), "-o", str(out)])
    monkeypatch.undo()
    out_text, err = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in out_text + err
    untouched = " (the file already there is untouched)" if existing else ""
    assert err == (
        f"benchmaker: error: {out}: cannot write the trajectories (No space left on device); nothing was "
        f"written there{untouched}\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == (["t.jsonl"] if existing else [])  # no temporary left
    assert not existing or out.read_bytes() == b"kept\n"
