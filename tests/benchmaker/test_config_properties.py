"""Property tests of the configuration path: rate specs, durations and
YAML run files built by hypothesis, valid or not, either parse into bounded values or
raise the documented error (ConfigError and subclasses), never anything else."""

from __future__ import annotations

import itertools
import math
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.load_models import (
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    MAX_RATE_PER_S,
    MIN_RATE_PER_S,
    Burst,
    ClosedLoop,
    Gamma,
    Ramp,
    Stages,
    parse_duration_s,
    parse_rate_spec,
)
from benchmaker.recipes.runfile import read_run_file

PROFILE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.sampled_from([0, -0.0, 1e-300, 1e300, 1e6, 1e6 + 1, 2**63, "inf", "-inf", "nan", "1e12", "0x10", "1_000"]),
)
number_text = numbers.map(str)
junk = st.text(alphabet=string.printable, max_size=12)
durations = st.one_of(
    st.builds(lambda n, u: f"{n}{u}", number_text, st.sampled_from(["", "ms", "s", "m", "h", "d", " s"])), junk
)


def rate_specs():
    kinds = st.sampled_from(["constant", "poisson", "gamma", "ramp", "stages", "closed", "Poisson", "posson", ""])
    part = st.one_of(number_text, junk)
    return st.one_of(
        st.builds(lambda k, a: f"{k}:{a}", kinds, part),
        st.builds(lambda a, b: f"gamma:{a}:{b}", part, part),
        st.builds(lambda a, b, d: f"ramp:{a}..{b}@{d}", part, part, durations),
        st.builds(lambda rs, d: "stages:" + ",".join(rs) + f"@{d}", st.lists(part, max_size=4), durations),
        st.builds(lambda n, t: f"closed:{n}:{t}", part, durations),
        junk,
    )


@PROFILE
@given(durations)
def test_a_duration_is_bounded_or_a_config_error(text):
    try:
        value = parse_duration_s(text, "--duration")
    except ConfigError as exc:
        assert str(exc).startswith("--duration: ")
        return
    assert math.isfinite(value) and 0 <= value <= MAX_DURATION_S


@PROFILE
@given(numbers.filter(lambda v: not isinstance(v, str)))
def test_a_numeric_duration_is_bounded_or_a_config_error(value):
    try:
        out = parse_duration_s(value)
    except ConfigError:
        assert not (isinstance(value, (int, float)) and 0 <= value <= MAX_DURATION_S)
        return
    assert out == float(value) and 0 <= out <= MAX_DURATION_S


@PROFILE
@given(rate_specs())
def test_a_rate_spec_parses_to_a_bounded_model_or_a_config_error(spec):
    try:
        model = parse_rate_spec(spec)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    if isinstance(model, ClosedLoop):
        assert 1 <= model.concurrency <= MAX_CONCURRENCY and 0 <= model.think_s <= MAX_DURATION_S
        return
    if isinstance(model, Burst):
        assert model.target_rate_per_s() is None
    elif isinstance(model, Ramp):
        assert 0 <= model.start_per_s <= MAX_RATE_PER_S and MIN_RATE_PER_S <= model.end_per_s <= MAX_RATE_PER_S
    elif isinstance(model, Stages):
        assert all(MIN_RATE_PER_S <= r <= MAX_RATE_PER_S for r in model.rates_per_s)
        assert 0 < model.stage_s <= MAX_DURATION_S
    else:
        assert MIN_RATE_PER_S <= model.target_rate_per_s() <= MAX_RATE_PER_S
        if isinstance(model, Gamma):
            assert 1e-3 <= model.burstiness <= 1e3
    # the first arrivals of every shard come out as ints, in order (no overflow, no NaN)
    for shard in range(2):
        offsets = [o for o, _ in itertools.islice(model.arrivals(seed=1, shard=shard, shards=2), 5)]
        assert offsets == sorted(offsets) and all(isinstance(o, int) and o >= 0 for o in offsets)


@PROFILE
@given(rate_specs(), st.one_of(st.none(), durations, numbers), st.one_of(st.none(), numbers))
def test_bench_config_is_valid_or_a_value_error(load, duration, max_requests):
    """BenchConfig raises pydantic's ValidationError (a ValueError) or ConfigError on
    bad input; a valid one has bounded numbers."""
    try:
        cfg = BenchConfig(load=load, duration_s=duration, max_requests=max_requests)
    except ValueError:
        return
    assert cfg.duration_s is None or 0 < cfg.duration_s <= MAX_DURATION_S
    assert cfg.max_requests is None or 1 <= cfg.max_requests <= 10**9


yaml_scalars = st.one_of(st.none(), st.booleans(), numbers, junk, rate_specs(), durations)
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["type", "url", "name", "rate", "x"]), inner, max_size=3),
    ),
    max_leaves=8,
)
run_keys = st.sampled_from(
    [
        "load",
        "duration_s",
        "max_requests",
        "warmup_s",
        "cooldown_s",
        "max_in_flight",
        "overflow",
        "timeouts",
        "slo",
        "checks",
        "seed",
        "run_id",
        "label",
        "workers",
        "workload",
        "mix",
        "record_trace",
        "bogus",
    ]
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(run_keys, yaml_values, max_size=6), st.booleans())
def test_a_run_file_is_read_or_a_config_error_naming_the_file(tmp_path_factory, data, as_text):
    path: Path = tmp_path_factory.mktemp("rf") / "run.yaml"
    text = yaml.safe_dump(data, allow_unicode=True) if as_text else str(data)
    path.write_text(text)
    try:
        read_run_file(path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path)), str(exc)
        assert "Traceback" not in str(exc)


@pytest.mark.parametrize("depth", [5, 50])
def test_nested_aliases_of_any_depth_are_counted_not_expanded(tmp_path, depth):
    lines = ['a0: &a0 ["x", "x", "x"]'] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, depth)]
    path = tmp_path / "run.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as info:
        read_run_file(path)
    # 3^depth nodes: past 100,000 from depth 11 on; a small one fails on its keys instead
    assert ("YAML aliases expand to more than 100000 nodes" in str(info.value)) == (depth > 10)
