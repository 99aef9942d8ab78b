"""Migration 0006: the model that answered each request and each agent turn lands in
`requests.model` and `turns.model` (issue #13 item 5)."""

from __future__ import annotations

from replay.episodes import TurnRecord
from tests.warehouse._bundle import sample, write_jsonl, write_manifest
from warehouse.connection import open_readonly
from warehouse.loader import load_run


def test_model_of_each_request_and_turn_is_loaded(tmp_path):
    run = tmp_path / "run-m"
    write_manifest(run, "run-m")
    write_jsonl(run / "samples.jsonl", [
        sample("run-m", 0, 0, 10, 100, 11, model="claude-sonnet-4-5"),
        sample("run-m", 1, 100, 10, 100, 11, model="gpt-5.1-codex"),  # the session switched models
        sample("run-m", 2, 200, 10, 100, 11),  # the server named no model
    ])
    turns = [
        TurnRecord(run_id="run-m", sweep_point=None, episode_id="e1", turn_index=i, sent_ns=0,
                   first_token_ns=1, end_ns=2, outcome="ok", model=m).to_dict()
        for i, m in enumerate(["claude-sonnet-4-5", "gpt-5.1-codex", None])
    ]
    write_jsonl(run / "turns.jsonl", turns)
    db = tmp_path / "w.duckdb"
    load_run(db, run)
    con = open_readonly(db)
    try:
        assert con.execute("SELECT seq, model FROM requests ORDER BY seq").fetchall() == [
            (0, "claude-sonnet-4-5"), (1, "gpt-5.1-codex"), (2, None)]
        assert con.execute("SELECT turn_index, model FROM turns ORDER BY turn_index").fetchall() == [
            (0, "claude-sonnet-4-5"), (1, "gpt-5.1-codex"), (2, None)]
    finally:
        con.close()
