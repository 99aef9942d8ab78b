"""`benchmaker trajectory-replay` as a user runs it (recipes/trajectory_replay.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import orjson
import pytest

from benchmaker.recipes.cli import main
from benchmaker.recipes.trajectory_replay import cache_report


@pytest.fixture(scope="module")
def server():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmaker.testing.scenario_server",
            "--port",
            "0",
            "--scenario",
            json.dumps({"content_chunks": 2, "cached_tokens": 3}),
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


def conv(tag: str, turns: int) -> list[dict]:
    msgs = [{"role": "user", "content": f"start {tag}"}]
    for k in range(turns):
        msgs += [{"role": "assistant", "content": f"reply {k}"}, {"role": "user", "content": f"more {tag} {k}"}]
    return msgs


def test_interleaved_replay_writes_samples_with_cache_meta(server, tmp_path, capsys):
    data = tmp_path / "convs.jsonl"
    data.write_bytes(b"\n".join(orjson.dumps({"id": t, "messages": conv(t, 3)}) for t in "xyz") + b"\n")
    out = tmp_path / "runs"
    code = main(
        [
            "trajectory-replay",
            str(data),
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "m",
            "--sessions",
            "interleaved",
            "--concurrency",
            "2",
            "--active-sessions",
            "3",
            "--think",
            "uniform:1ms..5ms",
            "--out-dir",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    (bundle,) = list(out.iterdir())
    report = cache_report(bundle / "samples.jsonl")
    # 3 conversations x 3 turns; expected = previous prompt's words: turn 1: "user start x" = 3,
    # turn 2: 3 + "assistant reply 0" 3 + "user more x 0" 4 = 10 -> (0 + 3 + 10) x 3 = 39
    assert report == {"samples": 9, "reported": 9, "expected_cached_tokens": 39, "cached_tokens": 27, "ratio": 27 / 39}
    manifest = orjson.loads((bundle / "manifest.json").read_bytes())
    assert manifest["config"]["lanes"][0]["workload"]["sessions"] == "interleaved"
    assert "prefix cache" in capsys.readouterr().out


def test_bad_think_spec_is_one_line_and_exit_2(tmp_path, capsys):
    data = tmp_path / "convs.jsonl"
    data.write_bytes(orjson.dumps(conv("x", 1)) + b"\n")
    code = main(
        [
            "trajectory-replay",
            str(data),
            "--url",
            "http://127.0.0.1:9/v1/chat/completions",
            "--model",
            "m",
            "--think",
            "gauss:1s",
            "--out-dir",
            str(tmp_path),
        ]
    )
    assert code == 2
    assert "think time 'gauss:1s'" in capsys.readouterr().err


def test_yaml_run_file_replays_sessions_with_cache_meta(server, tmp_path, capsys):
    data = tmp_path / "convs.jsonl"
    data.write_bytes(b"\n".join(orjson.dumps({"id": t, "messages": conv(t, 3)}) for t in "xyz") + b"\n")
    cfg = tmp_path / "replay.yaml"
    cfg.write_text(
        "load: closed:2\nduration_s: 30s\nout_dir: runs\n"  # ends when every session ended
        f"workload: {{type: trajectory-replay, url: '{server}/v1/chat/completions', model: m, path: convs.jsonl,\n"
        "           concurrency: 2, sessions: interleaved, active_sessions: 3, think: 'const:1ms'}\n"
    )
    assert main(["run", str(cfg), "--out-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
    (bundle,) = list((tmp_path / "runs").iterdir())
    # the same 9 turns and figures as the CLI recipe (see the test above), without its hook
    assert cache_report(bundle / "samples.jsonl") == {
        "samples": 9,
        "reported": 9,
        "expected_cached_tokens": 39,
        "cached_tokens": 27,
        "ratio": 27 / 39,
    }
    rows = [orjson.loads(x) for x in (bundle / "samples.jsonl").read_bytes().splitlines()]
    assert sorted(r["meta"]["cached_vs_expected"] for r in rows if r["meta"]["turn"] == 2) == [0.3] * 3  # 3 / 10


def test_yaml_trajectory_replay_needs_its_closed_loop(tmp_path, capsys):
    cfg = tmp_path / "replay.yaml"
    cfg.write_text(
        "load: poisson:5\nduration_s: 1s\n"
        "workload: {type: trajectory-replay, url: http://127.0.0.1:9, model: m, path: c.jsonl, concurrency: 2}\n"
    )
    assert main(["run", str(cfg)]) == 2
    assert (
        "a trajectory-replay workload runs on closed:2 (its concurrency; got load 'poisson:5')"
        in capsys.readouterr().err
    )
