"""Migration 0006: the model that answered each request lands in `requests.model`;
an agent turn's model is its request's (turns keep only what a turn has,
migration 0010): new-shape bundles, bundles whose turns.jsonl still
carries the request fields (with and without samples), and a warehouse migrated from 9."""

from __future__ import annotations

import duckdb

from benchmaker.agent.episodes import TurnRecord
from benchmaker.warehouse.connection import open_readonly
from benchmaker.warehouse.loader import load_run
from benchmaker.warehouse.schema import migrate
from tests.warehouse._bundle import sample, write_jsonl, write_manifest

MODELS = ["claude-sonnet-4-5", "gpt-5.1-codex", None]  # the session switched models; then none named


def _agent_samples(run_id: str) -> list[dict]:
    return [
        sample(
            run_id,
            i,
            100 * i,
            10,
            100,
            11,
            model=m,
            lane="agent",
            meta={"episode_id": "e1", "turn_index": i, "miss_kind": None},
        )
        for i, m in enumerate(MODELS)
    ]


def _old_turn(run_id: str, i: int, model: str | None) -> dict:
    """A turns.jsonl line as written before migration 0010: the call's figures on the turn."""
    return {
        "run_id": run_id,
        "sweep_point": None,
        "episode_id": "e1",
        "turn_index": i,
        "sent_ns": 100_000_000 * i,
        "first_token_ns": 100_000_000 * i + 10_000_000,
        "end_ns": 100_000_000 * i + 100_000_000,
        "outcome": "ok",
        "http_status": 200,
        "miss_kind": None,
        "prompt_tokens": 100,
        "output_tokens": 11 if model else None,
        "cached_tokens": None,
        "tool_time_ns": 5,
        "n_tool_calls": 1,
        "byte_equal": True,
        "model": model,
    }


def _turns_beside_requests(db) -> list[tuple]:
    con = open_readonly(db)
    try:
        return con.execute(
            "SELECT t.turn_index, r.model, r.outcome, r.sent_ns, t.tool_time_ns, t.n_tool_calls, t.byte_equal "
            "FROM turns t JOIN requests r ON r.run_id = t.run_id AND r.episode_id = t.episode_id "
            "AND r.turn_index = t.turn_index AND r.sweep_point IS NOT DISTINCT FROM t.sweep_point "
            "ORDER BY t.turn_index"
        ).fetchall()
    finally:
        con.close()


def test_model_of_each_request_is_loaded_and_turns_join_it(tmp_path):
    run = tmp_path / "run-m"
    write_manifest(run, "run-m")
    write_jsonl(run / "samples.jsonl", _agent_samples("run-m"))
    write_jsonl(
        run / "turns.jsonl",
        [
            TurnRecord(
                run_id="run-m", sweep_point=None, episode_id="e1", turn_index=i, n_tool_calls=1, byte_equal=True
            ).to_dict()
            for i in range(3)
        ],
    )
    db = tmp_path / "w.duckdb"
    load_run(db, run)
    con = open_readonly(db)
    try:
        assert con.execute("SELECT seq, model FROM requests ORDER BY seq").fetchall() == [
            (0, "claude-sonnet-4-5"),
            (1, "gpt-5.1-codex"),
            (2, None),
        ]
        cols = [r[0] for r in con.execute("DESCRIBE turns").fetchall()]
        assert cols == [
            "run_id",
            "sweep_point",
            "episode_id",
            "turn_index",
            "miss_kind",
            "tool_time_ns",
            "n_tool_calls",
            "byte_equal",
            "shard",
        ]
        assert con.execute(
            "SELECT turn_index, model, ttft_ms, e2e_ms, byte_equal FROM v_turns ORDER BY turn_index"
        ).fetchall() == [
            (0, "claude-sonnet-4-5", 10.0, 100.0, True),
            (1, "gpt-5.1-codex", 10.0, 100.0, True),
            (2, None, 10.0, 100.0, True),
        ]
    finally:
        con.close()
    assert _turns_beside_requests(db) == [(i, m, "ok", 100_000_000 * i, 0, 1, True) for i, m in enumerate(MODELS)]


