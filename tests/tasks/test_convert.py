"""tasks.convert: the content digest that keys the conversion cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.convert import converted_path, logs_sha256


def test_digest_follows_content_not_mtime(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "a.jsonl").write_text("one\n")
    (d / "sub").mkdir()
    (d / "sub" / "b.traj").write_text("two\n")
    first = logs_sha256([d])
    (d / "a.jsonl").write_text("one\n")  # rewritten, same bytes
    assert logs_sha256([d]) == first
    (d / "sub" / "b.traj").write_text("two!\n")
    assert logs_sha256([d]) != first
    assert len(first) == 64


def test_digest_of_missing_path_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        logs_sha256([tmp_path / "nope.jsonl"])


def test_converted_path_is_content_addressed(tmp_path: Path) -> None:
    assert converted_path(tmp_path, "ab" * 32, 3) == tmp_path / "convert" / ("ab" * 8 + "-v3") / "trajectories.jsonl"
