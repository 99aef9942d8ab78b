"""benchmaker.trajectories.trajectory.trajectory_json writes exactly `model_dump_json().encode()`: orjson
from the models' fields where the two agree, pydantic's serializer for anything orjson
refuses."""

from __future__ import annotations

import datetime
import math
import random
import struct

import pytest

from benchmaker.trajectories.trajectory import (
    ContextEdit,
    MessageRef,
    MessageSpan,
    Observation,
    RecordedOutcome,
    Response,
    Source,
    Timing,
    ToolCall,
    Trajectory,
    Turn,
    Usage,
    trajectory_json,
)


def _traj(
    arguments: dict | None = None, content: str = "out", duration: float | None = 12.5, reward: float | None = None
) -> Trajectory:
    call = ToolCall(id="c1", name="bash", arguments_raw="{}", arguments=arguments)
    edit = ContextEdit(
        kind="branch",
        keep=[MessageSpan(start=MessageRef(turn=None, item=0), end=MessageRef(turn=0))],
        summary=["s"],
        keep_from=MessageRef(turn=1, item=0),
        tokens_before=7,
    )
    turns = [
        Turn(
            index=0,
            model="m",
            response=Response(content="a", reasoning="r", tool_calls=[call], finish_reason="tool_calls"),
            usage=Usage(prompt_tokens=3, completion_tokens=2, cached_tokens=0, total_tokens=5),
            timing=Timing(duration_ms=duration, started_at="2025-11-20T23:33:02.351000Z"),
            observations=[Observation(tool_call_id="c1", name="bash", content=content, is_error=True, exit_code=2)],
            user_after=["next"],
        ),
        Turn(index=1, response=Response(content=None), context_edit=edit, error="boom"),
    ]
    return Trajectory(
        trajectory_id="t-0",
        source=Source(format="pi-session", path="p", sha256="0" * 64, line=None),
        match_key="sha256:x",
        first_user="hi",
        user_before_turns=["again"],
        terminated_by="stop",
        outcome=RecordedOutcome(patch="diff", resolved=True, reward=reward),
        turns=turns,
        skipped={"a": 1},
    )


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _same(traj: Trajectory) -> None:
    assert trajectory_json(traj) == traj.model_dump_json().encode("utf-8")


def test_every_model_and_field_kind_writes_pydantics_bytes() -> None:
    _same(
        _traj(
            arguments={
                "path": "a/b",
                "n": 3,
                "x": 1.5,
                "ok": True,
                "none": None,
                "list": [1, "2", [3.0]],
                "nested": {"k": {"deep": [{}]}},
                "big": 2**64 - 1,
                "neg": -(2**63),
            },
            reward=0.5,
        )
    )
    _same(_traj(arguments=None, duration=None))


def test_floats_write_the_same_digits() -> None:
    rng = random.Random(7)
    values = [
        0.0,
        -0.0,
        0.1,
        1e15,
        1e16,
        1e21,
        1e22,
        1e-7,
        5e-324,
        1.7976931348623157e308,
        2.0**53,
        1763681581545.0,
        math.nan,
        math.inf,
        -math.inf,
    ]
    values += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(2000)]
    values += [round(rng.uniform(0, 1e6), 3) for _ in range(2000)]
    _same(_traj(arguments={"v": values}))
    for v in values[:20] + values[-20:]:
        if v >= 0:
            _same(_traj(duration=v, reward=v))


def test_strings_write_the_same_escapes() -> None:
    text = "".join(chr(i) for i in range(0x800)) + '\u2028\u2029\U0001f600\ufeff"\\/'
    _same(_traj(arguments={text: text}, content=text))


@pytest.mark.parametrize(
    "value",
    [
        2**64,
        -(2**63) - 1,  # beyond orjson's 64-bit ints
        {1, 2},
        b"bytes",
        datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC),
        (1, [2]),
        type("S", (str,), {})("sub"),
        type("I", (int,), {})(3),
    ],
    ids=["big", "small", "set", "bytes", "datetime", "tuple", "str_subclass", "int_subclass"],
)
def test_what_orjson_refuses_or_writes_otherwise_takes_pydantics_serializer(value: object) -> None:
    traj = _traj(arguments={"v": value})
    if isinstance(value, (set, bytes)):  # pydantic writes them (a list, a string): so does trajectory_json
        assert trajectory_json(traj) == traj.model_dump_json(warnings=False).encode("utf-8")
    else:
        _same(traj)


def test_fields_holding_values_pydantic_coerces_take_pydantics_serializer() -> None:
    traj = _traj()
    object.__setattr__(traj.turns[0].timing, "__dict__", {**traj.turns[0].timing.__dict__, "ttft_ms": 5})  # int: 5.0
    object.__setattr__(traj.turns[0].usage, "__dict__", {**traj.turns[0].usage.__dict__, "total_tokens": True})  # 1
    object.__setattr__(traj.outcome, "__dict__", {**traj.outcome.__dict__, "reward": 1})  # 1.0
    expected = Trajectory.__pydantic_serializer__.to_json(traj, warnings=False)
    assert trajectory_json(traj) == expected
    assert b'"ttft_ms":5.0' in expected and b'"total_tokens":1' in expected and b'"reward":1.0' in expected


def test_a_surrogate_is_refused_as_before() -> None:
    traj = _traj(content="\ud800")
    with pytest.raises(Exception) as pyd:
        traj.model_dump_json()
    with pytest.raises(type(pyd.value)):
        trajectory_json(traj)


def test_deep_nesting_writes_or_fails_as_pydantic_does() -> None:
    for depth in range(235, 260):  # around orjson's and pydantic's depth limits
        traj = _traj(arguments={"v": _nested(depth)})
        try:
            expected = traj.model_dump_json().encode("utf-8")
        except Exception as exc:  # the error pydantic raises
            with pytest.raises(type(exc)):
                trajectory_json(traj)
        else:
            assert trajectory_json(traj) == expected
