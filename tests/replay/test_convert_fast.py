"""The fast conversion path writes exactly the bytes of the old one.

The old path is the fast one with each shortcut put back (tests patch them in):
`json.loads` for every line/document instead of orjson (`orjson_safe` false) and
`model_dump_json().encode()` instead of the serializer's bytes. Inputs: the public
recordings of tests/data/corpus, the cases of tests/data/cases/logs, the converter
fixtures, and the real pi session when it is present (../shared/data/real)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import benchmaker.trajectories.convert as convert_mod
from benchmaker.trajectories.convert import convert_paths
from benchmaker.trajectories.converters import json_reading
from benchmaker.trajectories.converters.json_reading import iter_jsonl, orjson_safe, read_json_document
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.errors import ConvertError
from benchmaker.trajectories.trajectory import Observation, Response, Timing, ToolCall, Usage

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL_PI = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real" / "pi-session-v1-large.jsonl"

INPUTS = sorted(
    [
        *(DATA / "corpus").iterdir(),
        *(DATA / "cases" / "logs").iterdir(),
        *(p for p in FIXTURES.iterdir() if p.suffix in (".jsonl", ".traj")),
    ]
)


def _old_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put every shortcut back: json parsing, model_dump_json."""
    monkeypatch.setattr(json_reading, "orjson_safe", lambda data: False)
    monkeypatch.setattr(convert_mod, "_to_json", lambda traj: traj.model_dump_json().encode("utf-8"))


