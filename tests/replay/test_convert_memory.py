"""Conversion memory grows with the largest session, not with the file: a JSONL of many
sessions converts holding its bytes and about one session more (the unit's lines go to
the output as they are made; the file is never parsed nor translated whole).
benchmarks/convert_memory.py measures the same at scale."""

from __future__ import annotations

from pathlib import Path

from tests.replay.convert_memory import convert_traced, session_line


def _peak_beyond_file(src: Path, out: Path) -> int:
    report, peak = convert_traced(src, out)
    assert report.trajectories == src.read_bytes().count(b"\n")
    return peak - src.stat().st_size


def test_memory_beyond_the_files_bytes_does_not_grow_with_its_sessions(tmp_path: Path) -> None:
    few, many = tmp_path / "few.jsonl", tmp_path / "many.jsonl"
    few.write_bytes(b"".join(session_line(k) for k in range(10)))  # ~0.2 MB
    many.write_bytes(b"".join(session_line(k) for k in range(150)))  # ~3.3 MB
    beyond_few = _peak_beyond_file(few, tmp_path / "few.out.jsonl")
    beyond_many = _peak_beyond_file(many, tmp_path / "many.out.jsonl")
    # held before: every converted line of the file (~2.5x its size) and a whole-file parse
    # (~12x): 40 MB and more here; now the same few MiB (orjson_safe's chunk, one session)
    assert beyond_many < beyond_few + (4 << 20), (beyond_few, beyond_many)
