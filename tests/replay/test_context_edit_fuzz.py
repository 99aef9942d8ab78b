"""The converters of agents that edit their context (pi session trees, pi event streams
with compaction, OpenHands condensation in both formats) fed damaged copies of the
written fixtures: each converts or raises the documented InputError, never another
exception (as tests/replay/test_converters_fuzz.py for the real recordings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmaker.trajectories.convert import convert_paths
from benchmaker.trajectories.errors import InputError
from tests.replay.test_converters_fuzz import check_damaged_copies
from tests.replay.test_pi_events_compaction import stream

WRITTEN = Path(__file__).resolve().parents[1] / "data" / "written"
NAMES = ["pi_v3_branches.jsonl", "openhands-condensation.json", "openhands-sdk-condensation.json"]


def _inputs() -> list[tuple[str, bytes]]:
    small_stream = [e for e in stream(retry=True) if e.get("type") != "tool_execution_end"]
    for e in small_stream:  # the 90,000-char read result cut short: hypothesis shrinks faster
        for msg in (e.get("message"), *(e.get("toolResults") or [])):
            if isinstance(msg, dict) and msg.get("role") == "toolResult":
                msg["content"] = [{"type": "text", "text": "x = 1\n" * 20}]
    return [
        *((n, (WRITTEN / n).read_bytes()) for n in NAMES),
        ("pi-json.jsonl", "".join(json.dumps(e) + "\n" for e in small_stream).encode()),
    ]


@pytest.mark.parametrize(("name", "data"), _inputs(), ids=lambda v: v if isinstance(v, str) else "")
def test_damaged_context_edit_logs_convert_or_are_input_errors(name: str, data: bytes, tmp_path: Path) -> None:
    check_damaged_copies(data, tmp_path / name)


def _edited(name: str, index: int, **changes) -> str:
    if name.endswith(".jsonl"):
        lines = (WRITTEN / name).read_text().splitlines()
        lines[index] = json.dumps(dict(json.loads(lines[index]), **changes))
        return "\n".join(lines) + "\n"
    events = json.loads((WRITTEN / name).read_text())
    events[index] = dict(events[index], **changes)
    return json.dumps(events)


SDK, LEGACY, PI = NAMES[2], NAMES[1], NAMES[0]
HOSTILE = {  # shapes hypothesis rarely reaches: none may raise anything but InputError
    "sdk-list-id": (SDK, _edited(SDK, 3, id=[1]), None),
    "sdk-unhashable-forgotten": (SDK, _edited(SDK, 9, forgotten_event_ids=[[1], {"a": 1}]), None),
    "sdk-offset-past-the-view": (SDK, _edited(SDK, 9, summary_offset=999), None),
    "legacy-dict-id": (LEGACY, _edited(LEGACY, 4, id={"x": 1}), None),
    "legacy-huge-range": (
        LEGACY,
        _edited(LEGACY, 10, args={"forgotten_events_start_id": 0, "forgotten_events_end_id": 10**18}),
        None,
    ),
    "legacy-args-not-an-object": (LEGACY, _edited(LEGACY, 10, args="x"), None),
    "pi-parent-a-list": (PI, _edited(PI, 3, parentId=["x"]), "parentId: expected an entry id"),
    "pi-parent-later": (PI, _edited(PI, 9, parentId="e10"), "parentId: parent entry not found"),
    "pi-summary-a-number": (PI, _edited(PI, 10, summary=5), None),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_shapes_convert_or_are_input_errors(case: str, tmp_path: Path) -> None:
    name, text, error = HOSTILE[case]
    path = tmp_path / name
    path.write_text(text)
    if error is None:
        convert_paths([path], None)  # converts: the odd field is skipped or ignored
    else:
        with pytest.raises(InputError, match=error):
            convert_paths([path], None)
