"""benchmaker.engine.exchange: files through a path or an fsspec URL, both ways, and the
clock against the storage (local disk: one clock; memory: microsecond stamps)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmaker.engine.exchange import Exchange, _mtime_ns


@pytest.mark.parametrize("kind", ["path", "file-url", "memory"])
def test_a_directory_goes_up_and_comes_back_byte_equal(tmp_path: Path, kind: str) -> None:
    url = {"path": str(tmp_path / "x"), "file-url": f"file://{tmp_path}/x", "memory": f"memory://{tmp_path.name}"}[kind]
    ex = Exchange(url)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.jsonl").write_bytes(b'{"a": 1}\n')
    (src / "sub" / "b.json").write_bytes(b"[]")
    assert ex.put_dir(src, "run/points/c2/_shards/w0") == [
        "run/points/c2/_shards/w0/a.jsonl",
        "run/points/c2/_shards/w0/sub/b.json",
    ]
    got = ex.get_dir("run/points/c2/_shards", tmp_path / "dst")
    assert got == [tmp_path / "dst" / "w0" / "a.jsonl", tmp_path / "dst" / "w0" / "sub" / "b.json"]
    assert (tmp_path / "dst" / "w0" / "a.jsonl").read_bytes() == b'{"a": 1}\n'
    ex.put_file(src / "a.jsonl", "run/trajectories.jsonl")
    assert ex.get_file("run/trajectories.jsonl", tmp_path / "t" / "t.jsonl").read_bytes() == b'{"a": 1}\n'
    ex.remove("run")
    assert ex.get_dir("run", tmp_path / "none") == []
    ex.remove("run")  # absent: nothing to do
    with pytest.raises(FileNotFoundError):
        ex.get_file("run/trajectories.jsonl", tmp_path / "t2")


def test_clock_offset_against_a_local_disk_is_within_a_tick(tmp_path: Path) -> None:
    c = Exchange(str(tmp_path)).clock_offset("k")
    assert c["reference"] == "storage mtime (file)"
    assert abs(c["wall_offset_ns"]) < 10_000_000, c  # one clock: below the coarse-clock tick
    assert list((tmp_path / "k").iterdir()) == []  # the probe is removed


def test_mtime_of_each_filesystem_flavour() -> None:
    assert _mtime_ns({"mtime": 1.5}) == 1_500_000_000
    t = datetime(2026, 1, 1, tzinfo=UTC)
    assert _mtime_ns({"LastModified": t}) == 1_767_225_600_000_000_000  # S3: a datetime
    assert _mtime_ns({"updated": "2026-01-01T00:00:00.250Z"}) == 1_767_225_600_250_000_000  # GCS: ISO text
    assert _mtime_ns({"size": 1}) is None


def test_relative_paths_are_made_absolute_and_passwords_refused(tmp_path: Path, monkeypatch) -> None:
    from benchmaker.engine.exchange import absolute_exchange

    monkeypatch.chdir(tmp_path)
    assert absolute_exchange("ex") == str(tmp_path / "ex")
    assert absolute_exchange("file://ex/sub") == f"file://{tmp_path}/ex/sub"
    assert absolute_exchange("file:///abs/x") == "file:///abs/x"
    assert absolute_exchange("s3://bucket/x") == "s3://bucket/x"
    with pytest.raises(ValueError, match=r"exchange: a password in the URL is refused .*\(got s3://\.\.\.\)"):
        Exchange("s3://key:secret@bucket/x")
