"""Datasets: field paths, JSONL, ShareGPT, synthetic, static; errors name path:line: field."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from benchmaker.workloads.datasets import (
    DatasetError,
    JsonlDataset,
    ShareGPTDataset,
    StaticDataset,
    SyntheticDataset,
    get_field,
    parse_field_path,
)


def test_field_path_parses_keys_and_indexes():
    assert parse_field_path("a.b[0].c") == ["a", "b", 0, "c"]
    assert get_field({"a": {"b": [{"c": 7}]}}, ["a", "b", 0, "c"]) == 7
    for bad in ["", "a..b", "a.", "a[x]", ".a"]:
        with pytest.raises(DatasetError, match="expected keys and"):
            parse_field_path(bad)


def test_jsonl_field_path_items_cycle_by_seq(tmp_path):
    f = tmp_path / "p.jsonl"
    rows = [
        {"req": {"turns": ["first"]}},
        {"req": {"turns": [[{"role": "user", "content": "second"}]]}},
    ]
    f.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n\n")
    ds = JsonlDataset(f, "req.turns[0]")
    assert len(ds) == 2
    assert ds.item(0).prompt == "first"
    assert ds.item(3).messages == [{"role": "user", "content": "second"}]  # 3 % 2 == 1
    assert ds.item(2).meta == {"dataset": "p.jsonl", "row": 1}


def test_jsonl_missing_field_names_path_line_and_field(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n{"promt": "typo"}\n')
    with pytest.raises(DatasetError, match=r"p\.jsonl:2: prompt: missing at prompt \(got \{'promt': 'typo'\}\)"):
        JsonlDataset(f)


def test_jsonl_wrong_type_and_bad_json(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": 3}\n')
    with pytest.raises(DatasetError, match=r"p\.jsonl:1: prompt: expected a string or a list of messages \(got 3\)"):
        JsonlDataset(f)
    f.write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(DatasetError, match=r"p\.jsonl:2: bad JSON"):
        JsonlDataset(f)
    f.write_text('{"m": [{"role": "robot", "content": "x"}]}\n')
    with pytest.raises(DatasetError, match=r"p\.jsonl:1: m\[0\]\.role: expected one of"):
        JsonlDataset(f, "m")


def test_sharegpt_takes_first_human_turn_and_skips_leading_assistant(tmp_path):
    f = tmp_path / "sg.json"
    records = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "sys"},
                {"from": "human", "value": "q1"},
                {"from": "gpt", "value": "a1"},
                {"from": "human", "value": "q2"},
            ],
        },
        {
            "id": "b",
            "conversations": [  # starts with the assistant
                {"from": "gpt", "value": "Hello! How can I help?"},
                {"from": "human", "value": "q"},
            ],
        },
        {"id": "c", "conversations": [{"from": "gpt", "value": "only assistant"}]},
    ]
    f.write_bytes(orjson.dumps(records))
    ds = ShareGPTDataset(f)
    assert len(ds) == 2 and ds.skipped_records == 1  # record c has no human turn
    a, b = ds.item(0), ds.item(1)
    assert a.messages == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"}]
    assert a.reference == "a1"
    assert b.messages == [{"role": "user", "content": "q"}]
    assert b.reference is None
    assert b.meta == {"dataset": "sg.json", "row": 1, "skipped_turns": 1}


def test_sharegpt_jsonl_bad_role_names_line_and_field(tmp_path):
    f = tmp_path / "sg.jsonl"
    f.write_text(
        '{"conversations": [{"from": "human", "value": "q"}]}\n{"conversations": [{"from": "bot", "value": "q"}]}\n'
    )
    with pytest.raises(
        DatasetError, match=r"sg\.jsonl:2: conversations\[0\]\.from: expected human, gpt or system \(got 'bot'\)"
    ):
        ShareGPTDataset(f)


def test_synthetic_is_deterministic_across_processes():
    ds = SyntheticDataset([3, 5], count=4, seed=7)
    assert [len(i.prompt.split()) for i in ds] == [3, 5, 3, 5]
    assert SyntheticDataset([3, 5], count=4, seed=8).item(0).prompt != ds.item(0).prompt
    # a fresh interpreter with another hash seed makes the same prompts (no salted hash())
    code = "from benchmaker.workloads.datasets import SyntheticDataset as S; print([i.prompt for i in S([3, 5], count=4, seed=7)])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        cwd=str(__import__("pathlib").Path(__file__).parents[2]),
    )
    assert out.stdout.strip() == repr([i.prompt for i in ds])


def test_synthetic_rejects_bad_lengths():
    with pytest.raises(DatasetError, match=r"synthetic: input_words: expected integers >= 1 \(got \[0\]\)"):
        SyntheticDataset([0])


def test_static_items_and_errors():
    ds = StaticDataset(["p", {"messages": [{"role": "user", "content": "m"}], "meta": {"k": 1}}])
    assert ds.item(0).as_messages() == [{"role": "user", "content": "p"}]
    assert ds.item(1).meta == {"k": 1, "dataset": "static", "row": 1}
    with pytest.raises(DatasetError, match=r"static:\[0\]: prompt: expected exactly one of prompt, messages"):
        StaticDataset([{"prompt": "a", "messages": []}])
    with pytest.raises(DatasetError, match=r"static:\[0\]: promt: unknown key"):
        StaticDataset([{"promt": "a"}])
