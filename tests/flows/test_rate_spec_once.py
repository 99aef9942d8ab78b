"""A rate spec is parsed once per run, where it enters, and the lag
limits of the sweep commands reach every point's verdict and the run's manifest.

The pydantic type (benchmaker.engine.load_models.ParsedRateSpec) is checked on its own; then
real Prefect runs of `benchmaker swebench-replay` and `benchmaker llm-sweep` from the
CLI (in process, against the session's Prefect test server and, for llm-sweep, a
scenario server on 127.0.0.1) count the calls of parse_rate_spec and judge the points
with an injected loop-lag monitor (fixed figures: nothing depends on how busy the host
is)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from pydantic import BaseModel

from benchmaker.engine.load_models import ClosedLoop, ParsedRateSpec, Poisson, parse_rate_spec
from benchmaker.flows.swebench_replay import ParameterError, validate_params
from tests._fixed_lag import LOOP_LAG_P99_MS, FixedLag
from tests.recipes.test_bench_cli import (
    count_rate_spec_parses,
    server,  # noqa: F401 - the fixture: a scenario server on 127.0.0.1
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "recordings" / "tiny-task.pi.jsonl"


class _Params(BaseModel):
    rates: list[ParsedRateSpec] = []


def test_the_type_parses_a_string_once_and_takes_a_parsed_spec_as_it_is(monkeypatch) -> None:
    calls = count_rate_spec_parses(monkeypatch)
    p = _Params(rates=["poisson:5", "closed:2"])
    assert calls == ["poisson:5", "closed:2"]
    assert [type(r) for r in p.rates] == [ParsedRateSpec, ParsedRateSpec]
    assert (p.rates[0].model, p.rates[1].model) == (Poisson(5.0), ClosedLoop(2))
    again = _Params(rates=p.rates)  # e.g. the CLI's value through Prefect's parameter validation
    assert calls == ["poisson:5", "closed:2"] and again.rates[0] is p.rates[0]
    assert _Params(**p.model_dump()).rates[1] is p.rates[1]  # python dump keeps the object
    assert calls == ["poisson:5", "closed:2"]
    dumped = p.model_dump(mode="json")
    assert dumped == {"rates": ["poisson:5", "closed:2"]} and type(dumped["rates"][0]) is str
    assert p.model_dump_json() == '{"rates":["poisson:5","closed:2"]}'
    assert _Params.model_json_schema()["properties"]["rates"]["items"] == {"type": "string"}


def test_a_bad_spec_is_one_line_naming_the_field_and_the_spec() -> None:
    with pytest.raises(ParameterError) as exc:
        validate_params(logs=[EXAMPLE], concurrency_sweep=[], rates=["poisson:1", "posson:1"])
    assert str(exc.value).splitlines()[1:] == [
        "rates[1]: unknown load model 'posson' in rate spec 'posson:1' (expected constant:RATE, poisson:RATE, "
        "gamma:RATE:BURSTINESS, ramp:FROM..TO@DURATION, stages:R1,R2,...@DURATION, closed:N[:THINK], "
        "trace:FILE[:SPEEDUP]) (got 'posson:1')"
    ]


def test_prefect_cache_keys_and_flow_parameters_see_the_plain_string() -> None:
    from prefect.utilities.hashing import hash_objects

    spec = ParsedRateSpec("poisson:5", parse_rate_spec("poisson:5"))
    # INPUTS cache policy: a resumed run's key equals the first attempt's
    assert hash_objects({"load": spec}, raise_on_failure=True) == hash_objects({"load": "poisson:5"})
    from benchmaker.flows.swebench_replay import swebench_replay

    params = swebench_replay.serialize_parameters({"rates": [spec]})
    assert json.dumps(params) == '{"rates": ["poisson:5"]}'


def _bundle(out_dir: Path) -> Path:
    (bundle,) = [p for p in out_dir.iterdir() if p.is_dir() and not p.name.startswith("_")]
    return bundle


def _points(bundle: Path) -> dict[str, dict]:
    rows = [orjson.loads(line) for line in (bundle / "sweep_points.jsonl").read_bytes().splitlines() if line]
    return {r["sweep_point"]: r for r in rows}


def _lag_reasons(row: dict) -> list[str]:
    return [r for r in (row.get("invalid_reason") or "").split("; ") if "event-loop lag" in r]


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Prefect's client sockets
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_swebench_replay_parses_its_rate_once_and_judges_with_the_given_lag_limit(tmp_path, monkeypatch, capsys):
    from benchmaker.recipes.cli import main

    monkeypatch.setattr("benchmaker.engine.runner.LoopLagMonitor", FixedLag)
    calls = count_rate_spec_parses(monkeypatch)
    args = [
        "swebench-replay",
        "--logs",
        str(EXAMPLE),
        "--concurrency",
        "1",
        "--rate",
        "poisson:50",
        "--episodes-per-point",
        "2",
        "--max-schedule-lag-ms",
        "60000",
        "--warehouse",
        str(tmp_path / "w.duckdb"),
    ]
    code = main([*args, "--out-dir", str(tmp_path / "a"), "--max-loop-lag-ms", "5"])
    # one parse: the CLI's (validate_params); the flow's parameters, the task, the point
    # runner and the engine take the ParsedRateSpec. c1 is built as ClosedLoop(1).
    assert calls == ["poisson:50"]
    assert code == 1, capsys.readouterr().out
    bundle = _bundle(tmp_path / "a")
    config = orjson.loads((bundle / "manifest.json").read_bytes())["config"]
    assert (config["rates"], config["max_loop_lag_ms"], config["max_schedule_lag_ms"]) == (["poisson:50"], 5.0, 60000.0)
    points = _points(bundle)
    assert sorted(points) == ["c1", "poisson-50"]
    for row in points.values():
        assert row["valid"] is False
        assert _lag_reasons(row) == [
            f"engine: event-loop lag p99 {LOOP_LAG_P99_MS:.2f} ms > 5 ms: client-side timestamps include client delay"
        ]
    # a limit above the recorded lag: no lag reason (other reasons a busy host may add
    # are not this test's subject)
    code = main([*args, "--out-dir", str(tmp_path / "b"), "--max-loop-lag-ms", "7.6"])
    assert code in (0, 1)
    bundle = _bundle(tmp_path / "b")
    assert orjson.loads((bundle / "manifest.json").read_bytes())["config"]["max_loop_lag_ms"] == 7.6
    assert [_lag_reasons(r) for r in _points(bundle).values()] == [[], []]


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Prefect's client sockets
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_llm_sweep_parses_each_load_once_and_judges_with_the_given_lag_limit(server, tmp_path, monkeypatch, capsys):
    from benchmaker.recipes.cli import main

    monkeypatch.setattr("benchmaker.engine.runner.LoopLagMonitor", FixedLag)
    calls = count_rate_spec_parses(monkeypatch)
    code = main(
        [
            "llm-sweep",
            "--base-url",
            server,
            "--model",
            "m",
            "--concurrency",
            "2",
            "--rate-sweep",
            "40",
            "--rate",
            "constant:50",
            "--max-requests",
            "4",
            "--duration",
            "20",
            "--max-loop-lag-ms",
            "5",
            "--max-schedule-lag-ms",
            "60000",
            "--out-dir",
            str(tmp_path / "a"),
            "--warehouse",
            str(tmp_path / "w.duckdb"),
        ]
    )
    # --rate parsed once by the CLI; closed:2 and poisson:40 (--rate-sweep, the old spelling
    # kept hidden) are built from their numbers
    assert calls == ["constant:50"]
    assert code == 1, capsys.readouterr().out
    bundle = _bundle(tmp_path / "a")
    config = orjson.loads((bundle / "manifest.json").read_bytes())["config"]
    assert (config["loads"], config["max_loop_lag_ms"], config["max_schedule_lag_ms"]) == (
        ["closed:2", "poisson:40", "constant:50"],
        5.0,
        60000.0,
    )
    points = _points(bundle)
    assert sorted(points) == ["closed-2", "constant-50", "poisson-40"]
    for row in points.values():
        assert row["n_requests"] == 4 and row["valid"] is False
        assert _lag_reasons(row) == [
            f"event-loop lag p99 {LOOP_LAG_P99_MS:.2f} ms > 5 ms: client-side timestamps include client delay"
        ]


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Prefect's client sockets
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_a_flow_called_with_plain_strings_parses_at_its_parameters_once(tmp_path, monkeypatch) -> None:
    # as a deployment run: the parameters arrive as JSON strings; Prefect's validation of
    # the signature parses, the flow body's model and everything after take that object
    from benchmaker.flows.swebench_replay import swebench_replay

    calls = count_rate_spec_parses(monkeypatch)
    out = await swebench_replay(
        logs=[EXAMPLE],
        concurrency_sweep=[],
        rates=["constant:20"],
        episodes_per_point=1,
        max_schedule_lag_ms=60000.0,
        max_loop_lag_ms=60000.0,
        out_dir=tmp_path / "a",
        warehouse=tmp_path / "w.duckdb",
    )
    assert calls == ["constant:20"]
    assert [(r["sweep_point"], r["n_episodes"]) for r in out["points"]] == [("constant-20", 1)]
