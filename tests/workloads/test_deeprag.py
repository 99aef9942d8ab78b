"""DeepRAG dataset (workloads/deeprag.py): packing, meta, passthrough, YAML spec."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pydantic import TypeAdapter

from benchmaker.engine.config import BenchConfig
from benchmaker.engine.runner import BenchRunner
from benchmaker.testing.scenario_server import ScenarioServer
from benchmaker.workloads.datasets import DatasetError
from benchmaker.workloads.deeprag import DeepRAGDataset
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from benchmaker.workloads.registry import DatasetSpec, build_dataset

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data" / "deeprag.jsonl"


def write_rows(path: Path, *rows: object) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return path


ROW = {
    "id": "q-secret-7",
    "question": "Who?",
    "answer": "zebra-answer",
    "passages": ["one two three", {"title": "T", "text": "four five six seven"}, "eight nine", "ten"],
}


def test_depth_caps_the_number_of_passages(tmp_path):
    ds = DeepRAGDataset(write_rows(tmp_path / "d.jsonl", ROW), depth=2)
    item = ds.item(0)
    assert item.meta["depth"] == 2
    assert item.meta["passages_available"] == 4
    # "[1] one two three" = 4 words, "[2] T\nfour five six seven" = 6 words
    assert item.meta["context_tokens_est"] == 10
    assert "[3]" not in item.prompt


def test_context_target_stops_before_the_passage_that_would_exceed_it(tmp_path):
    ds = DeepRAGDataset(write_rows(tmp_path / "d.jsonl", ROW), depth=4, context_tokens_target=12)
    meta = ds.item(0).meta
    # passage texts in words: "[1] one two three" 4, "[2] T four five six seven" 6,
    # "[3] eight nine" 3, "[4] ten" 2. 4+6 = 10 <= 12; +3 = 13 > 12 -> stop at 2.
    assert (meta["depth"], meta["context_tokens_est"], meta["over_target"]) == (2, 10, False)
    assert ds.item(0).prompt == (
        "Answer the question using the passages below.\n\n[1] one two three\n\n[2] T\nfour five six seven"
        "\n\nQuestion: Who?\nAnswer:"
    )
    # the header (7 words) + 4 + 6 + "Question: Who? Answer:" (3 words) = 20
    assert meta["prompt_tokens_est"] == 20
    assert meta["prompt_chars"] == len(ds.item(0).prompt)


def test_first_passage_is_kept_even_over_the_target(tmp_path):
    meta = DeepRAGDataset(write_rows(tmp_path / "d.jsonl", ROW), context_tokens_target=1).item(0).meta
    assert (meta["depth"], meta["context_tokens_est"], meta["over_target"]) == (1, 4, True)


def test_passthrough_meta_reaches_meta_and_reference_but_never_the_body(tmp_path):
    ds = DeepRAGDataset(write_rows(tmp_path / "d.jsonl", ROW), passthrough_meta=["answer", "id"])
    item = ds.item(0)
    assert item.meta["answer"] == "zebra-answer" and item.meta["id"] == "q-secret-7"
    assert item.reference == "zebra-answer"
    spec = OpenAIChatWorkload("http://127.0.0.1:1/v1/chat/completions", "m", ds).request(0)
    assert spec.meta["id"] == "q-secret-7"
    assert b"zebra-answer" not in spec.body and b"q-secret-7" not in spec.body
    assert b"four five six seven" in spec.body


def test_missing_passthrough_field_names_line_and_field(tmp_path):
    path = write_rows(tmp_path / "d.jsonl", ROW)
    with pytest.raises(DatasetError, match=r"d\.jsonl:1: meta\.gold: passthrough field missing at meta"):
        DeepRAGDataset(path, passthrough_meta=["meta.gold"])


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "", "passages": ["a"]}, r"d\.jsonl:2: question: expected a non-empty string"),
        ({"question": "q", "passages": []}, r"d\.jsonl:2: passages: expected a non-empty list"),
        ({"question": "q", "passages": ["a", {"title": "x"}]}, r"d\.jsonl:2: passages\[1\]\.text: expected a string"),
        ({"question": "q", "passages": [3]}, r"d\.jsonl:2: passages\[0\]: expected a string or \{title, text\}"),
        ({"question": "q", "answer": 4, "passages": ["a"]}, r"d\.jsonl:2: answer: expected a string \(got 4\)"),
    ],
)
def test_bad_rows_name_line_and_field(tmp_path, row, message):
    with pytest.raises(DatasetError, match=message):
        DeepRAGDataset(write_rows(tmp_path / "d.jsonl", ROW, row))


def test_yaml_spec_builds_the_dataset_relative_to_the_config_folder():
    spec = TypeAdapter(DatasetSpec).validate_python(
        {
            "type": "deeprag",
            "path": "data/deeprag.jsonl",
            "depth": 3,
            "context_tokens_target": 40,
            "passthrough_meta": ["answer"],
        }
    )
    ds = build_dataset(spec, EXAMPLE.parents[1])
    assert len(ds) == 3  # three rows in examples/data/deeprag.jsonl
    # row 2: passages of 24 and 16 words (with their [i] title line) = 40 <= 40; the third would exceed
    assert [it.meta["depth"] for it in ds] == [1, 2, 2]
    assert ds.item(1).meta["answer"] == "1958"


def test_yaml_spec_rejects_unknown_keys_and_bad_depth():
    with pytest.raises(ValueError, match="depht"):
        TypeAdapter(DatasetSpec).validate_python({"type": "deeprag", "path": "x", "depht": 2})
    with pytest.raises(ValueError, match="depth"):
        TypeAdapter(DatasetSpec).validate_python({"type": "deeprag", "path": "x", "depth": 0})


def test_tokenizer_json_counts_its_own_ids(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "[": 1, "]": 2, "1": 3, "2": 4, "one": 5, "two": 6, "three": 7}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    ds = DeepRAGDataset(write_rows(tmp_path / "d.jsonl", ROW), depth=1, tokenizer=tmp_path / "tokenizer.json")
    meta = ds.item(0).meta
    # "[1] one two three" -> "[", "1", "]", "one", "two", "three" = 6 ids (3 more than words)
    assert meta["context_tokens_est"] == 6
    assert meta["token_method"] == "tokenizer:tokenizer.json"


async def test_runner_sends_packed_prompts_without_the_reference(tmp_path):
    ds = DeepRAGDataset(EXAMPLE, depth=2, passthrough_meta=["answer", "id"])
    async with ScenarioServer() as server:
        wl = OpenAIChatWorkload(server.chat_url, "m", ds)
        runner = BenchRunner(BenchConfig(load="closed:1", max_requests=3, out_dir=tmp_path), workload=wl)
        result = await runner.run()
        last = server.last_body
    assert result.summary["run"]["n_ok"] == 3
    (message,) = last["messages"]
    assert "Question: What instrument did the founder of the Quill Street ensemble play?" in message["content"]
    assert "dr-003" not in orjson.dumps(last).decode()
