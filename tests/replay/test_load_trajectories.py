"""benchmaker.trajectories.convert.load_trajectories (the whole-file read with garbage collection paused)
gives the models of read_trajectories (==, model_dump, model_dump_json) on the converter
fixtures and the real recordings (skipped when absent), raises the same one-line error at
a damaged line, and leaves the collector as it found it. benchmaker.tasks.sweep.point_trajectories
validates any file and reads it once while it is unchanged."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import orjson
import pytest

from benchmaker.tasks import sweep
from benchmaker.trajectories.convert import convert_paths, load_trajectories, read_trajectories
from benchmaker.trajectories.errors import TrajectoryFormatError
from benchmaker.trajectories.trajectory import Trajectory

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
FIXTURE_INPUTS = [
    DATA / "corpus",
    DATA / "written",
    DATA / "cases" / "logs",
    REPO / "tests" / "replay" / "fixtures",
    REPO / "examples" / "recordings",
]
REAL = REPO.parent / "shared" / "data" / "real"


def _same_reads(out: Path) -> list[Trajectory]:
    streamed = list(read_trajectories(out))
    loaded = load_trajectories(out)
    assert loaded == streamed
    assert [t.model_dump() for t in loaded] == [t.model_dump() for t in streamed]
    assert [t.model_dump_json() for t in loaded] == [t.model_dump_json() for t in streamed]
    return loaded


@pytest.fixture(scope="module")
def fixtures_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("load") / "t.jsonl"
    convert_paths(FIXTURE_INPUTS, out, lenient=True, progress=None)
    return out


def test_load_equals_read_on_every_fixture(fixtures_out: Path) -> None:
    trajs = _same_reads(fixtures_out)
    assert len(trajs) == len(fixtures_out.read_bytes().splitlines()) >= 20
    assert any(turn.context_edit is not None for t in trajs for turn in t.turns)


def test_load_equals_read_on_the_real_recordings(tmp_path: Path) -> None:
    if not REAL.is_dir():
        pytest.skip(f"real recordings absent: {REAL}")
    out = tmp_path / "t.jsonl"
    report = convert_paths([REAL], out, lenient=True, progress=None)
    assert sum(len(t.turns) for t in _same_reads(out)) == report.turns > 0


def _damaged(out: Path, line_no: int) -> Path:
    lines = out.read_bytes().splitlines()
    d = orjson.loads(lines[line_no - 1])
    d["turns"][0]["index"] = -1
    lines[line_no - 1] = orjson.dumps(d)
    bad = out.with_name("damaged.jsonl")
    bad.write_bytes(b"\n".join(lines) + b"\n")
    return bad


@pytest.mark.parametrize("gc_on", [True, False])
def test_a_damaged_line_raises_the_same_error_and_the_collector_is_restored(fixtures_out: Path, gc_on: bool) -> None:
    bad = _damaged(fixtures_out, 3)
    with pytest.raises(TrajectoryFormatError) as streamed:
        list(read_trajectories(bad))
    was = gc.isenabled()
    (gc.enable if gc_on else gc.disable)()
    try:
        with pytest.raises(TrajectoryFormatError) as loaded:
            load_trajectories(bad)
        assert gc.isenabled() is gc_on
        load_trajectories(fixtures_out)
        assert gc.isenabled() is gc_on
    finally:
        (gc.enable if was else gc.disable)()
    assert str(loaded.value) == str(streamed.value)
    assert str(loaded.value).startswith(f"{bad}:3: turns[0].index: ") and "\n" not in str(loaded.value)


def test_point_trajectories_validates_and_reads_a_file_once_while_unchanged(
    fixtures_out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []

    def spy(path: Path) -> list[Trajectory]:
        calls.append(Path(path))
        return load_trajectories(path)

    monkeypatch.setattr(sweep, "load_trajectories", spy)
    monkeypatch.setattr(sweep, "_kept", None)
    user = tmp_path / "trajectories.jsonl"
    user.write_bytes(fixtures_out.read_bytes())
    a = sweep.point_trajectories(user)
    b = sweep.point_trajectories(user)  # the next point of the run: not read again
    assert a == b == list(read_trajectories(user)) and a is not b
    assert calls == [user.resolve()]
    assert sweep.point_trajectories(fixtures_out) == a  # another file: read
    assert calls[1:] == [fixtures_out.resolve()]
    # the file changed in place is read again, and validated
    bad = _damaged(user, 2).read_bytes()
    user.write_bytes(bad)
    os.utime(user, ns=(1, 1))
    with pytest.raises(TrajectoryFormatError, match=rf"^{user.resolve()}:2: turns\[0\]\.index: "):
        sweep.point_trajectories(user)
    assert calls[2:] == [user.resolve()]
