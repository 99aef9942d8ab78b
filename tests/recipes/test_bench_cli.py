"""`benchmaker llm / http / run` as a user runs them (recipes/bench.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from benchmaker.engine.config import host_in_flight_limit
from benchmaker.recipes.cli import main

SCENARIOS = {
    "default": {"ttft_ms": 10, "itl_ms": 2, "content_chunks": 8},
    "late": {"role_delay_ms": 0, "ttft_ms": 50, "content_chunks": 3},
    "nousage": {"usage": "none", "content_chunks": 7},
}


@pytest.fixture(scope="module")
def server():
    named = [a for name, sc in SCENARIOS.items() if name != "default" for a in ("--named", f"{name}={json.dumps(sc)}")]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmaker.testing.scenario_server",
            "--port",
            "0",
            "--scenario",
            json.dumps(SCENARIOS["default"]),
            *named,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    yield url
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


def only_bundle(out: Path) -> Path:
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    return bundle


def summary_of(out: Path) -> dict:
    return orjson.loads((only_bundle(out) / "summary.json").read_bytes())


def test_llm_poisson_run_writes_a_full_bundle(server, tmp_path, capsys):
    code = main(
        [
            "llm",
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "m",
            "--rate",
            "poisson:100",
            "--duration",
            "2s",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    summary = summary_of(tmp_path)
    run = summary["run"]
    assert code == 0, summary["verdict"]
    assert run["n_ok"] == run["n_samples"] > 150  # ~200 expected at 100/s for 2 s
    # achieved send rate as defined over the bundle's samples: (n_sent - 1) / (last - first sent)
    # (whether it keeps up with the offered rate is the verdict's business; test_golden.py)
    sent = sorted(
        orjson.loads(x)["sent_ns"] for x in (only_bundle(tmp_path) / "samples.jsonl").read_bytes().splitlines()
    )
    assert run["achieved_send_rate_per_s"] == pytest.approx((len(sent) - 1) / ((sent[-1] - sent[0]) / 1e9))
    assert run["usage_coverage"] == 1.0
    assert run["output_tokens_total"] == 8 * run["n_ok"]  # 8 one-token chunks per answer
    for metric in ("ttft_ms", "ttfc_ms", "itl_event_ms", "tpot_ms", "e2e_ms", "schedule_lag_ms"):
        assert run[metric]["count"] > 0 and run[metric]["p99"] is not None, metric
    manifest = orjson.loads((only_bundle(tmp_path) / "manifest.json").read_bytes())
    assert manifest["config"]["load"] == "poisson:100"
    assert "verdict: valid" in capsys.readouterr().out


def test_role_only_chunk_then_token_at_50ms_gives_ttft_50ms(server, tmp_path):
    code = main(
        [
            "llm",
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "late",
            "--rate",
            "closed:1",
            "--max-requests",
            "3",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    run = summary_of(tmp_path)["run"]
    assert code == 0
    # the role chunk goes out at 0 ms; the first token at 50 ms (plus loopback + scheduling: the
    # idle host adds < 5 ms, a busy one up to ~215 ms here). The lower bound is what is tested
    # (a role chunk taken for the first token gives ~0 ms); the upper one only catches a hang.
    assert 50.0 <= run["ttft_ms"]["min"] and run["ttft_ms"]["max"] < 1050.0


def test_missing_usage_gives_null_totals_with_the_reason(server, tmp_path):
    main(
        [
            "llm",
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "nousage",
            "--rate",
            "closed:1",
            "--max-requests",
            "4",
            "--max-tokens",
            "100",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    summary = summary_of(tmp_path)
    run = summary["run"]
    assert run["output_tokens_total"] is None and run["usage_coverage"] == 0.0
    assert run["token_totals_null_reason"] == "4 of 4 successful requests lack server usage"
    assert run["output_throughput_tok_per_s"] is None and run["tpot_ms"]["count"] == 0
    assert "token totals are null: 4 of 4 successful requests lack server usage" in summary["verdict"]["notes"]


def test_unreachable_server_gives_transport_errors_and_exit_1(tmp_path, capsys):
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    code = main(
        [
            "llm",
            "--url",
            f"http://127.0.0.1:{port}/v1/chat/completions",
            "--model",
            "m",
            "--max-requests",
            "3",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 1
    lines = (only_bundle(tmp_path) / "samples.jsonl").read_bytes().splitlines()
    assert [orjson.loads(x)["outcome"] for x in lines] == ["transport_error"] * 3
    assert "verdict: INVALID - no request succeeded" in capsys.readouterr().out


def test_bad_rate_spec_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(
        [
            "llm",
            "--url",
            "http://127.0.0.1:1/v1/chat/completions",
            "--model",
            "m",
            "--rate",
            "posson:5",
            "--duration",
            "1s",
            "--out-dir",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("benchmaker: error: --rate: unknown load model 'posson' in rate spec 'posson:5'")
    assert "Traceback" not in err and not list(tmp_path.iterdir())


def test_unknown_config_key_names_file_and_line(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("load: constant:5\nduration_s: 1s\nmax_inflight: 3\nworkload: {type: http, url: http://x}\n")
    assert main(["run", str(cfg)]) == 2
    assert capsys.readouterr().err.strip() == f"benchmaker: error: {cfg}:3: max_inflight: unknown key"


def test_unset_variable_names_file_and_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("BM_TEST_URL", raising=False)
    cfg = tmp_path / "run.yaml"
    cfg.write_text("load: constant:5\nduration_s: 1s\nworkload:\n  type: http\n  url: ${BM_TEST_URL}\n")
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"benchmaker: error: {cfg}:5: workload.url: environment variable BM_TEST_URL is not set"


def test_yaml_two_lanes_with_typed_interpolation_and_dotenv(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"BM_URL={server}/v1/chat/completions\nBM_RATE=20\n")
    cfg = tmp_path / "mix.yaml"
    cfg.write_text(
        "duration_s: 1s\n"
        "out_dir: out\n"
        "mix:\n"
        "  lanes:\n"
        "    - name: chat\n"
        "      rate: constant:${BM_RATE}\n"
        "      workload: {type: openai-chat, url: '${BM_URL}', model: m, max_tokens: 16}\n"
        "    - name: rag\n"
        "      rate: stages:5,15@0.5s\n"
        "      workload: {type: openai-chat, url: '${BM_URL}', model: m,\n"
        "                 dataset: {type: static, items: [hello]}}\n"
    )
    code = main(["run", str(cfg), "--no-progress"])
    summary = summary_of(tmp_path / "out")
    assert code == 0, summary["verdict"]
    assert summary["lanes"]["chat"]["n_ok"] == 20  # 1 s at 20/s
    # 0.5 s at 5/s: 0, 200, 400 ms; then 0.5 s at 15/s: 0, 66.7, ..., 466.7 ms
    assert summary["lanes"]["rag"]["n_ok"] == 3 + 8
    assert summary["stages"] == {"s0": summary["stages"]["s0"], "s1": summary["stages"]["s1"]}
    assert summary["stages"]["s0"]["n_ok"] == 3
    lanes = {
        orjson.loads(x)["lane"] for x in (only_bundle(tmp_path / "out") / "samples.jsonl").read_bytes().splitlines()
    }
    assert lanes == {"chat", "rag"}


@pytest.mark.parametrize("name", ["llm.yaml", "http.yaml", "mixed-lanes.yaml"])
def test_example_configs_validate(name, monkeypatch):
    from benchmaker.recipes.runfile import read_run_file

    monkeypatch.setenv("URL", "http://127.0.0.1:9/v1/chat/completions")
    path = Path(__file__).resolve().parents[2] / "examples" / "configs" / name
    rf = read_run_file(path)
    assert rf.lanes(path.parent)


def test_bad_lane_rate_names_file_line_and_field(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "duration_s: 1s\nmix:\n  lanes:\n    - name: a\n      rate: posson:5\n"
        "      workload: {type: http, url: http://x}\n"
    )
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"benchmaker: error: {cfg}:5: mix.lanes[0].rate: unknown load model 'posson'")


def test_llm_with_two_workers_writes_one_bundle_with_the_single_run_fields(server, tmp_path):
    args = [
        "llm",
        "--url",
        server + "/v1/chat/completions",
        "--model",
        "m",
        "--rate",
        "constant:100",
        "--duration",
        "1s",
        "--no-progress",
    ]
    assert main([*args, "--out-dir", str(tmp_path / "one")]) == 0
    assert main([*args, "--out-dir", str(tmp_path / "two"), "--workers", "2"]) == 0
    one, two = summary_of(tmp_path / "one"), summary_of(tmp_path / "two")
    assert set(two) - set(one) == {"workers"} and set(one) <= set(two)
    assert set(two["run"]) == set(one["run"])
    assert two["run"]["n_ok"] == one["run"]["n_ok"] == 100
    assert [w["worker"] for w in two["self_checks"]["workers"]] == [0, 1]
    for w in two["self_checks"]["workers"]:
        assert w["loop_lag_ms"]["p99"] is not None and w["max_in_flight"] >= 1
    names = sorted(p.name for p in only_bundle(tmp_path / "two").glob("samples-w*.jsonl"))
    assert names == ["samples-w0.jsonl", "samples-w1.jsonl"]


def count_rate_spec_parses(monkeypatch) -> list[str]:
    """Wrap benchmaker.engine.load_models.parse_rate_spec wherever a loaded module bound it; the
    returned list gets the spec of every call."""
    import benchmaker.engine.load_models as load_models

    original, calls = load_models.parse_rate_spec, []

    def counting(spec, **kwargs):
        calls.append(spec)
        return original(spec, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "parse_rate_spec", None) is original:
            monkeypatch.setattr(module, "parse_rate_spec", counting)
    return calls


@pytest.mark.parametrize("rate", [["--rate", "poisson:100"], ["--rate", "closed:2"], []])
def test_llm_parses_its_rate_spec_once(server, tmp_path, monkeypatch, rate):
    # the spec is parsed where it enters (BenchConfig validation); the
    # config checks and the runner read that model. No --rate: the default closed:1.
    calls = count_rate_spec_parses(monkeypatch)
    code = main(
        [
            "llm",
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "m",
            *rate,
            "--max-requests",
            "4",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0, summary_of(tmp_path)["verdict"]
    assert calls == [rate[1] if rate else "closed:1"]
    assert summary_of(tmp_path)["run"]["n_ok"] == 4
    manifest = orjson.loads((only_bundle(tmp_path) / "manifest.json").read_bytes())
    assert manifest["config"]["load"] == (rate[1] if rate else "closed:1")


def test_run_file_parses_each_lane_rate_once(server, tmp_path, monkeypatch):
    # one parse per lane, plus the run's own `load` (a validated field, default closed:1)
    cfg = tmp_path / "mix.yaml"
    cfg.write_text(
        f"max_requests: 6\nout_dir: {tmp_path / 'out'}\nmix:\n  lanes:\n"
        f"    - {{name: a, rate: 'constant:50', workload: {{type: openai-chat, url: '{server}/v1/chat/completions', model: m}}}}\n"
        f"    - {{name: b, rate: 'closed:1', max_requests: 2, workload: {{type: openai-chat, url: '{server}/v1/chat/completions', model: m}}}}\n"
    )
    calls = count_rate_spec_parses(monkeypatch)
    code = main(["run", str(cfg), "--no-progress"])
    assert code == 0, summary_of(tmp_path / "out")["verdict"]
    assert sorted(calls) == ["closed:1", "closed:1", "constant:50"]


def test_failed_metrics_scrapes_are_printed_beside_the_verdict(server, tmp_path, capsys):
    sock = socket.create_server(("127.0.0.1", 0))  # a port where nothing listens: every scrape fails
    port = sock.getsockname()[1]
    sock.close()
    metrics = f"http://127.0.0.1:{port}/metrics"
    main(
        [
            "llm",
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "m",
            "--rate",
            "closed:1",
            "--max-requests",
            "3",
            "--metrics-url",
            metrics,
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    ((name, stats),) = summary_of(tmp_path)["self_checks"]["monitors"].items()
    # sampled when the clock starts and when the run stops, at least: every one failed
    assert stats["samples"] >= 2 and stats["errors"] == stats["samples"] and stats["rows"] == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        f"monitor {name}: {stats['samples']} of {stats['samples']} scrapes failed (last error: "
        f"{' '.join(stats['last_error'].split())}); monitor.jsonl lacks them"
    ) in out


def test_concurrency_n_is_the_closed_loop_of_n_and_excludes_rate(server, tmp_path, capsys):
    argv = ["llm", "--url", server + "/v1/chat/completions", "--model", "m", "--max-requests", "4", "--no-progress"]
    assert main([*argv, "--concurrency", "2", "--out-dir", str(tmp_path / "a")]) == 0
    assert main([*argv, "--rate", "closed:2", "--out-dir", str(tmp_path / "b")]) == 0
    assert main([*argv, "--out-dir", str(tmp_path / "c")]) == 0
    loads = [orjson.loads((only_bundle(tmp_path / d) / "manifest.json").read_bytes())["config"]["load"] for d in "abc"]
    assert loads == ["closed:2", "closed:2", "closed:1"]
    capsys.readouterr()
    assert main([*argv, "--concurrency", "2", "--rate", "poisson:5", "--out-dir", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == (
        "benchmaker: error: --concurrency and --rate: give one (--concurrency 2 is --rate closed:2)\n"
    )
    assert main([*argv, "--concurrency", "0", "--out-dir", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == "benchmaker: error: --concurrency: expected an integer in 1..1000000 (got 0)\n"
    # over the limits: the flag given is named, not the --rate it becomes
    assert main([*argv, "--concurrency", "1000001", "--out-dir", str(tmp_path / "d")]) == 2
    assert (
        capsys.readouterr().err == "benchmaker: error: --concurrency: expected an integer in 1..1000000 (got 1000001)\n"
    )
    over = host_in_flight_limit()[0] + 1  # over this host's file descriptors, within 1..1000000
    if over <= 1_000_000:
        assert main([*argv, "--concurrency", str(over), "--out-dir", str(tmp_path / "d")]) == 2
        assert capsys.readouterr().err.startswith(
            f"benchmaker: error: --concurrency: closed-loop concurrency {over} over 1 worker process(es) is {over} in "
            "flight per process, more than this host can hold ("
        )
    assert not (tmp_path / "d").exists()