def test_old_turn_lines_with_samples_load_without_a_second_request(tmp_path):
    run = tmp_path / "run-o"
    write_manifest(run, "run-o")
    write_jsonl(run / "samples.jsonl", _agent_samples("run-o"))
    write_jsonl(run / "turns.jsonl", [_old_turn("run-o", i, m) for i, m in enumerate(MODELS)])
    db = tmp_path / "w.duckdb"
    report = load_run(db, run)
    assert (report.rows["requests"], report.rows["turns"]) == (3, 3)
    assert _turns_beside_requests(db) == [(i, m, "ok", 100_000_000 * i, 5, 1, True) for i, m in enumerate(MODELS)]


def test_old_turn_lines_without_samples_become_requests(tmp_path):
    # `benchmaker episode --out` wrote turns.jsonl and no samples before migration 0010
    run = tmp_path / "run-e"
    write_manifest(run, "run-e")
    write_jsonl(run / "turns.jsonl", [_old_turn("run-e", i, m) for i, m in enumerate(MODELS)])
    db = tmp_path / "w.duckdb"
    load_run(db, run)
    load_run(db, run)  # a second load replaces, never doubles
    con = open_readonly(db)
    try:
        got = con.execute(
            "SELECT lane, phase, turn_index, outcome, http_status, intended_ns, sent_ns, first_token_ns, end_ns, "
            "usage_present, prompt_tokens, output_tokens, model, meta ->> 'source' "
            "FROM requests ORDER BY turn_index"
        ).fetchall()
    finally:
        con.close()
    assert got == [
        (
            "agent",
            "measure",
            i,
            "ok",
            200,
            100_000_000 * i,
            100_000_000 * i,
            100_000_000 * i + 10_000_000,
            100_000_000 * i + 100_000_000,
            m is not None,
            100,
            11 if m else None,
            m,
            "turns",
        )
        for i, m in enumerate(MODELS)
    ]
    assert _turns_beside_requests(db) == [(i, m, "ok", 100_000_000 * i, 5, 1, True) for i, m in enumerate(MODELS)]


def test_migration_0010_moves_turn_figures_a_request_lacks_then_drops_them(tmp_path):
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    try:
        assert migrate(con, 9) == 9
        cols = (
            "run_id, sweep_point, episode_id, turn_index, sent_ns, first_token_ns, end_ns, outcome, "
            "http_status, miss_kind, prompt_tokens, output_tokens, cached_tokens, tool_time_ns, n_tool_calls, "
            "byte_equal, shard, model"
        )
        con.execute(
            f"INSERT INTO turns ({cols}) VALUES "
            "('r', 'c1', 'e1', 0, 10, 20, 30, 'ok', 200, NULL, 7, 3, 1, 4, 1, true, 0, 'm0'), "
            "('r', 'c1', 'e1', 1, 40, NULL, 60, 'http_error', 409, 'beyond_turns', NULL, NULL, NULL, 0, 0, "
            "NULL, 0, NULL)"
        )
        # turn 0's call was loaded as a request already (a sweep's sample); turn 1's was not
        con.execute(
            "INSERT INTO requests (run_id, lane, sweep_point, outcome, sent_ns, shard, episode_id, "
            "turn_index) VALUES ('r', 'agent', 'c1', 'ok', 10, 0, 'e1', 0)"
        )
        assert migrate(con) >= 10
        assert [r[0] for r in con.execute("DESCRIBE turns").fetchall()] == [
            "run_id",
            "sweep_point",
            "episode_id",
            "turn_index",
            "miss_kind",
            "tool_time_ns",
            "n_tool_calls",
            "byte_equal",
            "shard",
        ]
        assert con.execute(
            "SELECT turn_index, outcome, http_status, sent_ns, end_ns, usage_present, meta ->> 'miss_kind' "
            "FROM requests ORDER BY turn_index"
        ).fetchall() == [(0, "ok", None, 10, None, None, None), (1, "http_error", 409, 40, 60, False, "beyond_turns")]
        assert con.execute("SELECT turn_index, miss_kind, tool_time_ns FROM turns ORDER BY 1").fetchall() == [
            (0, None, 4),
            (1, "beyond_turns", 0),
        ]
    finally:
        con.close()
