"""Self-checks (benchmaker/engine/selfcheck.py) on given figures: the lag arithmetic on a scripted
clock, the verdict's host-load thresholds and where they come from (config, environment,
CLI flags). Nothing here depends on how busy the host is."""

from __future__ import annotations

import asyncio

import pytest

from benchmaker.engine.config import BenchConfig, SelfCheckLimits
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.selfcheck import (
    ENV_MAX_LOOP_LAG_MS,
    ENV_MAX_SCHEDULE_LAG_MS,
    LoopLagMonitor,
    verdict,
)
from tests._host_load import reasons_beyond_host_load

MS = 1_000_000
LIMITS_10 = SelfCheckLimits(max_loop_lag_p99_ms=10, max_schedule_lag_p99_ms=10)


def _lag(p99: float | None) -> dict:
    return {"count": 0 if p99 is None else 100, "p50": p99, "p99": p99, "max": p99}


def _run(schedule_p99: float | None = None, max_concurrency: int = 4) -> dict:
    return {
        "n_sent": 100,
        "n_ok": 100,
        "n_graded_wrong": 0,
        "max_concurrency": max_concurrency,
        "schedule_lag_ms": {"p99": schedule_p99},
    }


def _verdict(
    run: dict,
    loop_p99: float | None = None,
    open_loop: bool = True,
    limits: SelfCheckLimits = LIMITS_10,
    target: int | None = None,
) -> dict:
    return verdict(
        run, limits=limits, open_loop=open_loop, target_concurrency=target, loop_lag=_lag(loop_p99), interrupted=False
    )


async def test_loop_lag_samples_are_wake_minus_sleep_minus_interval_on_a_scripted_clock():
    # (slept, woke) stamps in ms of five 10 ms sleeps: woke 0, 2, 15, -1 (early) and 40 ms late
    stamps = [0, 10, 10, 22, 22, 47, 47, 56, 56, 106]
    script = iter(s * MS for s in stamps)

    def clock() -> int:
        try:
            return next(script)
        except StopIteration:  # the script is over: no sixth sample
            asyncio.current_task().cancel()
            return 106 * MS

    monitor = LoopLagMonitor(interval_s=0.01, clock=clock)
    monitor.start()
    for _ in range(2000):  # real 10 ms sleeps; a busy host only makes them longer
        if len(monitor.lags_ms) == 5:
            break
        await asyncio.sleep(0.005)
    await monitor.stop()
    assert monitor.lags_ms == [0.0, 2.0, 15.0, 0.0, 40.0]  # an early wake-up is no lag, not -1
    # linear p99 over [0, 0, 2, 15, 40]: position 3.96, 15 + 25 * 0.96 = 39
    assert monitor.stats() == {"count": 5, "p50": 2.0, "p99": pytest.approx(39.0), "max": 40.0}


def test_loop_lag_is_judged_against_its_limit_strictly():
    assert _verdict(_run(), loop_p99=10.0)["valid"] is True  # at the limit: valid
    v = _verdict(_run(), loop_p99=10.01)
    assert v["reasons"] == ["event-loop lag p99 10.01 ms > 10 ms: client-side timestamps include client delay"]
    assert _verdict(_run(), loop_p99=None)["valid"] is True  # no sample (a run shorter than one interval)


def test_schedule_lag_is_judged_in_open_loop_only():
    assert _verdict(_run(schedule_p99=11.45))["reasons"] == ["client-saturated: schedule lag p99 11.45 ms > 10 ms"]
    assert _verdict(_run(schedule_p99=11.45), open_loop=False)["valid"] is True  # closed loop waits by design
    assert _verdict(_run(schedule_p99=10.0))["valid"] is True


def test_raised_limits_keep_every_other_reason():
    loose = SelfCheckLimits(max_loop_lag_p99_ms=250, max_schedule_lag_p99_ms=250)
    # the figures of a run on a host at load average 10 (11.45 / 12.08 ms): valid under 250 ms
    assert _verdict(_run(schedule_p99=11.45), loop_p99=12.08, limits=loose)["valid"] is True
    v = _verdict(_run(schedule_p99=300.0, max_concurrency=2), loop_p99=251.0, limits=loose, open_loop=False, target=4)
    assert v["reasons"] == [
        "achieved concurrency 2 never reached the target 4",
        "event-loop lag p99 251.00 ms > 250 ms: client-side timestamps include client delay",
    ]


def test_reasons_beyond_host_load_drop_only_the_two_lag_reasons():
    v = _verdict({**_run(schedule_p99=20.0, max_concurrency=1), "n_ok": 50, "n_timeout": 50}, loop_p99=30.0, target=4)
    assert reasons_beyond_host_load(v) == [
        "error rate 50.00% exceeds max_error_rate 10.00% (50 of 100 requests failed: 50 timeout)",
        "achieved concurrency 1 never reached the target 4",
    ]
    assert reasons_beyond_host_load(_verdict(_run(schedule_p99=20.0), loop_p99=30.0)) == []
    assert reasons_beyond_host_load(_verdict(_run())) == []


def test_lag_limits_default_to_10_ms_or_the_environment_and_an_explicit_value_wins(monkeypatch):
    monkeypatch.delenv(ENV_MAX_LOOP_LAG_MS, raising=False)
    monkeypatch.delenv(ENV_MAX_SCHEDULE_LAG_MS, raising=False)
    assert (SelfCheckLimits().max_loop_lag_p99_ms, SelfCheckLimits().max_schedule_lag_p99_ms) == (10.0, 10.0)
    monkeypatch.setenv(ENV_MAX_LOOP_LAG_MS, "200")
    monkeypatch.setenv(ENV_MAX_SCHEDULE_LAG_MS, " 75.5 ")
    cfg = BenchConfig(load="closed:1", max_requests=1)
    assert (cfg.checks.max_loop_lag_p99_ms, cfg.checks.max_schedule_lag_p99_ms) == (200.0, 75.5)
    assert SelfCheckLimits(max_loop_lag_p99_ms=5).max_loop_lag_p99_ms == 5.0
    # the manifest keeps the limits a run used (config dump), whatever set them
    assert cfg.model_dump()["checks"]["max_loop_lag_p99_ms"] == 200.0


@pytest.mark.parametrize("raw", ["nan", "inf", "0", "-3", "fast"])
def test_a_bad_environment_limit_is_one_error_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(ENV_MAX_LOOP_LAG_MS, raw)
    with pytest.raises(ConfigError) as exc:
        SelfCheckLimits()
    assert str(exc.value) == f"BENCHMAKER_MAX_LOOP_LAG_MS: expected a finite number of ms > 0 (got {raw!r})"


def test_cli_lag_flags_reach_the_config_and_bad_ones_name_the_flag(tmp_path, capsys):
    from benchmaker.recipes.bench import make_config
    from benchmaker.recipes.cli import main

    cfg = make_config(
        load="closed:1",
        max_requests=1,
        out_dir=tmp_path,
        checks={"max_error_rate": None, "max_loop_lag_p99_ms": 40.0, "max_schedule_lag_p99_ms": None},
    )
    assert cfg.checks.max_loop_lag_p99_ms == 40.0
    code = main(
        [
            "http",
            "--url",
            "http://127.0.0.1:9/",
            "--max-requests",
            "1",
            "--out-dir",
            str(tmp_path),
            "--max-loop-lag-ms",
            "-1",
            "--no-progress",
        ]
    )
    assert code == 2
    assert (
        capsys.readouterr().err == "benchmaker: error: --max-loop-lag-ms: Input should be greater than 0 (got -1.0)\n"
    )
