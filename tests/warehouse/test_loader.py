"""benchmaker.warehouse.loader: idempotent one-transaction loads, concurrent writers, bad input."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time

import pytest

from benchmaker.engine.records import SAMPLE_COLUMNS
from benchmaker.warehouse.connection import connect_writer, open_readonly
from benchmaker.warehouse.errors import BundleError, WarehouseLocked
from benchmaker.warehouse.loader import RUN_TABLES, load_run, table_columns
from tests.warehouse._bundle import reference_bundle, sample, write_jsonl, write_manifest


def _counts(db) -> dict[str, int]:
    con = open_readonly(db)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES}
    finally:
        con.close()


def test_requests_table_has_sample_columns_plus_shard_and_episode(tmp_path):
    db = tmp_path / "w.duckdb"
    load_run(db, reference_bundle(tmp_path / "run-a"))
    con = open_readonly(db)
    cols = table_columns(con, "requests")
    con.close()
    # shard from the file name; episode_id / turn_index from meta (migration 0007)
    assert cols == {**SAMPLE_COLUMNS, "shard": "INTEGER", "episode_id": "VARCHAR", "turn_index": "INTEGER"}


def test_loading_the_same_run_twice_leaves_identical_row_counts(tmp_path):
    db = tmp_path / "w.duckdb"
    run = reference_bundle(tmp_path / "run-a")
    first = load_run(db, run, token_events=True)
    counts = _counts(db)
    second = load_run(db, run, token_events=True)
    assert _counts(db) == counts
    assert first.replaced is False and second.replaced is True
    assert counts["requests"] == 4  # 4 sample lines
    assert counts["token_events"] == 8  # 2 token events per request
    assert counts["sweep_points"] == 2  # c1, c2 derived from the samples
    assert counts["runs"] == 1


def test_shards_and_point_folders_all_land_with_their_sweep_point_and_shard(tmp_path):
    run = tmp_path / "run-s"
    write_manifest(run, "run-s")
    write_jsonl(
        run / "points" / "c4" / "samples-w0.jsonl",
        [sample("run-s", 0, 0, 10, 100, 11), sample("run-s", 1, 0, 10, 100, 11)],
    )
    write_jsonl(run / "points" / "c4" / "samples-w1.jsonl", [sample("run-s", 2, 0, 10, 100, 11)])
    write_jsonl(
        run / "points" / "c4" / "episodes.jsonl",
        [
            {
                "run_id": "run-s",
                "sweep_point": None,
                "concurrency": 4,
                "episode_id": "e1",
                "trajectory_id": "t1",
                "task_id": None,
                "mode": "recorded",
                "worker": 0,
                "started_ns": 0,
                "ended_ns": 10,
                "n_turns": 1,
                "n_requests": 1,
                "model_time_ns": 5,
                "tool_time_ns": 1,
                "first_token_ns_sum": None,
                "misses_unknown_key": 0,
                "misses_beyond_turns": 0,
                "misses_diverged": 0,
                "divergences": 0,
                "outcome": "ok",
                "error": None,
                "resolved": None,
                "reverified": False,
                "usage_complete": False,
                "prompt_tokens": None,
                "output_tokens": None,
                "diff_sha256": None,
            }
        ],
    )
    (run / "points" / "c4" / "server_stats.json").write_text(json.dumps({"misses": {"total": 0}}))
    db = tmp_path / "w.duckdb"
    report = load_run(db, run)
    assert report.rows["requests"] == 3
    con = open_readonly(db)
    assert con.execute("SELECT shard, sweep_point, count(*) FROM requests GROUP BY ALL ORDER BY 1").fetchall() == [
        (0, "c4", 2),
        (1, "c4", 1),
    ]
    assert con.execute("SELECT sweep_point, concurrency, from_file FROM sweep_points").fetchall() == [
        ("c4", 4, False)  # concurrency taken from the episodes of the point
    ]
    assert con.execute("SELECT sweep_point, stats->>'$.misses.total' FROM server_stats").fetchall() == [("c4", "0")]
    # all-null columns keep their type (explicit columns=): first_token_ns_sum is BIGINT
    assert con.execute("SELECT typeof(first_token_ns_sum) FROM episodes").fetchone()[0] == "BIGINT"
    con.close()


def test_bad_json_line_names_the_file_and_line_and_writes_nothing(tmp_path):
    db = tmp_path / "w.duckdb"
    run = reference_bundle(tmp_path / "run-a")
    load_run(db, run)
    before = _counts(db)
    con = open_readonly(db)
    old_rows = con.execute("SELECT * FROM requests ORDER BY seq").fetchall()
    con.close()
    # a second shard whose line 2 is cut short
    bad = run / "samples-w1.jsonl"
    good = json.dumps(sample("run-a", 10, 0, 10, 100, 11))
    bad.write_text(good + "\n" + good[:40] + "\n")
    with pytest.raises(BundleError) as err:
        load_run(db, run)
    assert str(err.value).startswith(f"{bad}:2: malformed JSON")
    assert _counts(db) == before  # the earlier load of run-a is intact
    con = open_readonly(db)
    assert con.execute("SELECT * FROM requests ORDER BY seq").fetchall() == old_rows
    con.close()


def test_value_of_wrong_type_names_file_line_and_field(tmp_path):
    run = reference_bundle(tmp_path / "run-b", run_id="run-b")
    row = sample("run-b", 9, 0, 10, 100, 11)
    row["output_tokens"] = "12a"
    write_jsonl(run / "samples-w2.jsonl", [row])
    db = tmp_path / "w.duckdb"
    with pytest.raises(BundleError) as err:
        load_run(db, run)
    assert str(err.value) == (f'{run / "samples-w2.jsonl"}:1: output_tokens: expected an integer (BIGINT) (got "12a")')
    assert _counts(db)["runs"] == 0  # nothing of run-b was written


def test_sample_of_another_run_is_refused(tmp_path):
    run = reference_bundle(tmp_path / "run-c", run_id="run-c")
    write_jsonl(run / "samples-w3.jsonl", [sample("other-run", 0, 0, 10, 100, 11)])
    with pytest.raises(BundleError, match=r"samples-w3.jsonl:1: run_id: expected the manifest's 'run-c'"):
        load_run(tmp_path / "w.duckdb", run)


def test_missing_manifest_is_a_bundle_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="manifest.json: missing"):
        load_run(tmp_path / "w.duckdb", tmp_path / "empty")


def test_two_loads_started_at_once_from_two_processes_both_land(tmp_path):
    db = tmp_path / "w.duckdb"
    runs = [reference_bundle(tmp_path / f"run-{k}", run_id=f"run-{k}") for k in range(2)]
    load_run(db, runs[0])  # create the file, then hold its lock so both loaders must wait
    holder = connect_writer(db)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=load_run, args=(db, r)) for r in runs]
    for p in procs:
        p.start()
    time.sleep(1.5)  # both children are now retrying on "Could not set lock on file"
    holder.close()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    con = open_readonly(db)
    assert con.execute("SELECT run_id, count(*) FROM requests GROUP BY 1 ORDER BY 1").fetchall() == [
        ("run-0", 4),
        ("run-1", 4),
    ]
    # the file reopens and every row reads back through the views: not corrupt
    assert con.execute("SELECT run_id, n_ok FROM v_run_summary ORDER BY 1").fetchall() == [("run-0", 4), ("run-1", 4)]
    con.close()


def test_lock_wait_is_bounded_and_names_the_file(tmp_path):
    db = tmp_path / "w.duckdb"
    run = reference_bundle(tmp_path / "run-a")
    load_run(db, run)
    code = (  # another process holds the write lock for up to 30 s
        "import sys, time, duckdb; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(WarehouseLocked, match=f"{db}: warehouse still locked"):
            load_run(db, run, wait_s=0.5)
        assert time.monotonic() - t0 < 5
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_migration_numbered_below_an_applied_one_still_runs(tmp_path):
    """Migration numbers are handed out ahead of time, so 0008 may land after 0009 was
    applied to a file: it still runs (runs.partial exists), and loading works."""
    from benchmaker.warehouse.schema import migrate, migrations

    db = tmp_path / "w.duckdb"
    con = connect_writer(db)
    migrate(con)
    con.execute("DELETE FROM schema_version WHERE version = 8")
    con.execute("ALTER TABLE runs DROP COLUMN partial_reason")
    con.execute("ALTER TABLE runs DROP COLUMN partial")
    assert migrate(con) == migrations()[-1].version
    assert {"partial", "partial_reason"} <= set(table_columns(con, "runs"))
    con.close()
    report = load_run(db, reference_bundle(tmp_path / "run-a"))  # no summary.json: flagged
    assert report.partial_reason == "no summary.json in the bundle (the run was killed before it finished)"
