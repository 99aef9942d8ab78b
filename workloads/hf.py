"""HuggingFace datasets as prompt datasets (optional extra `benchmaker[hf]`).

    HFDataset("data/my_ds", split="train", field="question")         # a local directory
    HFDataset("org/name", split="test", field="messages", reference_field="answer")

YAML: `dataset: {type: hf, path: DIR_OR_NAME, split: train, field: prompt,
reference_field: answer, name: CONFIG, limit: 1000}`.

`path` is, in order: a directory written by `Dataset.save_to_disk` / `DatasetDict.
save_to_disk` (read with `datasets.load_from_disk`, then `split` picked from a
DatasetDict), or anything `datasets.load_dataset(path, name, split=split)` accepts: a
directory of data files (csv/json/jsonl/parquet), a packaged builder, or a Hub name
(a Hub download needs network access and is the user's choice).

Rows are read once, in dataset order (the first `limit` rows when given). The value at
`field` (a path like `turns[0].text`, as for JSONL) must be a string (a prompt) or a
list of OpenAI chat messages; `reference_field` names an optional string kept as the
item's reference. Item meta: {"dataset": "<path>:<split>", "row": 0-based row index}.
`cache_dir` is where `load_dataset` keeps its Arrow cache (default: datasets' own,
~/.cache/huggingface/datasets).

`datasets` is imported when an HFDataset is built, never at module import, so the rest
of benchmaker works without it. Raises DatasetError (a ConfigError):
"dataset type hf needs the optional extra: pip install 'benchmaker[hf]'" when it is
missing; `path[split]:row: field: problem (got VALUE)` at the first bad row; a missing
split names the available ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmaker.workloads.datasets import Dataset, DatasetError, parse_field_path, row_item

__all__ = ["HFDataset"]


def _saved_to_disk(p: Path) -> bool:
    """A `save_to_disk` directory: a Dataset has state.json, a DatasetDict dataset_dict.json."""
    return (p / "state.json").is_file() or (p / "dataset_dict.json").is_file()


class HFDataset(Dataset):
    """Items from one split of a HuggingFace dataset (module docstring)."""

    def __init__(
        self,
        path: str | Path,
        *,
        split: str = "train",
        field: str = "prompt",
        reference_field: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        try:
            import datasets
        except ImportError as exc:
            raise DatasetError(
                f"dataset type hf needs the optional extra: pip install 'benchmaker[hf]' ({exc})"
            ) from exc
        parts = parse_field_path(field)
        ref_parts = parse_field_path(reference_field) if reference_field else None
        label = f"{path}[{split}]"
        local = Path(path)
        try:
            if local.is_dir() and _saved_to_disk(local):
                ds: Any = datasets.load_from_disk(str(local))
                if isinstance(ds, datasets.DatasetDict):
                    if split not in ds:
                        raise DatasetError(f"{path}: split: no split {split!r} (available: {', '.join(ds)})")
                    ds = ds[split]
            else:
                ds = datasets.load_dataset(
                    str(path), name, split=split, cache_dir=str(cache_dir) if cache_dir is not None else None
                )
        except DatasetError:
            raise
        except (ValueError, OSError) as exc:  # ValueError: e.g. unknown split (datasets names the available ones)
            raise DatasetError(f"{label}: cannot load: {exc}") from exc
        n = len(ds) if limit is None else min(limit, len(ds))
        meta = {"dataset": f"{path}:{split}"}
        items = [
            row_item(ds[row], f"{label}:{row}", {**meta, "row": row}, field, parts, reference_field, ref_parts)
            for row in range(n)
        ]
        if not items:
            raise DatasetError(f"{label}: no items (empty split)")
        super().__init__(items, f"{Path(str(path)).name}:{split}")
