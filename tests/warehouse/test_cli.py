"""recipes/warehouse_cli.py through the real `benchmaker` entry point (kept beside the
warehouse tests it depends on)."""

from __future__ import annotations

import json

import duckdb

from benchmaker.recipes.cli import main
from tests.warehouse._bundle import reference_bundle


def test_load_then_sql_json_and_csv(tmp_path, capsys, monkeypatch):
    db = tmp_path / "w.duckdb"
    monkeypatch.setenv("BENCHMAKER_WAREHOUSE", str(db))  # the default warehouse path
    assert main(["load", str(reference_bundle(tmp_path / "run-a"))]) == 0
    assert capsys.readouterr().out.startswith(f"loaded run-a into {db}")
    assert main(["sql", "SELECT sweep_point, p50_ttft_ms FROM v_sweep_summary ORDER BY 1", "--json"]) == 0
    # TTFT 10/20 ms in c1 and 30/40 ms in c2 -> medians 15 and 35
    assert json.loads(capsys.readouterr().out) == [
        {"sweep_point": "c1", "p50_ttft_ms": 15.0},
        {"sweep_point": "c2", "p50_ttft_ms": 35.0},
    ]
    assert main(["sql", "SELECT run_id, n_ok FROM v_run_summary", "--csv"]) == 0
    assert capsys.readouterr().out == "run_id,n_ok\nrun-a,4\n"
    # placeholders take --param values, in order
    assert (
        main(
            [
                "sql",
                "SELECT sweep_point, n_requests FROM v_sweep_summary WHERE run_id = ? AND n_requests >= ? ORDER BY 1",
                "--param",
                "run-a",
                "--param",
                "2",
                "--csv",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == "sweep_point,n_requests\nc1,2\nc2,2\n"
    # a table printed to a pipe is not squeezed into 80 columns: every header is whole
    assert main(["runs"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "run_id" in line)
    assert header.split() == [
        "run_id",
        "/",
        "point",
        "label",
        "created",
        "valid",
        "ok/requests",
        "req/s",
        "TTFT",
        "ms",
        "E2E",
        "ms",
    ]


def test_sql_error_and_unknown_run_exit_2(tmp_path, capsys):
    db = tmp_path / "w.duckdb"
    main(["load", str(reference_bundle(tmp_path / "run-a")), "--warehouse", str(db)])
    capsys.readouterr()
    assert main(["sql", "SELECT nope", "--warehouse", str(db)]) == 2
    assert "sql: Binder Error" in capsys.readouterr().err
    assert main(["compare", "run-a", "zz", "--warehouse", str(db)]) == 2
    assert "no run 'zz'" in capsys.readouterr().err


def test_sql_is_sandboxed_no_file_writes_attach_or_settings(tmp_path, capsys, monkeypatch):
    db = tmp_path / "w.duckdb"
    main(["load", str(reference_bundle(tmp_path / "run-a")), "--warehouse", str(db)])
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE runs AS SELECT 1 AS a")
    con.close()
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    refused = [
        "COPY (SELECT 1) TO 'x.csv'",
        f"ATTACH '{other}' AS o (READ_WRITE)",
        "EXPORT DATABASE 'dump'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
    ]
    for query in refused:
        assert main(["sql", query, "--warehouse", str(db)]) == 2, query
        err = capsys.readouterr().err
        assert err.startswith("benchmaker: error: sql: ") and err.count("\n") == 1, (query, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.duckdb", "run-a", "w.duckdb"]  # nothing written
    assert duckdb.connect(str(other)).execute("SELECT count(*) FROM runs").fetchone() == (1,)
    for empty in ["", "   \n "]:
        assert main(["sql", empty, "--warehouse", str(db)]) == 2
        assert (
            capsys.readouterr().err
            == 'benchmaker: error: sql: empty query (give a statement, e.g. "SELECT * FROM runs")\n'
        )
    assert main(["sql", "SELECT count(*) AS n FROM runs", "--warehouse", str(db), "--csv"]) == 0
    assert capsys.readouterr().out == "n\n1\n"  # reading the warehouse itself still works


def test_compare_json_and_parquet_export_partitions(tmp_path, capsys):
    db = tmp_path / "w.duckdb"
    main(["load", str(reference_bundle(tmp_path / "run-a")), "--warehouse", str(db)])
    capsys.readouterr()
    assert main(["compare", "run-a", "run-a", "--warehouse", str(db), "--json"]) == 0
    rows = {(r["point_key"], r["statistic"]): r for r in json.loads(capsys.readouterr().out)}
    assert rows["c1", "p50_e2e_ms"]["baseline_value"] == 150.0  # point c1: E2E 100 and 200 ms, median 150
    rows = {r: v for (p, r), v in rows.items() if p == "c2"}  # point c2: E2E 300 and 400 ms
    assert rows["p50_e2e_ms"]["baseline_value"] == 350.0
    # 2 requests a point: too few for a verdict (a CI needs >= 20 per run: warehouse.compare.min_n_for)
    assert rows["p50_e2e_ms"]["diff"] == 0.0 and rows["p50_e2e_ms"]["verdict"] == "n too small"
    out = tmp_path / "pq"
    assert main(["export", "--parquet", str(out), "--warehouse", str(db)]) == 0
    part = out / "requests" / "date=2026-11-29" / "run_id=run-a"  # manifest created_at
    assert part.is_dir()
    n = (
        duckdb.connect()
        .execute(f"SELECT count(*) FROM read_parquet('{out}/requests/**/*.parquet', hive_partitioning=true)")
        .fetchone()[0]
    )
    assert n == 4
