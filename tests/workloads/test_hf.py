"""benchmaker.workloads.hf: HuggingFace datasets from a local directory (skipped without `datasets`)."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from benchmaker.workloads.datasets import DatasetError
from benchmaker.workloads.hf import HFDataset

ROWS = {"question": ["2+2?", "Capital of France?"], "answer": ["4", "Paris"]}


def test_missing_extra_names_it(monkeypatch):
    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("No module named 'datasets'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(DatasetError, match=r"dataset type hf needs the optional extra: pip install 'benchmaker\[hf\]'"):
        HFDataset("anything")


def test_saved_dataset_dict_split_field_and_reference(tmp_path: Path):
    datasets = pytest.importorskip("datasets", reason="optional extra benchmaker[hf] not installed")
    ds = datasets.Dataset.from_dict(ROWS)
    datasets.DatasetDict({"train": ds, "test": ds.select([1])}).save_to_disk(str(tmp_path / "qa"))
    h = HFDataset(tmp_path / "qa", split="test", field="question", reference_field="answer")
    assert [(i.prompt, i.reference, i.meta["row"]) for i in h.items] == [("Capital of France?", "Paris", 0)]
    with pytest.raises(DatasetError, match=r"split: no split 'dev' \(available: train, test\)"):
        HFDataset(tmp_path / "qa", split="dev", field="question")


def test_data_file_directory_with_messages_and_bad_row(tmp_path: Path):
    pytest.importorskip("datasets", reason="optional extra benchmaker[hf] not installed")
    d = tmp_path / "files"
    d.mkdir()
    rows = [{"messages": [{"role": "user", "content": "hi"}]}, {"messages": [{"role": "user", "content": "yo"}]}]
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    h = HFDataset(d, field="messages", cache_dir=tmp_path / "cache")
    assert [i.as_messages()[0]["content"] for i in h.items] == ["hi", "yo"]
    with pytest.raises(DatasetError, match=r"\[train\]:0: prompt: missing at prompt"):
        HFDataset(d, field="prompt", cache_dir=tmp_path / "cache")


def test_yaml_dataset_spec_resolves_relative_dirs(tmp_path: Path):
    datasets = pytest.importorskip("datasets", reason="optional extra benchmaker[hf] not installed")
    from pydantic import TypeAdapter

    from benchmaker.workloads.registry import DatasetSpec, build_dataset

    datasets.Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "one"))
    spec = TypeAdapter(DatasetSpec).validate_python({"type": "hf", "path": "one", "field": "question", "limit": 1})
    ds = build_dataset(spec, base_dir=tmp_path)
    assert [i.prompt for i in ds.items] == ["2+2?"]  # limit 1 of 2 rows
