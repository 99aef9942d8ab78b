"""Several worker processes, one run (benchmaker/engine/workers.py)."""

from __future__ import annotations

import multiprocessing
import os
from functools import partial

import orjson
import pytest

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.workers import resolve_workers, run_sharded, single_lane
from benchmaker.workloads.http import HttpWorkload


def _http_workload() -> HttpWorkload:
    return HttpWorkload("http://null/")


def _dies_in_worker_1() -> HttpWorkload:
    if multiprocessing.current_process().name == "benchmaker-worker-1":
        os._exit(3)
    return _http_workload()


def _lines(path):
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def test_two_workers_merge_into_one_run_with_the_offered_rate(tmp_path):
    cfg = BenchConfig(load="constant:400", duration_s=1.0, out_dir=tmp_path, transport="null")
    result = run_sharded(cfg, partial(single_lane, _http_workload), workers=2)
    shards = sorted(result.bundle_dir.glob("samples-w*.jsonl"))
    assert [p.name for p in shards] == ["samples-w0.jsonl", "samples-w1.jsonl"]
    counts = [len(_lines(p)) for p in shards]
    run = result.summary["run"]
    assert counts == [200, 200]  # 400 arrivals in 1 s, dealt round-robin
    assert run["n_samples"] == run["n_ok"] == sum(counts)
    assert run["offered_rate_per_s"] == pytest.approx(400.0)  # 399 gaps over 997.5 ms, both shards' arrivals
    # the achieved send rate spans both shards' sends (n_sent - 1) / (last - first sent): a merge
    # that rated one shard alone would give half; how close it is to 400 is the host's business
    sent = sorted(s["sent_ns"] for p in shards for s in _lines(p))
    assert run["achieved_send_rate_per_s"] == pytest.approx(399 / ((sent[-1] - sent[0]) / 1e9))
    # arrivals of the two shards interleave on one timeline: 2.5 ms apart
    intended = sorted(s["intended_ns"] for p in shards for s in _lines(p))
    assert intended[:4] == [0, 2_500_000, 5_000_000, 7_500_000]
    seqs = {s["seq"] for p in shards for s in _lines(p)}
    assert len(seqs) == 400
    workers = result.summary["self_checks"]["workers"]
    assert [w["worker"] for w in workers] == [0, 1] and len({w["pid"] for w in workers}) == 2
    assert result.summary["verdict"]["valid"], result.summary["verdict"]
    assert orjson.loads((result.bundle_dir / "summary.json").read_bytes())["run"]["n_ok"] == 400
    assert orjson.loads((result.bundle_dir / "manifest.json").read_bytes())["workers"] == 2


def test_a_dead_worker_is_in_the_verdict_and_the_others_samples_stay(tmp_path):
    cfg = BenchConfig(load="constant:100", duration_s=0.5, out_dir=tmp_path, transport="null")
    result = run_sharded(cfg, partial(single_lane, _dies_in_worker_1), workers=2)
    assert result.summary["run"]["n_ok"] == 25  # worker 0's half of 50 arrivals
    assert "worker 1 died (exit code 3)" in result.summary["verdict"]["reasons"]


def test_closed_loop_concurrency_is_divided_and_reached(tmp_path):
    cfg = BenchConfig(load="closed:3", max_requests=30, out_dir=tmp_path, transport="null")
    result = run_sharded(cfg, partial(single_lane, _http_workload), workers=2)
    assert result.summary["run"]["n_ok"] == 30
    assert result.summary["target"]["target_concurrency"] == 3


def test_resolve_workers():
    assert resolve_workers("auto") == len(os.sched_getaffinity(0))
    assert resolve_workers(2) == 2
    with pytest.raises(ConfigError, match=r"workers: expected a whole number >= 1 or 'auto' \(got 0\)"):
        resolve_workers(0)
