"""Match keys of benchmaker/trajectories/trajectory.py: single-prompt keys unchanged, multi-message keys
over all user messages before the first assistant message."""

from __future__ import annotations

import hashlib

import pytest

from benchmaker.trajectories.trajectory import match_key_for, match_key_for_messages


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.parametrize("text", ["", "plain prompt", "héllo 😀\r\n\x1e", "a\n  task_id:  q-1  \nb"])
def test_single_message_key_is_the_old_first_user_key(text):
    want = "task:q-1" if "task_id" in text else _sha(text)  # the pre-existing definition
    assert match_key_for(text) == want
    assert match_key_for_messages([text]) == want


def test_multi_message_key_hashes_all_texts_with_record_separator():
    assert match_key_for_messages(["demo", "task"]) == _sha("demo\n\x1e\ntask")
    assert match_key_for_messages(["demo", "task"]) != match_key_for_messages(["demo", "other"])
    assert match_key_for_messages(["demo", "task"]) != match_key_for("demo")


def test_task_id_line_in_any_message_wins_first_found():
    assert match_key_for_messages(["demo", "task_id: second\n"]) == "task:second"
    assert match_key_for_messages(["task_id: first", "task_id: second"]) == "task:first"


def test_empty_list_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        match_key_for_messages([])
