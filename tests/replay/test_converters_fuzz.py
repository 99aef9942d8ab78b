"""Converters fed truncated or mutated real logs: whatever hypothesis
does to the bytes of a real recording (../shared/data/real), `convert_paths` either
converts it or raises the documented InputError (`path:line: field: problem`), never
another exception; the `benchmaker convert` CLI turns that into one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmaker.trajectories.convert import convert_paths
from benchmaker.trajectories.errors import InputError

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real"
LOGS = [
    "pi-session-v1-large.jsonl",
    "swe-agent-pydicom-1458.traj",
    "openhands-basic.traj.json",
    "mini-swe-agent-github-issue.traj.json",
]

pytestmark = pytest.mark.skipif(
    not all((REAL / n).is_file() for n in LOGS), reason=f"real recordings not present in {REAL} (see its SOURCES.md)"
)

PROFILE = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """`data` cut at a random offset, or with a few bytes replaced, deleted or inserted."""
    how = draw(st.sampled_from(["truncate", "replace", "delete", "insert"]))
    at = draw(st.integers(min_value=0, max_value=max(0, len(data) - 1)))
    if how == "truncate":
        return data[:at]
    chunk = draw(
        st.binary(min_size=1, max_size=8)
        | st.sampled_from([b'"', b"{", b"}", b"\n", b"\x00", b"\xff", b"null", b"[]", b"-1", b"1e999"])
    )
    if how == "replace":
        return data[:at] + chunk + data[at + len(chunk) :]
    if how == "delete":
        return data[:at] + data[at + len(chunk) :]
    return data[:at] + chunk + data[at:]


def _convert_or_input_error(path: Path) -> None:
    try:
        convert_paths([path], None)
    except InputError as exc:
        message = str(exc)
        assert message and "Traceback" not in message


def check_damaged_copies(data: bytes, path: Path) -> None:
    """Hypothesis (PROFILE) writes damaged copies of `data` to `path`: each converts
    or raises an InputError with a one-line message, never another exception."""

    @PROFILE
    @given(damaged(data))
    def check(mutated: bytes) -> None:
        path.write_bytes(mutated)
        _convert_or_input_error(path)

    check()


@pytest.mark.parametrize("name", LOGS)
def test_damaged_real_log_converts_or_is_an_input_error(name, tmp_path):
    check_damaged_copies((REAL / name).read_bytes(), tmp_path / name)


def test_every_truncation_of_a_small_log_is_handled(tmp_path):
    """Each of ~90 evenly spaced cut points of the mini-swe-agent log (9 KB, one JSON
    document): no cut raises anything but InputError."""
    data = (REAL / "mini-swe-agent-github-issue.traj.json").read_bytes()
    path = tmp_path / "cut.traj.json"
    for at in range(0, len(data), 100):
        path.write_bytes(data[:at])
        _convert_or_input_error(path)


def test_convert_cli_names_the_bad_line_in_one_line(tmp_path, capsys):
    from benchmaker.recipes.cli import main

    lines = (REAL / "pi-session-v1-large.jsonl").read_bytes().splitlines(keepends=True)
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(lines[:5]) + lines[5][: len(lines[5]) // 2] + b"\n" + b"".join(lines[6:20]))
    code = main(["convert", str(path), "-o", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("benchmaker: error: ") and err.count("\n") == 1, err
    assert f"{path}:6" in err  # the cut line, 1-based
    assert not (tmp_path / "t.jsonl").exists()
