"""`benchmaker swebench-replay --logs` refuses logs the converter cannot read with the
converter's one-line error (exit 2) before any Prefect server is contacted or started."""

from __future__ import annotations

from pathlib import Path

from benchmaker.recipes.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "replay" / "fixtures"


def test_bad_log_is_refused_with_the_converter_error_before_prefect(tmp_path: Path, capsys, monkeypatch):
    # nothing listens on port 9: a flow run would fail to reach this API instead
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    bad = tmp_path / "session.jsonl"
    bad.write_bytes((FIXTURES / "pi_v3_tree.jsonl").read_bytes()[:-40])  # the last line cut short
    code = main(
        [
            "swebench-replay",
            "--logs",
            str(bad),
            "--concurrency",
            "1",
            "--out-dir",
            str(tmp_path / "out"),
            "--warehouse",
            str(tmp_path / "w.duckdb"),
        ]
    )
    assert code == 2
    assert capsys.readouterr().err == f"benchmaker: error: {bad}:12: truncated JSONL: the last line is incomplete\n"
    assert not (tmp_path / "out").exists() and not (tmp_path / "w.duckdb").exists()
