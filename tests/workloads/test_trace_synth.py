"""Token-count trace synthesis (workloads/trace_synth.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from benchmaker.workloads.datasets import DatasetError
from benchmaker.workloads.trace_synth import TraceSynthDataset, TraceSynthWorkload, synthesize_sessions

ROOT = Path(__file__).resolve().parents[2]

ROWS = [
    {"session": "a", "round": 0, "input": 40, "prefix": 0, "new": 40, "output": 8},
    {"session": "b", "round": 0, "input_tokens": 30, "output_tokens": 5},
    {"session": "a", "round": 1, "input": 100, "prefix": 52, "new": 48, "output": 16},
    {"session": "b", "round": 1, "prefix": 35, "new": 10, "output": 6},
    {"session": "a", "round": 2, "new": 20, "output": 4},  # prefix = previous input 100
    {"session": 7, "output": 3, "input": 12},
]


def write(path: Path, rows) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return path


def test_each_round_starts_with_the_previous_rounds_prompt_bytes(tmp_path):
    sessions = synthesize_sessions(write(tmp_path / "t.jsonl", ROWS), seed=3)
    a = sessions["a"]
    assert [len(it.prompt.split()) for it in a] == [40, 100, 120]  # input counts; round 2: 100 + 20
    for prev, nxt in zip(a, a[1:], strict=False):
        assert nxt.prompt.encode().startswith(prev.prompt.encode() + b" ")
        assert nxt.meta["prefix_sha256"] == prev.meta["prompt_sha256"]
    assert [len(it.prompt.split()) for it in sessions["b"]] == [30, 45]  # 35 + 10
    assert (a[2].meta["prefix_tokens"], a[2].meta["new_tokens"]) == (100, 20)


def test_sessions_get_distinct_filler(tmp_path):
    rows = [{"session": f"s{i}", "input": 16, "output": 1} for i in range(50)]
    sessions = synthesize_sessions(write(tmp_path / "t.jsonl", rows))
    assert len({items[0].prompt for items in sessions.values()}) == 50
    assert len({tuple(items[0].prompt.split()[:4]) for items in sessions.values()}) == 50  # even the first 4 words


def test_orderings(tmp_path):
    path = write(tmp_path / "t.jsonl", ROWS)
    key = lambda ds: [(it.meta["session"], it.meta["round"]) for it in ds]  # noqa: E731
    assert key(TraceSynthDataset(path, order="contiguous")) == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 0),
        ("b", 1),
        ("7", 0),
    ]
    assert key(TraceSynthDataset(path, order="round-robin")) == [
        ("a", 0),
        ("b", 0),
        ("7", 0),
        ("a", 1),
        ("b", 1),
        ("a", 2),
    ]
    shuffled = key(TraceSynthDataset(path, order="shuffled", seed=1))
    assert sorted(shuffled) == sorted(key(TraceSynthDataset(path)))
    assert shuffled == key(TraceSynthDataset(path, order="shuffled", seed=1))  # seeded: the same again
    orders = {tuple(key(TraceSynthDataset(path, order="shuffled", seed=s))) for s in range(20)}
    assert len(orders) > 1  # different seeds give different session orders
    for order in orders:  # rounds of a session stay contiguous and in order
        sessions = [s for s, _ in order]
        assert sessions == sorted(sessions, key=sessions.index)


_PRINT = (
    "import hashlib, sys; from benchmaker.workloads.trace_synth import TraceSynthDataset; "
    "ds = TraceSynthDataset(sys.argv[1], order='shuffled', seed=5); "
    "print(hashlib.sha256('|'.join(it.prompt for it in ds).encode()).hexdigest())"
)


def test_prompts_are_identical_across_processes_with_different_hash_seeds(tmp_path):
    path = write(tmp_path / "t.jsonl", ROWS)
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", _PRINT, str(path)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    assert digests == {
        __import__("hashlib")
        .sha256("|".join(it.prompt for it in TraceSynthDataset(path, order="shuffled", seed=5)).encode())
        .hexdigest()
    }


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"session": "a", "round": 1, "prefix": 10, "new": 5, "output": 1},
            r"t\.jsonl:2: prefix: expected >= the previous round's input 40 for a growing prefix \(got 10\)",
        ),
        (
            {"session": "a", "round": 1, "input": 50, "prefix": 40, "new": 5, "output": 1},
            r"t\.jsonl:2: input: expected input == prefix \+ new \(got 50 != 40 \+ 5\)",
        ),
        ({"session": "a", "round": 1, "input": 50}, r"t\.jsonl:2: output: expected an integer >= 1 \(got None\)"),
        ({"session": "a", "input": -1, "output": 1}, r"t\.jsonl:2: input: expected an integer >= 0 \(got -1\)"),
        ({"round": 1, "input": 50, "output": 1}, r"t\.jsonl:2: session: expected a string or integer"),
        ({"session": "a", "round": 0, "input": 50, "output": 1}, r"t\.jsonl:2: round: session a has round 0 twice"),
    ],
)
def test_bad_rows_name_line_and_field(tmp_path, row, message):
    with pytest.raises(DatasetError, match=message):
        synthesize_sessions(write(tmp_path / "t.jsonl", [ROWS[0], row]))


def test_workload_sends_max_tokens_from_the_output_count(tmp_path):
    ds = TraceSynthDataset(write(tmp_path / "t.jsonl", ROWS))
    wl = TraceSynthWorkload("http://127.0.0.1:1/v1/completions", "m", ds, max_tokens=999)
    bodies = [orjson.loads(wl.request(seq).body) for seq in range(len(ds))]
    assert [b["max_tokens"] for b in bodies] == [8, 16, 4, 5, 6, 3]  # contiguous order a, a, a, b, b, 7
    assert bodies[1]["prompt"].startswith(bodies[0]["prompt"])
    chat = TraceSynthWorkload("http://127.0.0.1:1/v1/chat/completions", "m", ds, api="chat")
    body = orjson.loads(chat.request(0).body)
    assert body["messages"] == [{"role": "user", "content": bodies[0]["prompt"]}] and body["max_tokens"] == 8


def test_yaml_run_file_builds_the_trace_synth_workload(tmp_path):
    from benchmaker.recipes.runfile import read_run_file

    write(tmp_path / "trace.jsonl", ROWS)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "load: closed:1\nmax_requests: 6\nworkload: {type: trace-synth, url: http://127.0.0.1:1/v1/completions,"
        " model: m, path: trace.jsonl, order: round-robin}\n"
    )
    (lane,) = read_run_file(cfg).lanes(tmp_path)  # the path resolves against the file's folder
    bodies = [orjson.loads(lane.workload.request(seq).body) for seq in range(6)]
    assert [b["max_tokens"] for b in bodies] == [8, 5, 3, 16, 6, 4]  # round-robin: a, b, 7, a, b, a
