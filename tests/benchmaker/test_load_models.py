"""Load models and the rate-spec grammar (benchmaker/engine/load_models.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from benchmaker.engine.errors import RateSpecError
from benchmaker.engine.load_models import (
    ClosedLoop,
    Constant,
    Gamma,
    Poisson,
    Ramp,
    Stages,
    Trace,
    parse_duration_s,
    parse_rate_spec,
)


def take(it, n):
    return list(itertools.islice(it, n))


def test_constant_spacing_is_exact():
    assert take(Constant(4).arrivals(), 4) == [(0, None), (250_000_000, None), (500_000_000, None), (750_000_000, None)]


def test_constant_shards_interleave_to_the_single_timeline():
    single = [t for t, _ in take(Constant(10).arrivals(), 10)]
    a = [t for t, _ in take(Constant(10).arrivals(shard=0, shards=2), 5)]
    b = [t for t, _ in take(Constant(10).arrivals(shard=1, shards=2), 5)]
    assert sorted(a + b) == single


def test_poisson_is_seeded_and_has_the_right_mean_rate():
    a = take(Poisson(100).arrivals(seed=7), 20_001)
    assert a == take(Poisson(100).arrivals(seed=7), 20_001)
    assert a != take(Poisson(100).arrivals(seed=8), 20_001)
    rate = 20_000 / (a[-1][0] / 1e9)
    # 20,000 exponential gaps: relative sd of the mean 1/sqrt(20000) = 0.7%; 3 sd = 2.1%
    assert rate == pytest.approx(100, rel=0.021)


def test_poisson_shards_merge_to_the_full_rate():
    horizon = 100 * 1_000_000_000
    n = 0
    for k in range(4):
        for t, _ in Poisson(50).arrivals(seed=1, shard=k, shards=4):
            if t >= horizon:
                break
            n += 1
    # 5,000 expected over 100 s at 50/s; Poisson sd sqrt(5000) = 71; 4 sd = 283
    assert abs(n - 5000) < 283


def test_gamma_mean_rate_and_burstiness_changes_variance():
    def gaps(b):
        ts = [t for t, _ in take(Gamma(100, b).arrivals(seed=3), 10_001)]
        return [y - x for x, y in zip(ts, ts[1:], strict=False)]

    bursty, even = gaps(0.25), gaps(4.0)
    mean = sum(bursty) / len(bursty)
    assert mean / 1e9 == pytest.approx(0.01, rel=0.05)

    def cv2(g):
        m = sum(g) / len(g)
        return sum((x - m) ** 2 for x in g) / len(g) / m / m

    # squared coefficient of variation of gamma gaps = 1 / shape
    assert cv2(bursty) == pytest.approx(4.0, rel=0.15)
    assert cv2(even) == pytest.approx(0.25, rel=0.15)


def test_ramp_integral_matches_expected_count():
    ramp = Ramp(0, 20, 10)  # Λ(10 s) = (0 + 20) / 2 * 10 = 100 arrivals during the ramp
    ts = [t for t, _ in take(ramp.arrivals(), 101)]
    assert ts[100] == 10_000_000_000
    assert ts[25] == 5_000_000_000  # Λ(5) = 20 * 25 / 20 = 25
    # after the ramp the rate holds at 20/s: 50 ms spacing
    assert take(ramp.arrivals(), 102)[101][0] - ts[100] == 50_000_000


def test_stages_label_every_arrival_and_end():
    arrivals = list(Stages((2, 8, 2), 1.0).arrivals())
    labels = [s for _, s in arrivals]
    assert labels == ["s0"] * 2 + ["s1"] * 8 + ["s2"] * 2
    assert arrivals[2][0] == 1_000_000_000 and arrivals[-1][0] == 2_500_000_000


def test_closed_loop_divides_concurrency_over_shards():
    m = ClosedLoop(5)
    assert [m.workers_for(k, 2) for k in range(2)] == [3, 2]


def test_trace_file_offsets_and_speedup(tmp_path: Path):
    f = tmp_path / "trace.jsonl"
    f.write_text('{"timestamp": 10.5}\n{"timestamp": 10.0}\n12\n')
    assert list(Trace.from_file(f, 2).arrivals()) == [(0, None), (250_000_000, None), (1_000_000_000, None)]


def test_trace_bad_line_names_file_and_line(tmp_path: Path):
    f = tmp_path / "trace.txt"
    f.write_text("1\nabc\n")
    with pytest.raises(RateSpecError, match=r"trace.txt:2: timestamp: expected a number of seconds"):
        Trace.from_file(f)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("constant:50", Constant(50)),
        ("poisson:50", Poisson(50)),
        ("gamma:50:0.5", Gamma(50, 0.5)),
        ("ramp:1..20@60s", Ramp(1, 20, 60)),
        ("stages:2,8,2@30s", Stages((2, 8, 2), 30)),
        ("closed:8", ClosedLoop(8)),
        ("closed:8:500ms", ClosedLoop(8, 0.5)),
    ],
)
def test_rate_specs_parse_to_models(spec, expected):
    assert parse_rate_spec(spec) == expected
    assert parse_rate_spec(expected.spec) == expected


@pytest.mark.parametrize(
    "spec, message",
    [
        ("posson:50", r"unknown load model 'posson' in rate spec 'posson:50' \(expected constant:RATE"),
        ("poisson:abc", r"'abc' is not a number"),
        ("poisson:0", r"rate must be in 1e-06..1e\+06 req/s"),
        ("closed:2.5", r"concurrency must be a whole number"),
        ("ramp:1-20@60s", r"expected ramp:FROM..TO@DURATION"),
        ("50", r"expected one of constant:RATE"),
    ],
)
def test_bad_rate_specs_name_the_problem(spec, message):
    with pytest.raises(RateSpecError, match=message):
        parse_rate_spec(spec)


def test_durations():
    assert parse_duration_s("500ms") == 0.5
    assert parse_duration_s("2m") == 120
    assert parse_duration_s(3) == 3.0
    with pytest.raises(RateSpecError, match="expected a duration"):
        parse_duration_s("ten seconds")


def test_a_validated_spec_carries_its_model_and_stays_the_string(tmp_path):
    import copy
    import json
    import pickle

    import orjson

    from benchmaker.engine.config import BenchConfig
    from benchmaker.engine.load_models import ParsedRateSpec, Poisson, load_model_of

    cfg = BenchConfig(load="poisson:5", max_requests=3)
    assert isinstance(cfg.load, ParsedRateSpec) and cfg.load.model == Poisson(5.0)
    assert cfg.load_model() is cfg.load.model  # read, not parsed again
    # the same string for equality, hashing and every serialisation (manifests, flow parameters)
    assert cfg.load == "poisson:5" and hash(cfg.load) == hash("poisson:5")
    assert orjson.dumps(cfg.load) == b'"poisson:5"' and json.dumps(cfg.model_dump()["load"]) == '"poisson:5"'
    assert orjson.loads(cfg.model_dump_json())["load"] == "poisson:5"
    again = BenchConfig.model_validate_json(cfg.model_dump_json())
    assert again == cfg and pickle.loads(pickle.dumps(cfg)) == cfg and copy.deepcopy(cfg) == cfg
    assert pickle.loads(pickle.dumps(cfg.load)).model == Poisson(5.0)
    # a copy that replaces the string without validation parses the new one; assignment validates
    assert cfg.model_copy(update={"load": "closed:4"}).load_model() == ClosedLoop(4)
    cfg.load = "closed:2"
    assert cfg.load.model == ClosedLoop(2)
    # trace specs stay plain strings: their file is read relative to the run's base_dir
    (tmp_path / "t.txt").write_text("0\n0.5\n")
    traced = BenchConfig(load="trace:t.txt")
    assert type(traced.load) is str
    assert list(traced.load_model(tmp_path).arrivals()) == [(0, None), (500_000_000, None)]  # 0 s, 0.5 s
    assert load_model_of(ClosedLoop(3)) == ClosedLoop(3)
