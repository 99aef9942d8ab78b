"""The `aider-llm-history` converter on a history the real aider 0.86.2 wrote
(tests/data/written/aider-0.86-llm-history.txt, SOURCES.md there): detected by content,
one trajectory with a turn per model call, aider's own exchanges as canned replies, the
failing test run as turn 0's observation; the converted trajectory replays the calls the
history holds with 0 misses; a malformed entry is refused naming its line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from benchmaker.replay_server.process import start_replay_server
from benchmaker.trajectories.convert import iter_trajectories
from benchmaker.trajectories.converters import FORMATS, detect_bytes
from benchmaker.trajectories.converters.aider_history import read_calls
from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.errors import ConvertError

REPO = Path(__file__).resolve().parents[2]
HISTORY = REPO / "tests" / "data" / "written" / "aider-0.86-llm-history.txt"
SCRIPT = json.loads((REPO / "conformance" / "aider_script.json").read_text())


def test_an_aider_history_converts_to_one_turn_per_model_call():
    assert detect_bytes(HISTORY.read_bytes()) == "aider-llm-history" and "aider-llm-history" in FORMATS
    (traj,) = list(iter_trajectories(HISTORY))
    assert (traj.source.format, traj.match_key, traj.task_id, traj.skipped) == (
        "aider-llm-history",
        "task:mswea-task",
        None,
        {},
    )
    # the log keeps lines: each answer without its final line break
    assert [t.response.content for t in traj.turns] == [s["thought"].rstrip("\n") for s in SCRIPT]
    assert [t.timing.started_at for t in traj.turns] == ["2026-12-03T23:54:12", "2026-12-03T23:54:14"]
    (obs,) = traj.turns[0].observations
    assert obs.content.startswith("I ran this command:\n\npython3 run_tests.py\n\nAnd got this output:\n\n")
    assert "FAIL  tests.test_counts.WordCountTest.test_repeated_spaces_do_not_make_words\npassed 2 failed 1" in (
        obs.content
    )
    assert traj.turns[1].observations == [] and traj.turns[0].user_after == []
    assert traj.canned_replies[2:] == ["Ok.", "Ok, any changes I propose will be to those files."]
    assert traj.canned_replies[0].startswith("To make this change we need to modify `mathweb/flask/app.py` to:")
    assert traj.first_user.startswith("`wordstats.word_count` miscounts")
    assert traj.system is not None and traj.system.startswith("Act as an expert software developer.")


def test_the_converted_history_replays_its_own_calls_with_no_misses(tmp_path: Path):
    (traj,) = list(iter_trajectories(HISTORY))
    rec = tmp_path / "converted.jsonl"
    rec.write_text(traj.model_dump_json() + "\n")
    data = HISTORY.read_bytes()
    calls = read_calls(FileContext(str(HISTORY), hashlib.sha256(data).hexdigest(), data))
    assert [len(c.messages) for c in calls] == [10, 16]
    with start_replay_server(rec, divergence="content") as server, httpx.Client() as c:
        got = []
        for call in calls:
            r = c.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": call.messages})
            got.append((r.status_code, r.headers.get("x-replay-turn"), r.json()["choices"][0]["message"]["content"]))
        stats = c.get(server.url + "/stats").json()
    assert got == [(200, str(k), t.response.content) for k, t in enumerate(traj.turns)]
    assert stats["misses"]["total"] == 0 and stats["divergences"]["total"] == 0


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("TO LLM 2026-12-03T23:54:12\n-------\nUSER hi\nROBOT no\n", 4, "role: expected `-------` or a line"),
        ("LLM RESPONSE 2026-12-03T23:54:12\nASSISTANT hi\n", 1, "an `LLM RESPONSE` entry without a `TO LLM`"),
    ],
)
def test_a_malformed_history_is_refused_naming_its_line(tmp_path: Path, text: str, line: int, problem: str):
    path = tmp_path / "llm.history"
    path.write_text(text)
    with pytest.raises(ConvertError) as exc:
        list(iter_trajectories(path))
    assert str(exc.value).startswith(f"{path}:{line}: {problem}")
