"""benchmaker.flows.swebench_replay.validate_params: bad parameters are refused, naming them,
before any work (plain pydantic, no Prefect run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmaker.flows.swebench_replay import ParameterError, validate_params

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recordings" / "tiny-task.pi.jsonl"


def test_good_parameters_pass() -> None:
    p = validate_params(logs=[EXAMPLE], concurrency_sweep=[1, 5, 25])
    assert p.concurrency_sweep == [1, 5, 25] and p.mode == "recorded"


def test_open_loop_rates_are_points_after_the_closed_ones() -> None:
    p = validate_params(logs=[EXAMPLE], concurrency_sweep=[2], rates=["poisson:0.5", "constant:2"], duration_s=60)
    points = p.points()
    assert [(q.name, q.load, q.concurrency) for q in points] == [
        ("c2", "closed:2", 2),
        ("poisson-0.5", "poisson:0.5", None),
        ("constant-2", "constant:2", None),
    ]
    assert points[1].load is p.rates[0]  # the spec parsed at the edge, passed on as it is
    limits = (p.max_loop_lag_ms, p.max_schedule_lag_ms)  # filled in at the edge (fill_lag_limits)
    assert {(q.duration_s, q.episodes, q.shards, q.max_loop_lag_ms, q.max_schedule_lag_ms) for q in points} == {
        (60.0, None, 1, *limits)
    }
    assert None not in limits
    assert validate_params(logs=[EXAMPLE], concurrency_sweep=[], rates=["poisson:0.5"]).rates == ["poisson:0.5"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"logs": [EXAMPLE], "concurrency_sweep": [0]}, "concurrency_sweep[0]: expected a number >= 1 (got 0)"),
        (
            {"logs": [EXAMPLE], "concurrency_sweep": []},
            "concurrency_sweep: no point to run: give concurrency_sweep or rates (got neither)",
        ),
        ({"logs": [EXAMPLE], "rates": ["posson:1"]}, "rates[0]: unknown load model 'posson'"),
        (
            {"logs": [EXAMPLE], "rates": ["closed:4"]},
            "rates[0]: a closed loop is a concurrency_sweep point, not a rate",
        ),
        ({"logs": [EXAMPLE], "rates": ["poisson:1", "poisson:1"]}, "rates[1]: duplicate point (got 'poisson:1')"),
        (
            {"logs": [EXAMPLE], "workers": 2, "mode": "command", "command": ["x"]},
            "workers: more than one engine worker needs mode recorded (got mode command)",
        ),
        ({"logs": [EXAMPLE], "concurrency_sweep": [1, 1]}, "concurrency_sweep[1]: duplicate point (got 1)"),
        ({"logs": [Path("/nonexistent/x.jsonl")]}, "logs[0]: no such file or directory (got '/nonexistent/x.jsonl')"),
        ({}, "logs: give logs paths or a trajectories file"),
        ({"logs": [EXAMPLE], "episodes_per_point": 2, "duration_s": 5}, "duration_s: give episodes_per_point or"),
        ({"logs": [EXAMPLE], "mode": "command"}, "command: mode command needs the agent command"),
        ({"logs": [EXAMPLE], "latency": "fixed:x"}, "latency: "),
        ({"logs": [EXAMPLE], "mode": "replay"}, "mode: Input should be 'recorded', 'execute' or 'command'"),
        (
            {"logs": [EXAMPLE], "sharded": True, "rates": ["poisson:1"]},
            "rates: open-loop points run on one host (swebench-replay), not in shards (got ['poisson:1'])",
        ),
        (
            {"logs": [EXAMPLE], "sharded": True, "workers": 2},
            "workers: shards are the distributed flow's processes; give shards instead (got 2)",
        ),
        (
            {"logs": [EXAMPLE], "dask_address": "tcp://127.0.0.1:8786"},
            "dask_address: a setting of sharded runs; give sharded true (got 'tcp://127.0.0.1:8786')",
        ),
    ],
)
def test_bad_parameters_are_named(params: dict, message: str) -> None:
    with pytest.raises(ParameterError) as info:
        validate_params(**params)
    assert message in str(info.value)


def test_cli_refuses_bad_sweep_before_prefect_starts(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmaker.recipes.cli import main

    rc = main(["swebench-replay", "--logs", str(EXAMPLE), "--concurrency", "1,0"])
    assert rc == 2
    assert capsys.readouterr().err == "benchmaker: error: --concurrency: expected a number >= 1 (got 0)\n"


# --- one parameters model per flow (benchmaker.flows.common.takes) -----------------------------------

REPO = Path(__file__).resolve().parents[2]


def _flows_and_models():
    from benchmaker.flows.llm_sweep import LlmSweepParams, llm_sweep
    from benchmaker.flows.swebench_replay import SwebenchReplayParams, swebench_replay

    return [(swebench_replay, SwebenchReplayParams), (llm_sweep, LlmSweepParams)]


def test_each_flow_signature_is_its_parameters_model() -> None:
    from prefect.utilities.callables import parameter_schema

    for flow, model in _flows_and_models():
        schema = parameter_schema(flow)
        assert list(schema.properties) == list(model.model_fields), flow.name
        required = [name for name, f in model.model_fields.items() if f.is_required()]
        assert (schema.required or []) == required, flow.name


def test_one_flow_named_swebench_replay_runs_here_or_sharded() -> None:
    import yaml

    entrypoints = {
        d["entrypoint"]
        for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
        if d["flow_name"] == "swebench-replay"
    }
    assert entrypoints == {"flows/swebench_replay.py:swebench_replay"}  # nightly, adhoc and distributed
    p = validate_params(logs=[EXAMPLE], concurrency_sweep=[1, 4], sharded=True, shards=3)
    assert [(q.name, q.shards, q.workers) for q in p.points()] == [("c1", 1, 1), ("c4", 3, 1)]
    assert [q.shards for q in validate_params(logs=[EXAMPLE], concurrency_sweep=[4], shards=3).points()] == [1]


def test_one_flow_named_llm_sweep_runs_here_or_sharded() -> None:
    import yaml

    from benchmaker.flows.common import ParameterError as FlowParameterError
    from benchmaker.flows.common import validated
    from benchmaker.flows.llm_sweep import LlmSweepParams

    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    by_name = {d["name"]: d for d in deployments if d["flow_name"] == "llm-sweep"}
    assert {d["entrypoint"] for d in by_name.values()} == {"flows/llm_sweep.py:llm_sweep"}  # adhoc and distributed
    assert by_name["distributed"]["parameters"]["sharded"] is True
    run = {"base_url": "http://127.0.0.1:8000", "model": "m", "concurrency_sweep": [1, 8]}
    p = validated(LlmSweepParams, "llm-sweep", {**run, "sharded": True, "shards": 3, "start_lead_s": 5.0})
    assert (p.sharded, p.shards, p.backend, p.lead_s, p.shard_deployment) == (
        True,
        3,
        "pool",
        5.0,
        "llm-sweep-shard/shard",
    )
    with pytest.raises(FlowParameterError) as err:
        validated(LlmSweepParams, "llm-sweep", {**run, "exchange": "/tmp/x", "shard_timeout_s": 9.0})
    assert str(err.value).splitlines()[1:] == [
        "exchange: a setting of sharded runs; give sharded true (got '/tmp/x')",
        "shard_timeout_s: a setting of sharded runs; give sharded true (got 9.0)",
    ]


RUN_TIME = {"base_url": "http://127.0.0.1:8000", "model": "m"}


def test_every_deployment_parameters_validate_against_its_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import yaml

    monkeypatch.chdir(REPO)  # prefect.yaml paths are relative to the repository
    models = {id(flow): model for flow, model in _flows_and_models()}
    checked = 0
    for dep in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]:
        path, name = dep["entrypoint"].split(":")
        flow = getattr(importlib.import_module("benchmaker." + path[:-3].replace("/", ".")), name)
        if id(flow) not in models:
            continue  # the shard flows: their one `point` parameter is made by the orchestrator
        # what a run must add: the endpoint of llm-sweep (no default on purpose)
        given = {
            **{k: v for k, v in RUN_TIME.items() if k in flow.parameters.properties},
            **(dep.get("parameters") or {}),
        }
        params = flow.validate_parameters(given)  # what the engine does with a deployment's run
        models[id(flow)](**params)  # and the rules of the flow's model
        checked += 1
    assert checked >= 5  # swebench-replay nightly/adhoc/distributed, llm-sweep and its distributed


def test_takes_refuses_a_function_with_named_parameters() -> None:
    from benchmaker.flows.common import takes
    from benchmaker.flows.swebench_replay import SwebenchReplayParams

    def f(logs: list) -> None: ...

    with pytest.raises(TypeError, match=r"expected a function of \*\*params only"):
        takes(SwebenchReplayParams)(f)


def test_llm_sweep_parameters_name_a_bad_load() -> None:
    from benchmaker.flows.common import validated
    from benchmaker.flows.llm_sweep import LlmSweepParams

    with pytest.raises(ParameterError) as info:
        validated(LlmSweepParams, "llm-sweep", {"base_url": "http://x", "model": "m", "loads": ["posson:5"]})
    assert str(info.value).startswith("invalid llm-sweep parameters:\nloads[0]: ")
    with pytest.raises(ParameterError, match="concurrency_sweep: give concurrency_sweep, rate_sweep or loads"):
        validated(LlmSweepParams, "llm-sweep", {"base_url": "http://x", "model": "m"})
    p = validated(
        LlmSweepParams,
        "llm-sweep",
        {"base_url": "http://x", "model": "m", "concurrency_sweep": [1, 8], "rate_sweep": [2.5]},
    )
    assert [point.load for point in p.points()] == ["closed:1", "closed:8", "poisson:2.5"]


def test_an_llm_sweep_of_messages_needs_max_tokens_and_one_host() -> None:
    """A deployment run meets the rules the CLI states: the Messages API requires
    max_tokens, and its sweeps run unsharded (a sharded run of one shard is one host)."""
    from benchmaker.flows.common import validated
    from benchmaker.flows.llm_sweep import LlmSweepParams

    run = {"base_url": "http://x", "model": "m", "concurrency_sweep": [1], "api": "messages"}
    with pytest.raises(ParameterError) as info:
        validated(LlmSweepParams, "llm-sweep", {**run, "max_tokens": None, "sharded": True, "shards": 2})
    assert str(info.value) == (
        "invalid llm-sweep parameters:\n"
        "max_tokens: required with api messages (the Messages API requires it; got None)\n"
        "api: messages sweeps run on one host (got shards 2)"
    )
    assert [point.api for point in validated(LlmSweepParams, "llm-sweep", run).points()] == ["messages"]
    assert validated(LlmSweepParams, "llm-sweep", {**run, "sharded": True, "shards": 1}).shards == 1


def test_a_closed_point_runs_on_no_more_workers_than_its_concurrency() -> None:
    # workers 4 at c1 would leave three workers with nothing in flight and their share of
    # the point's episodes unplayed (closed:1 on 4 workers sent 1 request of 2)
    p = validate_params(logs=[EXAMPLE], concurrency_sweep=[1, 2, 8], rates=["poisson:3"], duration_s=30, workers=4)
    assert [(q.name, q.workers) for q in p.points()] == [("c1", 1), ("c2", 2), ("c8", 4), ("poisson-3", 4)]
