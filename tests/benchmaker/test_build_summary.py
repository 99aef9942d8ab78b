"""benchmaker.engine.summary.build_summary and benchmaker.engine.workers.merge_shards as plain
functions: a sharded run's summary.json from its files and its config, no BenchRunner."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.load_models import parse_rate_spec
from benchmaker.engine.records import Sample
from benchmaker.engine.summary import build_summary
from benchmaker.engine.workers import merge_shards

MS = 1_000_000


def _report(k: int) -> dict:
    return {
        "self_checks": {
            "loop_lag_ms": {"count": 10, "p50": 0.1, "p99": 0.5 + k, "max": 1.0},
            "client_cpu_s": 0.5,
            "wall_s": 1.0,
            "max_in_flight": 2,
            "connections_opened": 2,
            "worker": k,
        },
        "interrupted": False,
    }


def _samples(path: Path, seqs: range, sent_ms: int) -> None:
    path.write_bytes(
        b"".join(
            orjson.dumps(
                Sample(
                    run_id="r1",
                    seq=i,
                    intended_ns=sent_ms * MS,
                    sent_ns=sent_ms * MS,
                    first_token_ns=(sent_ms + 10) * MS,
                    end_ns=(sent_ms + 100) * MS,
                ).to_dict(),
                option=orjson.OPT_APPEND_NEWLINE,
            )
            for i in seqs
        )
    )


@pytest.fixture(autouse=True)
def _no_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHMAKER_CALIBRATION", str(tmp_path / "none.json"))  # no ceiling notes


def test_merge_shards_needs_only_the_files_and_the_config(tmp_path: Path) -> None:
    config = BenchConfig(load="closed:4", max_requests=8, run_id="r1", out_dir=str(tmp_path))
    bundle = tmp_path / "r1"
    bundle.mkdir()
    # two shards, two requests each in flight together: 0..100 ms
    _samples(bundle / "samples-w0.jsonl", range(0, 2), 0)
    _samples(bundle / "samples-w1.jsonl", range(2, 4), 0)
    (bundle / "worker-0.json").write_bytes(orjson.dumps(_report(0)))
    summary = merge_shards(bundle, config, {"default": parse_rate_spec("closed:4")}, 2, [0, 137])
    assert summary["workers"] == 2 and summary["run"]["n_ok"] == 4
    assert summary["target"]["target_concurrency"] == 4  # closed:4, max_requests 8 >= 4
    assert summary["target"]["lanes"] == {"default": {"load": "closed:4", "target_rate_per_s": None, "concurrency": 4}}
    assert "worker 1 died (exit code 137)" in summary["verdict"]["reasons"]
    assert orjson.loads((bundle / "summary.json").read_bytes())["run"]["n_ok"] == 4


def test_a_shards_share_of_max_requests_caps_its_target(tmp_path: Path) -> None:
    config = BenchConfig(load="closed:4", max_requests=3, run_id="r1")
    _samples(tmp_path / "samples.jsonl", range(0, 2), 0)
    checks = {"loop_lag_ms": {"count": 1, "p99": 0.1}}
    # shard 1 of 2: closed:4 gives it 2 workers; max_requests 3 = 2 + 1 gives it 1
    s = build_summary(
        config,
        {"default": parse_rate_spec("closed:4")},
        [tmp_path / "samples.jsonl"],
        checks,
        checks["loop_lag_ms"],
        False,
        run_id="r1",
        worker=1,
        shards=2,
    )
    assert s["target"]["target_concurrency"] == 1
    # interrupted by a signal: named in the summary and its verdict
    s = build_summary(
        config,
        {"default": parse_rate_spec("closed:4")},
        [tmp_path / "samples.jsonl"],
        checks,
        checks["loop_lag_ms"],
        True,
        run_id="r1",
        interrupted_by="SIGTERM",
    )
    assert s["interrupted_by"] == "SIGTERM"
    assert "interrupted by SIGTERM before the end (partial run)" in s["verdict"]["reasons"]
