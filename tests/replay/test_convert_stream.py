"""A JSONL file of many sessions streams from disk (FileContext.streamed): every converter
gives the same trajectories from a streamed context as from the bytes held whole, a
head that decides the format (detect_head) decides what the whole file's bytes do, and
a file past STREAM_MIN_BYTES converts to the same output bytes, and the same errors,
holding about one session, not the file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import benchmaker.trajectories.convert as convert_mod
from benchmaker.trajectories.convert import convert_paths
from benchmaker.trajectories.converters import CONVERTERS, detect_bytes, detect_head
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.errors import ConvertError
from benchmaker.trajectories.trajectory import trajectory_json
from tests.replay.convert_memory import convert_traced, session_line

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
SHARED = ROOT / ".." / "shared" / "data"
_LOGS = [
    *sorted((TESTS / "data").rglob("*")),
    *sorted((TESTS / "replay" / "fixtures").rglob("*")),
    ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl",
]
LOG_FILES = [p for p in _LOGS if p.is_file() and p.suffix in (".json", ".jsonl", ".traj")]
REAL_FILES = sorted(
    p
    for d in ("real", "real-agents")
    for p in (SHARED / d).rglob("*")
    if p.is_file() and p.suffix in (".json", ".jsonl", ".traj")
)


def _name(p: Path) -> str:
    return p.name


def _outcome(ctx: FileContext, fmt: str) -> list[bytes] | str:
    """The converter's trajectories as JSON lines, or its ConvertError's message."""
    try:
        return [trajectory_json(t) for t in CONVERTERS[fmt](ctx)]
    except ConvertError as exc:
        return str(exc)


def _same_both_ways(path: Path) -> None:
    data = path.read_bytes()
    fmt = detect_bytes(data)
    if fmt is None:
        pytest.skip(f"{path.name}: no file format (a companion file)")
    sha = hashlib.sha256(data).hexdigest()
    for lenient in (False, True):
        whole = _outcome(FileContext(str(path), sha, data, lenient), fmt)
        streamed = FileContext(str(path), sha, None, lenient, source=path, head=data)
        assert _outcome(streamed, fmt) == whole


@pytest.mark.parametrize("path", LOG_FILES, ids=_name)
def test_a_streamed_context_converts_as_the_bytes_held_whole(path: Path) -> None:
    _same_both_ways(path)


@pytest.mark.parametrize("path", REAL_FILES, ids=_name)
def test_a_streamed_real_recording_converts_as_held_whole(path: Path) -> None:
    _same_both_ways(path)


def test_the_real_recordings_are_there_or_skipped_with_the_reason() -> None:
    if not REAL_FILES:
        pytest.skip("no real recordings under ../shared/data/real*")
    assert len(REAL_FILES) >= 10


@pytest.mark.parametrize("path", LOG_FILES + REAL_FILES, ids=_name)
def test_a_head_that_decides_gives_the_whole_files_format(path: Path) -> None:
    data = path.read_bytes()
    whole = detect_bytes(data)
    decided = 0
    at = data.find(b"\n")
    while 0 <= at < len(data) - 1 and decided < 40:  # heads of whole lines, the file not all of them
        ok, fmt = detect_head(data[: at + 1])
        if ok:
            assert fmt == whole, at
            decided += 1
        at = data.find(b"\n", at + 1)


def test_a_document_or_a_short_file_is_never_decided_by_its_head() -> None:
    rows = b"".join(json.dumps({"messages": [{"role": "user", "content": str(k)}]}).encode() + b"\n" for k in range(60))
    assert detect_head(rows) == (True, "openai-messages")
    assert detect_head(rows[: rows.index(b"\n", 0) + 1] * 49) == (False, None)  # 49 records: detection reads 50
    pretty = json.dumps({"messages": [{"role": "user", "content": "x"}] * 60}, indent=1).encode()
    assert detect_head(pretty) == (False, None)  # a document's first line is no JSON value


def _convert(src: Path, out: Path) -> tuple[bytes, int]:
    """convert_paths' output bytes and its peak traced memory in bytes."""
    _, peak = convert_traced(src, out)
    return out.read_bytes(), peak


def test_a_large_file_of_many_sessions_streams_to_the_same_bytes_holding_one_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peaks, sizes = [], []
    for sessions in (150, 450):  # ~3.3 MB and ~10 MB, 22 KB a session
        src = tmp_path / f"many-{sessions}.jsonl"
        src.write_bytes(b"".join(session_line(k) for k in range(sessions)))
        sizes.append(src.stat().st_size)
        monkeypatch.setattr(convert_mod, "STREAM_MIN_BYTES", 1 << 20)  # both streamed
        streamed, peak = _convert(src, tmp_path / "s.jsonl")
        peaks.append(peak)
        monkeypatch.setattr(convert_mod, "STREAM_MIN_BYTES", sizes[-1] + 1)  # read whole, as before
        whole, peak_whole = _convert(src, tmp_path / "w.jsonl")
        assert streamed == whole and streamed.count(b"\n") == sessions
        assert peak_whole > sizes[-1]  # the file's bytes held
    # streamed: the head (the 50 records detection reads: 1.1 MB) and one session, the same
    # few MiB for 3x the sessions (read whole, the peak grows by the 6.7 MB more bytes)
    assert peaks[1] - peaks[0] < 512 << 10, peaks
    assert peaks[1] < sizes[1] * 2 // 3, (peaks, sizes)  # 5.9 MB against 11 MB


@pytest.mark.parametrize("lenient", [False, True], ids=["strict", "lenient"])
def test_bad_lines_deep_in_a_streamed_file_are_the_same_errors_and_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lenient: bool
) -> None:
    src = tmp_path / "bad.jsonl"
    rows = [session_line(k) for k in range(200)]
    rows[150] = b'{"messages": [\n'  # line 151: not JSON
    rows[160] = b"\xff\xfe" + rows[160]  # line 161: not UTF-8
    src.write_bytes(b"".join(rows) + b'{"messages": [{"role"')  # line 201: cut short
    report_of: dict[str, object] = {}

    def convert(out: Path) -> bytes | str:
        try:
            report = convert_paths([src], out, workers=1, progress=None, lenient=lenient)
        except ConvertError as exc:
            return str(exc)
        report_of[out.name] = (report.trajectories, report.skipped)
        return out.read_bytes()

    streamed = convert(tmp_path / "s.jsonl")
    monkeypatch.setattr(convert_mod, "STREAM_MIN_BYTES", src.stat().st_size + 1)
    whole = convert(tmp_path / "w.jsonl")
    assert streamed == whole
    if lenient:
        skipped = {"invalid_json_line": 1, "invalid_utf8_line": 1, "truncated_last_line": 1}
        assert report_of["s.jsonl"] == report_of["w.jsonl"] == (198, skipped)
    else:
        assert streamed == f"{src}:151: invalid JSON: Expecting value"
