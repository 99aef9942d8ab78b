"""Records parsed for format detection are not parsed again:
keeping_first_records keeps what first_jsonl_objects parsed with orjson for the very
bytes object converted (and checks those bytes with orjson_safe once, not line by line),
and iter_jsonl yields those values, once, instead of parsing their lines again; the
output is unchanged."""

from __future__ import annotations

from pathlib import Path

import orjson

from benchmaker.trajectories.convert import _detect, convert_paths
from benchmaker.trajectories.converters.json_reading import first_jsonl_objects, iter_jsonl, keeping_first_records
from benchmaker.trajectories.converters.source_file import FileContext

DATA = Path(__file__).resolve().parents[1] / "data"


def _jsonl(*records: object) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def test_detection_keeps_orjson_records_by_line_for_that_bytes_object_only() -> None:
    data = (
        _jsonl({"type": "session", "id": "s"}, {"a": 1})
        + b'\n  \nnot json\n{"big": 12345678901234567890123}\n'
        + _jsonl({"b": [2]})
    )
    with keeping_first_records(data) as first:
        first_jsonl_objects(bytes(bytearray(data)))  # equal bytes, another object: not kept
        assert first.records == {} and first.safe is None
        objects = first_jsonl_objects(data)
    kept = first.records
    # lines 3-4 blank, 5 not JSON, 6 holds a number orjson cannot keep exact: json's, not kept
    assert kept == {1: {"type": "session", "id": "s"}, 2: {"a": 1}, 7: {"b": [2]}}
    assert first.safe is False
    assert objects == [kept[1], kept[2], {"big": 12345678901234567890123}, kept[7]]
    assert objects[0] is kept[1]
    first_jsonl_objects(data)  # outside the block: nothing kept
    assert len(kept) == 3


def test_bytes_safe_as_a_whole_are_checked_once() -> None:
    import benchmaker.trajectories.converters.json_reading as common

    data = _jsonl(*({"n": n, "s": "x" * 30} for n in range(60)))
    calls: list[int] = []
    real = common.orjson_safe
    try:
        common.orjson_safe = lambda b: calls.append(len(b)) or real(b)
        with keeping_first_records(data) as first:
            objects = first_jsonl_objects(data)
        assert calls == [len(data)] and first.safe is True and len(objects) == 50
        calls.clear()
        assert objects == first_jsonl_objects(data)  # outside: line by line, the same records
        assert len(calls) == 50
    finally:
        common.orjson_safe = real


def test_iter_jsonl_takes_the_kept_records_once_and_parses_the_rest() -> None:
    data = _jsonl({"n": 1}, {"n": 2}, {"n": 3})
    fmt, first = _detect(data)
    assert set(first.records) == {1, 2, 3} and first.safe is True
    kept = dict(first.records)
    ctx = FileContext("f.jsonl", "0" * 64, data, first_records=first)
    got = list(iter_jsonl(ctx))
    assert got == [(1, {"n": 1}), (2, {"n": 2}), (3, {"n": 3})]
    assert all(value is kept[line] for line, value in got)  # not parsed again
    assert ctx.first_records is None
    again = list(iter_jsonl(ctx))  # a second pass parses its own
    assert again == got and all(a[1] is not b[1] for a, b in zip(again, got, strict=False))


def test_converted_bytes_are_unchanged(tmp_path: Path, monkeypatch) -> None:
    import benchmaker.trajectories.convert as convert_mod

    inputs = sorted(p for p in (DATA / "corpus").iterdir() if p.suffix == ".jsonl")
    convert_paths(inputs, tmp_path / "kept.jsonl")
    monkeypatch.setattr(convert_mod, "keeping_first_records", _keeping_nothing)
    convert_paths(inputs, tmp_path / "parsed.jsonl")
    assert (tmp_path / "kept.jsonl").read_bytes() == (tmp_path / "parsed.jsonl").read_bytes()


class _keeping_nothing:
    def __init__(self, data: bytes) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