def _both(paths: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    fast, old = tmp_path / "fast.jsonl", tmp_path / "old.jsonl"
    convert_paths(paths, fast)
    with monkeypatch.context() as m:
        _old_path(m)
        convert_paths(paths, old)
    return fast.read_bytes(), old.read_bytes()


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_fast_path_writes_the_old_bytes_for_each_fixture(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, old = _both([path], tmp_path, monkeypatch)
    assert fast == old
    assert fast.count(b"\n") >= 1


def test_fast_path_writes_the_old_bytes_for_all_fixtures_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, old = _both(INPUTS, tmp_path, monkeypatch)
    assert fast == old
    assert fast.count(b"\n") == sum(1 for _ in convert_mod.read_trajectories(tmp_path / "fast.jsonl"))


def test_fast_path_writes_the_old_bytes_for_the_real_pi_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not REAL_PI.exists():
        pytest.skip(f"{REAL_PI} absent")
    fast, old = _both([REAL_PI], tmp_path, monkeypatch)
    assert fast == old
    assert len(fast) > 900_000


def test_each_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        reads.append(self.name)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    convert_paths([DATA / "corpus"], tmp_path / "out.jsonl")
    names = sorted(p.name for p in (DATA / "corpus").iterdir())
    assert sorted(reads) == names


@pytest.mark.parametrize(
    ("data", "safe"),
    [
        (b'{"a": 1, "b": "12345678901234567890"}', True),  # digits inside a string
        (b'{"a": 0.12345678901234567890}', True),  # a fraction
        (b'{"a": 1234567890123456789}', False),
        (b'{"a":-12345678901234567890}', False),
        (b"[1,\n  12345678901234567890]", False),
        (b"12345678901234567890", False),
        (b'{"a": 123456789012345678}', True),  # 18 digits: orjson keeps it an int
        (b'{"a": 1}\n123456789012345678901234\n', False),  # a JSONL record that is a bare number
        (b'{"a": 1}\n  -123456789012345678901234', False),
        (b'{"a": 1} 123456789012345678901234', True),  # not a document orjson accepts: json decides
    ],
)
def test_orjson_safe_flags_numbers_of_19_digits_or_more(data: bytes, safe: bool) -> None:
    assert orjson_safe(data) is safe


def test_the_models_converters_build_validate_their_values() -> None:
    from pydantic import ValidationError

    # converted as before, or refused as before
    assert Timing(duration_ms=5).model_dump_json() == '{"ttft_ms":null,"duration_ms":5.0,"started_at":null}'
    with pytest.raises(ValidationError):
        Usage(prompt_tokens=-1)
    with pytest.raises(ValidationError):
        Response(finish_reason="done")
    with pytest.raises(ValidationError):
        Observation(content=None)
    with pytest.raises(ValidationError):
        ToolCall(id="c", name="bash", arguments_raw="{}", arguments=[1])


def _ctx(data: bytes, lenient: bool = False) -> FileContext:
    return FileContext("f.jsonl", "0" * 64, data, lenient)


def test_jsonl_values_are_the_json_modules_ones() -> None:
    lines = [
        b'{"n": 123456789012345678901234567890}',
        b'{"x": NaN, "y": Infinity}',
        b'{"s": "\\ud800"}',
        b'{"big": 1E400}',
        b'{"a": [1, 2.5, "\xc3\xa9"]}',
    ]
    got = list(iter_jsonl(_ctx(b"\n".join(lines) + b"\n")))
    assert [line for line, _ in got] == [1, 2, 3, 4, 5]
    assert got[0][1] == {"n": 123456789012345678901234567890} and type(got[0][1]["n"]) is int
    assert json.dumps(got[1][1]) == '{"x": NaN, "y": Infinity}'
    assert got[2][1] == {"s": "\ud800"}
    assert got[3][1] == {"big": float("inf")}
    assert got[4][1] == {"a": [1, 2.5, "é"]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a": 1}\n{"a": \n{"b": 2}\n', "f.jsonl:2: invalid JSON: Expecting value"),
        (b'{"a": 1}\n{"a": 2', "f.jsonl:2: truncated JSONL: the last line is incomplete"),
        (b'{"a": 1}\n{"a": "\xff"}\n', "f.jsonl:2: invalid UTF-8 at byte 7 of the line"),
        (b'\xef\xbb\xbf{"a": 1}\n', "f.jsonl:1: invalid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig)"),
    ],
)
def test_bad_lines_keep_their_one_line_errors(data: bytes, message: str) -> None:
    with pytest.raises(ConvertError) as err:
        list(iter_jsonl(_ctx(data)))
    assert str(err.value) == message


def test_documents_parse_as_json_does_and_keep_their_errors() -> None:
    assert read_json_document(_ctx(b'{"n": 123456789012345678901234567890, "f": 1.5}')) == {
        "n": 123456789012345678901234567890,
        "f": 1.5,
    }
    assert read_json_document(_ctx(b'{"x": NaN}'))["x"] != read_json_document(_ctx(b'{"x": NaN}'))["x"]
    with pytest.raises(ConvertError) as err:
        read_json_document(_ctx(b'{"a": [1,\n 2,\n'))
    assert str(err.value) == "f.jsonl:3: truncated JSON document"
    with pytest.raises(ConvertError) as err:
        read_json_document(_ctx(b'{"a": [1,\n 2 x]}'))
    assert str(err.value) == "f.jsonl:2: invalid JSON: Expecting ',' delimiter"


@pytest.mark.parametrize(
    "data",
    [
        *(p.read_bytes() for p in INPUTS if p.is_file()),
        b'{"a": 1}\n{"b": 2}\n',
        b"1\n2",
        b'{"a": 1}\n',
        b'{"a":\n 1}',
        b"[1,\n2]\n",
        b'\xef\xbb\xbf{"a": 1}\n{}',
        b'{"a": NaN}\n{}',
        b'{"a": 1}\n\xff',
        b'"x"\n"y"',
        b'{"a": "\xed\xa0\x80"}\n{}',
        b"{}\n\x0b",
    ],
)
def test_detection_skips_the_whole_document_parse_only_when_json_would_fail(data: bytes) -> None:
    """detect_bytes skips `json.loads` of the whole file (a JSONL log's first line is a
    whole document and more follows) only where json would raise anyway."""
    from benchmaker.trajectories.converters import _jsonl_with_more_lines

    stripped = data.strip()
    if stripped and _jsonl_with_more_lines(stripped):
        with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
            json.loads(stripped)


def test_pi_session_logs_are_told_by_their_first_line() -> None:
    from benchmaker.trajectories.converters import _jsonl_with_more_lines, detect_bytes

    data = (FIXTURES / "pi_v3_tree.jsonl").read_bytes()
    assert _jsonl_with_more_lines(data.strip()) is True
    assert detect_bytes(data) == "pi-session"
    assert _jsonl_with_more_lines(b'{"messages": []}') is False  # one document: json decides


def test_synth_arguments_raw_is_json_dumps_and_raises_its_errors() -> None:
    from benchmaker.trajectories.converters.tool_calls import synth_arguments_raw

    for value in (
        {"cmd": "ls \u00e9\n", "n": [1, 2.5, 1e16, None, True, float("nan")]},
        {1: 2, None: 3},
        "x",
        [],
        {"k": "\ud800"},
    ):
        assert synth_arguments_raw(value) == json.dumps(value)
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference detected"):
        synth_arguments_raw({"a": looped})
    with pytest.raises(TypeError, match="not JSON serializable"):
        synth_arguments_raw({"a": object()})


def test_tool_call_validates_arguments_with_a_key_that_is_not_a_str() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ToolCall(id="c", name="bash", arguments_raw="{}", arguments={1: "x"})


@pytest.mark.parametrize("gc_on", [True, False])
def test_gc_paused_turns_the_collector_off_and_restores_it_after_an_error(gc_on: bool) -> None:
    import gc

    from benchmaker.trajectories.convert import gc_paused

    was = gc.isenabled()
    (gc.enable if gc_on else gc.disable)()
    try:
        with pytest.raises(KeyError), gc_paused():
            assert gc.isenabled() is False
            raise KeyError("x")
        assert gc.isenabled() is gc_on
    finally:
        (gc.enable if was else gc.disable)()


def test_pi_tool_result_returns_the_position_history_index_add_would_record() -> None:
    from benchmaker.trajectories.context import message_cursor
    from benchmaker.trajectories.converters.builder import TrajectoryBuilder
    from benchmaker.trajectories.converters.pi_session import tool_result

    ctx = FileContext("s.jsonl", "0" * 64, b"")
    b = TrajectoryBuilder(ctx, "pi-session")
    result = {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "content": [{"type": "text", "text": "ok"}]}
    assert tool_result(result, b, ctx, 2) is None  # no turn yet
    assert b.skipped == {"orphan_observation": 1}
    b.user("task")
    b.turn(Response(content="x", finish_reason="tool_calls"))
    before = message_cursor(b)
    assert tool_result(result, b, ctx, 3) == before == (0, 1)
    assert tool_result(result, b, ctx, 4) is None  # the call has its result
    assert b.skipped == {"orphan_observation": 1, "duplicate_tool_result": 1}
    b.user("more")
    assert tool_result({**result, "toolCallId": "c2", "isError": True}, b, ctx, 5) == (0, 3)
    assert [(o.tool_call_id, o.content, o.is_error) for o in b.turns[0].observations] == [
        ("c1", "ok", False),
        ("c2", "ok", True),
    ]
    with pytest.raises(ConvertError, match="toolCallId"):
        tool_result({"role": "toolResult", "toolCallId": 7}, b, ctx, 6)


def test_pi_usage_counts_only_ints_of_zero_or_more() -> None:
    from enum import IntEnum

    from benchmaker.trajectories.converters.pi_session import pi_usage

    class Three(IntEnum):
        N = 3

    assert pi_usage({"input": 3, "output": 5, "cacheRead": 7, "cacheWrite": 1}) == Usage(
        prompt_tokens=11, completion_tokens=5, cached_tokens=7, total_tokens=16
    )
    assert pi_usage({"input": True, "output": -1}) is None  # a bool and a negative count are no counts
    assert pi_usage({"input": 2.0, "output": "5"}) is None
    assert pi_usage({"input": Three.N, "output": 1, "cacheRead": -4, "totalTokens": 9}) == Usage(
        prompt_tokens=3, completion_tokens=1, total_tokens=9
    )
    assert pi_usage({"output": 4, "totalTokens": None}) == Usage(completion_tokens=4)
    assert pi_usage([1]) is None


def test_pi_turn_timings_of_odd_timestamps_are_the_validated_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """assistant_turn builds Timing and Response unvalidated: the values it can produce
    (a started_at or None, a float duration >= 0, inf included: written null, or None) give the same bytes."""
    entries = [
        {"type": "session", "id": "s", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/"},
        {"type": "message", "timestamp": "2025-01-01T00:00:01.000Z", "message": {"role": "user", "content": "task"}},
    ]
    for k, started in enumerate(["-Infinity", "true", "1735689602000", "1735689603500.25", "NaN", "null", "1e300"]):
        entries.append(
            f'{{"type": "message", "timestamp": "2025-01-01T00:00:0{k + 2}.000Z", "message": '
            f'{{"role": "assistant", "content": [{{"type": "text", "text": "a{k}"}}, {{"type": "thinking", '
            f'"thinking": "t"}}], "stopReason": "stop", "timestamp": {started}}}}}'
        )
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join(e if isinstance(e, str) else json.dumps(e) for e in entries) + "\n")
    fast, old = _both([path], tmp_path, monkeypatch)
    assert fast == old
    turns = json.loads(fast)["turns"]
    assert [t["timing"] for t in turns][:3] == [
        {"ttft_ms": None, "duration_ms": None, "started_at": None},  # inf
        {"ttft_ms": None, "duration_ms": 1735689602999.0, "started_at": None},
        {"ttft_ms": None, "duration_ms": 2000.0, "started_at": "2025-01-01T00:00:02Z"},
    ]
    assert turns[4]["timing"] is None and turns[5]["timing"] is None
    assert turns[0]["response"]["content"] == "a0" and turns[0]["response"]["reasoning"] == "t"


def test_a_jsonl_record_that_is_a_big_number_keeps_json_s_int() -> None:
    data = b'{"type": "session"}\n123456789012345678901234\n'
    assert list(iter_jsonl(FileContext("x.jsonl", "0" * 64, data))) == [
        (1, {"type": "session"}),
        (2, 123456789012345678901234),
    ]


def _orjson_safe_whole(data: bytes) -> bool:
    """orjson_safe as it was, over one translated copy of the whole bytes: the reference."""
    digits = data.translate(bytes(48 if 48 <= b <= 57 else b for b in range(256)))
    at = digits.find(b"0" * 19)
    while at >= 0:
        i = at
        while i > 0 and digits[i - 1] == 48:
            i -= 1
        if i > 0 and data[i - 1] == 45:
            i -= 1
        start = i
        while i > 0 and data[i - 1] in b" \t\r\n":
            i -= 1
        if i == 0 or data[i - 1] in b":,[" or 10 in data[i:start]:
            return False
        end = at + 19
        while end < len(digits) and digits[end] == 48:
            end += 1
        at = digits.find(b"0" * 19, end)
    return True


@pytest.mark.parametrize("chunk", [1, 7, 19, 20, 64])
def test_orjson_safe_by_chunks_answers_as_over_the_whole_bytes(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    monkeypatch.setattr(json_reading, "_SAFE_CHUNK", chunk)
    rng = random.Random(chunk)
    pieces = [b'"', b"a", b" ", b"\n", b":", b",", b"[", b"-", b"{", b"}"]
    seen = set()
    for _ in range(3000):
        data = b"".join(
            rng.choice(pieces) if rng.random() < 0.5 else b"7" * rng.choice([1, 5, 18, 19, 25, 40])
            for _ in range(rng.randrange(1, 12))
        )
        assert orjson_safe(data) is _orjson_safe_whole(data), data
        seen.add(_orjson_safe_whole(data))
    assert seen == {True, False}  # both answers were tried
