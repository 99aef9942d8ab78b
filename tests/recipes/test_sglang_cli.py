"""`benchmaker sglang`, and answer grading from the CLI (`--grader`) and from YAML
(`grader:` next to a workload or on a lane), against the scenario server's
`/generate` and `/v1/chat/completions` (answers are always "tok tok ...")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from benchmaker.recipes.cli import main


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
            json.dumps({"content_chunks": 4, "tokens_per_chunk": 2, "cached_tokens": 3}),
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


def bundle_of(out: Path) -> Path:
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    return bundle


def samples_of(out: Path) -> list[dict]:
    return [orjson.loads(x) for x in (bundle_of(out) / "samples.jsonl").read_bytes().splitlines()]


def summary_of(out: Path) -> dict:
    return orjson.loads((bundle_of(out) / "summary.json").read_bytes())


@pytest.fixture
def qa(tmp_path) -> Path:
    """Two questions: the answer "tok" is contained in every reply, "banana" never."""
    path = tmp_path / "qa.jsonl"
    path.write_text('{"q": "say tok", "a": "tok"}\n{"q": "say banana", "a": "banana"}\n')
    return path


def test_sglang_recipe_streams_and_records_meta_info_tokens(server, tmp_path):
    code = main(
        [
            "sglang",
            "--url",
            server + "/generate",
            "--max-requests",
            "3",
            "--max-new-tokens",
            "8",
            "--sampling-params",
            '{"top_p": 0.9}',
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    rows = samples_of(tmp_path)
    assert [r["outcome"] for r in rows] == ["ok"] * 3
    assert [r["token_event_tokens"] for r in rows] == [[2, 2, 2, 2]] * 3  # 4 chunks of 2 tokens
    run = summary_of(tmp_path)["run"]
    assert (run["output_tokens_total"], run["cached_tokens_total"]) == (24, 9)  # 3 x 8, 3 x 3
    manifest = orjson.loads((bundle_of(tmp_path) / "manifest.json").read_bytes())
    assert manifest["workload"]["type"] == "sglang"
    assert manifest["workload"]["sampling_params"]["top_p"] == 0.9
    assert manifest["workload"]["sampling_params"]["max_new_tokens"] == 8  # a token count, not a secret


def test_sglang_recipe_with_input_ids_and_a_grader(server, tmp_path, qa):
    ids = tmp_path / "ids.jsonl"
    ids.write_text("[1, 2, 3]\n")
    code = main(
        [
            "sglang",
            "--url",
            server + "/generate",
            "--max-requests",
            "2",
            "--input-ids-file",
            str(ids),
            "--out-dir",
            str(tmp_path / "a"),
            "--no-progress",
        ]
    )
    assert code == 0 and summary_of(tmp_path / "a")["run"]["n_ok"] == 2
    code = main(
        [
            "sglang",
            "--url",
            server + "/generate",
            "--max-requests",
            "4",
            "--dataset",
            str(qa),
            "--field",
            "q",
            "--reference-field",
            "a",
            "--grader",
            "contains",
            "--out-dir",
            str(tmp_path / "b"),
            "--no-progress",
        ]
    )
    run = summary_of(tmp_path / "b")["run"]
    assert (run["n_graded"], run["n_correct"], run["accuracy"]) == (4, 2, 0.5)  # rows cycle: tok, banana, ...
    assert code == 0  # no --max-error-rate: wrong answers do not invalidate the run


def test_llm_grader_accuracy_and_goodput_of_correct_answers(server, tmp_path, qa):
    main(
        [
            "llm",
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "m",
            "--max-requests",
            "4",
            "--dataset",
            str(qa),
            "--field",
            "q",
            "--reference-field",
            "a",
            "--grader",
            "contains",
            "--slo-e2e-ms",
            "10000",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    rows = samples_of(tmp_path)
    assert [(r["grade"], r["outcome"]) for r in rows] == [
        ("correct", "ok"),
        ("wrong", "graded_wrong"),
        ("correct", "ok"),
        ("wrong", "graded_wrong"),
    ]
    assert rows[1]["error"] == "contains: text does not contain 'banana'"
    run = summary_of(tmp_path)["run"]
    assert (run["n_graded"], run["n_correct"], run["accuracy"], run["n_good_correct"]) == (4, 2, 0.5, 2)
    assert run["goodput_correct_per_s"] == pytest.approx(2 / run["window_s"], rel=1e-12)


def test_yaml_lane_graders_apply_to_their_lane_only(server, tmp_path):
    (tmp_path / "tok.jsonl").write_text('{"q": "say tok", "a": "tok"}\n')
    (tmp_path / "banana.jsonl").write_text('{"q": "say banana", "answer": "banana"}\n')
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"""
out_dir: {tmp_path / "out"}
duration_s: 30s  # an upper bound: each lane stops at its max_requests
mix:
  lanes:
    - name: right
      rate: "closed:1"
      max_requests: 2
      workload: {{type: sglang, url: "{server}/generate", dataset: {{type: jsonl, path: tok.jsonl, field: q, reference_field: a}}}}
      grader: {{type: regex, pattern: "(tok)"}}
    - name: wrong
      rate: "closed:1"
      max_requests: 3
      workload: {{type: openai-chat, url: "{server}/v1/chat/completions", model: m,
                  dataset: {{type: jsonl, path: banana.jsonl, field: q, reference_field: answer}}}}
      grader: {{type: exact}}
    - name: chat
      rate: "closed:1"
      max_requests: 2
      workload: {{type: openai-chat, url: "{server}/v1/chat/completions", model: m}}
""")
    assert main(["run", str(cfg), "--no-progress"]) == 0
    lanes = summary_of(tmp_path / "out")["lanes"]
    # regex group 1 "tok" equals the reference "tok"; "tok tok ..." is not exactly "banana"
    assert (lanes["right"]["n_graded"], lanes["right"]["accuracy"]) == (2, 1.0)
    assert (lanes["wrong"]["n_graded"], lanes["wrong"]["accuracy"], lanes["wrong"]["n_graded_wrong"]) == (3, 0.0, 3)
    assert (lanes["chat"]["n_graded"], lanes["chat"]["accuracy"]) == (0, None)  # no grader on this lane


def test_bad_grader_input_is_one_line_and_exit_2(server, tmp_path, capsys):
    code = main(
        [
            "llm",
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "m",
            "--grader",
            "fuzzy",
            "--max-requests",
            "1",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 2 and "--grader: (top): Input tag 'fuzzy'" in capsys.readouterr().err
    code = main(
        [
            "llm",
            "--url",
            server + "/v1/chat/completions",
            "--model",
            "m",
            "--grader",
            "exact",
            "--workers",
            "2",
            "--max-requests",
            "2",
            "--out-dir",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 2 and "grader: runs in one process only; use workers = 1 (got 2)" in capsys.readouterr().err
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(
        f'max_requests: 1\nworkload: {{type: sglang, url: "{server}/generate"}}\ngrader: {{type: regex, pattern: "("}}\n'
    )
    code = main(["run", str(cfg), "--no-progress"])
    assert code == 2 and "grader.pattern: bad regular expression" in capsys.readouterr().err
