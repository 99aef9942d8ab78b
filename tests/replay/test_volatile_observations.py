"""A tool result whose header carries per-run fields (Codex CLI's `exec_command`: a
random chunk id and the measured wall time) is the same observation on replay: under
`--divergence content` the replay server masks those fields on both sides
(benchmaker.replay_server.store.stable_text) and still refuses a different output."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.store import stable_text
from benchmaker.trajectories.trajectory import Observation
from tests.replay.test_server_fixtures import make_trajectory, running_server, write_store
from tests.replay.test_server_responses import responses_input

# as Codex CLI 0.171.0 sends it (a conformance recording)
RECORDED = (
    "Chunk ID: 65f464\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 28\n"
    'Output:\ndef word_count(text):\n    return len(text.split(" "))\n'
)
SAME_RUN_AGAIN = RECORDED.replace("65f464", "1d2f9e").replace("0.0000", "0.0153")


@pytest.mark.parametrize(
    ("text", "stable"),
    [
        (
            RECORDED,
            "Chunk ID: *\nWall time: * seconds\nProcess exited with code 0\nOriginal token count: 28\n"
            'Output:\ndef word_count(text):\n    return len(text.split(" "))\n',
        ),
        ("Wall time: 12.5 seconds\nOutput:\nok\n", "Wall time: * seconds\nOutput:\nok\n"),
        # the command's own output is never masked
        (
            "Chunk ID: ab12\nOutput:\nChunk ID: cd34\nWall time: 3 seconds\n",
            "Chunk ID: *\nOutput:\nChunk ID: cd34\nWall time: 3 seconds\n",
        ),
        # other texts are left as they are
        ("out 0\nexit code 0", "out 0\nexit code 0"),
        ("Output:\nChunk ID: ab12\n", "Output:\nChunk ID: ab12\n"),
        ("Chunk ID: not hex!\nOutput:\n", "Chunk ID: not hex!\nOutput:\n"),
    ],
)
def test_stable_text_masks_only_the_header_fields(text: str, stable: str):
    assert stable_text(text) == stable


def _store(tmp_path: Path):
    traj = make_trajectory("codex-volatile", 2)
    traj.turns[0].observations = [Observation(tool_call_id="call_0", name="exec_command", content=RECORDED)]
    return write_store(tmp_path / "t.jsonl", [traj]), traj


@pytest.mark.parametrize(
    ("output", "status", "content_divergences"),
    [(RECORDED, 200, 0), (SAME_RUN_AGAIN, 200, 0), (RECORDED.replace("split", "rsplit"), 412, 1)],
)
def test_content_divergence_ignores_codex_chunk_id_and_wall_time(tmp_path, output, status, content_divergences):
    path, traj = _store(tmp_path)
    items = responses_input(traj, 1)
    (obs,) = [i for i in items if i["type"] == "function_call_output"]
    obs["output"] = output
    with running_server(path, divergence="content") as url:
        r = httpx.post(url + "/v1/responses", json={"model": "m", "input": items})
        stats = httpx.get(url + "/stats").json()
    assert r.status_code == status, r.text
    assert (stats["divergences"]["content"], stats["misses"]["diverged"]) == (content_divergences, content_divergences)
