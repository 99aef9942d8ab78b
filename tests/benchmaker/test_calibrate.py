"""benchmaker.recipes.calibration and `benchmaker calibrate`: the per-host ceiling file, and runs
carrying it in manifest.json and their self-checks."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import RequestSpec
from benchmaker.engine.runner import BenchRunner
from benchmaker.engine.transport import NullTransport
from benchmaker.recipes.calibration import (
    CALIBRATION_ENV,
    calibrate,
    calibration_for_manifest,
    calibration_path,
    ceiling_checks,
    load_calibration,
    write_calibration,
)
from benchmaker.workloads.datasets import StaticDataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload

_BODY = b'{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}],"usage":{"completion_tokens":1}}'


class _NoopWorkload:
    name = "noop"

    def request(self, seq):
        return RequestSpec("POST", "http://noop/", body=b"{}")

    def parser(self, spec):
        return OpenAIChatWorkload("http://noop/", "m", StaticDataset(["x"]), stream=False).parser(spec)


def _noop_run(tmp_path: Path, load: str = "constant:100"):
    cfg = BenchConfig(load=load, duration_s=0.5, out_dir=tmp_path / "runs")
    result = BenchRunner(cfg, workload=_NoopWorkload(), transport=NullTransport(chunks=(_BODY,))).run_sync()
    manifest = orjson.loads((result.bundle_dir / "manifest.json").read_bytes())
    return result, manifest


def _cal(rate: float, hostname: str | None = None) -> dict:
    return {
        "schema": 1,
        "calibrated_at": "2026-01-01T00:00:00+00:00",
        "host": {"hostname": hostname or socket.gethostname()},
        "max_request_rate_per_s": rate,
        "stream_events_per_s": 1.0,
        "timer": {},
        "loop_idle_lag_ms": {},
    }


def test_calibrate_cli_writes_the_file_and_later_runs_carry_it(tmp_path, monkeypatch):
    from benchmaker.recipes.cli import main

    path = tmp_path / "cache" / "calibration.json"
    monkeypatch.setenv(CALIBRATION_ENV, str(path))
    assert calibration_path() == path
    assert main(["calibrate", "--duration", "300ms", "--concurrency", "8", "--sse-chunks", "20"]) == 0
    cal = load_calibration()
    assert cal is not None and cal == orjson.loads(path.read_bytes())
    assert (cal["schema"], cal["seconds"], cal["concurrency"], cal["stream_chunks_per_response"]) == (1, 0.3, 8, 20)
    assert cal["host"]["hostname"] == socket.gethostname()
    assert cal["n_requests"] > 0 and cal["max_request_rate_per_s"] > 0 and cal["request_cpu_us"] > 0
    # every ok stream carries 20 one-token content chunks -> 20 token events each
    assert cal["n_streams"] > 0
    assert cal["stream_events_per_s"] > 0 and cal["stream_events_per_cpu_s"] > 0
    assert cal["timer"]["sleep_overshoot_ms"]["count"] == 200  # 200 sleeps of 1 ms
    assert cal["timer"]["perf_counter_ns_granularity_ns"] > 0
    assert cal["timer"]["sleep_overshoot_ms"]["p99"] >= cal["timer"]["sleep_overshoot_ms"]["p50"]
    assert cal["loop_idle_lag_ms"]["count"] >= 10  # ~0.3 s of 10 ms samples
    # a run afterwards: the calibration in manifest.json, the ratio in self_checks
    result, manifest = _noop_run(tmp_path)
    assert manifest["calibration"] == {**cal, "path": str(path), "host_matches": True}
    sc, run = result.summary["self_checks"], result.summary["run"]
    assert sc["ceiling_req_per_s"] == cal["max_request_rate_per_s"]
    assert sc["calibrated_at"] == cal["calibrated_at"]
    assert sc["offered_rate_vs_ceiling"] == run["offered_rate_per_s"] / cal["max_request_rate_per_s"]
    summary_file = orjson.loads((result.bundle_dir / "summary.json").read_bytes())
    assert summary_file["self_checks"]["offered_rate_vs_ceiling"] == sc["offered_rate_vs_ceiling"]


def test_run_without_calibration_says_none(tmp_path, monkeypatch):
    monkeypatch.setenv(CALIBRATION_ENV, str(tmp_path / "absent.json"))
    result, manifest = _noop_run(tmp_path)
    assert manifest["calibration"] is None
    sc = result.summary["self_checks"]
    assert (sc["offered_rate_vs_ceiling"], sc["ceiling_req_per_s"], sc["calibrated_at"]) == (None, None, None)


def test_a_run_near_the_ceiling_gets_a_note(tmp_path, monkeypatch):
    path = write_calibration(_cal(150.0), tmp_path / "cal.json")
    monkeypatch.setenv(CALIBRATION_ENV, str(path))
    result, _ = _noop_run(tmp_path, "constant:100")
    # constant:100 for 0.5 s: 50 arrivals 10 ms apart -> offered (50 - 1) / 0.49 s = 100 req/s
    assert result.summary["run"]["offered_rate_per_s"] == pytest.approx(100.0)
    ratio = result.summary["self_checks"]["offered_rate_vs_ceiling"]
    assert ratio == pytest.approx(100 / 150)
    assert (
        f"offered rate 100 req/s is {ratio:.0%} of this host's calibrated ceiling (150 req/s): "
        "client limits may shape the latencies"
    ) in result.summary["verdict"]["notes"]
    assert not any("ceiling" in r for r in result.summary["verdict"]["reasons"])  # a note, never a reason


def test_ceiling_checks_exact_and_unusable_calibrations():
    run = {"offered_rate_per_s": 250.0, "achieved_send_rate_per_s": 240.0}
    checks, notes = ceiling_checks({**_cal(1000.0), "host_matches": True}, run)
    assert checks["offered_rate_vs_ceiling"] == 0.25 and notes == []
    # no offered rate (a single request): the achieved send rate stands in
    checks, _ = ceiling_checks(_cal(1000.0), {"offered_rate_per_s": None, "achieved_send_rate_per_s": 500.0})
    assert checks["offered_rate_vs_ceiling"] == 0.5
    checks, notes = ceiling_checks(_cal(400.0), run)
    assert checks["offered_rate_vs_ceiling"] == 0.625 and len(notes) == 1
    for unusable in (None, {"path": "x", "error": "bad"}, {**_cal(1000.0), "host_matches": False}):
        checks, notes = ceiling_checks(unusable, run)
        assert (checks["offered_rate_vs_ceiling"], notes) == (None, [])


def test_bad_calibration_files(tmp_path):
    bad = tmp_path / "cal.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=rf"^{bad}: not a JSON document"):
        load_calibration(bad)
    bad.write_text('{"schema": 1}')
    with pytest.raises(ConfigError, match=rf"^{bad}: calibrated_at: missing"):
        load_calibration(bad)
    # a run never fails for it: the manifest names the problem
    got = calibration_for_manifest(bad)
    assert got == {"path": str(bad), "error": f"{bad}: calibrated_at: missing (not a benchmaker calibration file)"}
    other = write_calibration(_cal(10.0, hostname="elsewhere"), tmp_path / "other.json")
    assert calibration_for_manifest(other)["host_matches"] is False
    assert load_calibration(tmp_path / "none.json") is None
    with pytest.raises(ConfigError, match="--seconds: expected > 0"):
        calibrate(0)
