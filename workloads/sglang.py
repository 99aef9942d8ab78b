"""SGLang native generation (`POST /generate`): the workload that builds its requests;
the responses are read by benchmaker.apis.sglang.SGLangParser (the wire's one reader).

    wl = SGLangWorkload("http://127.0.0.1:30000/generate", dataset, max_new_tokens=256)
    wl = SGLangWorkload(url, input_ids=[[1, 2, 3], [4, 5]])     # token ids instead of text
    spec = wl.request(seq)                                      # before the timed span
    parser = wl.parser(spec)                                    # fresh per request

Request body (orjson): `{"text": PROMPT | "input_ids": [int, ...], "sampling_params":
{...}, "stream": bool}`; sampling_params holds `max_new_tokens` and `temperature` when
given, then `sampling_params` merged over them; `extra_body` is merged last at the top
level (e.g. `{"rid": ...}`, `{"return_logprob": true}`). Text prompts are the dataset
items' `as_prompt()` (chat messages joined without a template: /generate takes raw text).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from benchmaker.apis.generated import short
from benchmaker.apis.openai_chat import openai_headers
from benchmaker.apis.sglang import SGLangParser
from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import RequestSpec
from benchmaker.workloads.datasets import Dataset, DatasetError
from benchmaker.workloads.openai_chat import request_meta

__all__ = ["SGLangWorkload", "read_input_ids"]


def read_input_ids(path: str | Path) -> list[list[int]]:
    """Token-id prompts from a JSONL file: each non-blank line a JSON array of ints >= 0
    or an object with such an array under `input_ids`. Raises DatasetError
    `path:line: input_ids: problem (got VALUE)` at the first bad line, or when empty."""
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot open ({exc.strerror})") from exc
    rows: list[list[int]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{lineno}: bad JSON: {exc} (got {short(line[:80])})") from exc
        ids = obj.get("input_ids") if isinstance(obj, dict) else obj
        rows.append(_check_ids(ids, f"{path}:{lineno}: input_ids"))
    if not rows:
        raise DatasetError(f"{path}: no items (empty file)")
    return rows


def _check_ids(ids: Any, where: str) -> list[int]:
    if not isinstance(ids, list) or not ids or not all(type(i) is int and i >= 0 for i in ids):
        raise DatasetError(f"{where}: expected a non-empty list of ints >= 0 (got {short(repr(ids)[:80])})")
    return ids


class SGLangWorkload:
    """`/generate` requests over a dataset (text) or token-id lists; implements
    `benchmaker.engine.types.Workload`.

        SGLangWorkload(url, ds)                                      # stream text prompts
        SGLangWorkload(url, ds, max_new_tokens=64, temperature=0.0)  # sampling_params
        SGLangWorkload(url, input_ids=[[1, 2, 3]], stream=False)     # token ids, one body

    Give exactly one of `dataset` and `input_ids` (ConfigError otherwise; DatasetError on
    a bad id list). Requests cycle through the items in order. The spec's meta is the
    item's meta plus `reference` when the item has one (for graders; never sent);
    input_ids items get `{"dataset": "input_ids", "row": i, "input_tokens": n}`.
    `api_key` is sent as a Bearer token and never put in meta.
    """

    name = "sglang"

    def __init__(
        self,
        url: str,
        dataset: Dataset | None = None,
        *,
        input_ids: Sequence[Sequence[int]] | None = None,
        stream: bool = True,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        sampling_params: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        incremental: bool = False,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if (dataset is None) == (input_ids is None):
            raise ConfigError("sglang: give exactly one of a dataset (text prompts) or input_ids")
        self.url = url
        self.dataset = dataset
        self.input_ids = (
            [_check_ids(list(ids), f"input_ids[{i}]") for i, ids in enumerate(input_ids)]
            if input_ids is not None
            else None
        )
        if self.input_ids is not None and not self.input_ids:
            raise DatasetError("input_ids: no items")
        self.stream = stream
        self.incremental = incremental
        self.sampling_params: dict[str, Any] = {}
        if max_new_tokens is not None:
            self.sampling_params["max_new_tokens"] = max_new_tokens
        if temperature is not None:
            self.sampling_params["temperature"] = temperature
        self.sampling_params.update(sampling_params or {})
        self.extra_body = dict(extra_body or {})
        self._headers = openai_headers(api_key, stream, headers)

    def _item(self, seq: int) -> tuple[str, Any, dict[str, Any]]:
        """(input field, value, meta) of request `seq`."""
        if self.input_ids is not None:
            i = seq % len(self.input_ids)
            ids = self.input_ids[i]
            return "input_ids", ids, {"dataset": "input_ids", "row": i, "input_tokens": len(ids)}
        dataset = self.dataset
        assert dataset is not None, "a workload without input_ids has a dataset"
        item = dataset.item(seq)
        return "text", item.as_prompt(), request_meta(item)

    def request(self, seq: int) -> RequestSpec:
        """The seq-th request (items cycle): POST url with the body of the module docstring."""
        field, value, meta = self._item(seq)
        body: dict[str, Any] = {field: value, "sampling_params": dict(self.sampling_params), "stream": self.stream}
        body.update(self.extra_body)
        return RequestSpec(
            method="POST",
            url=self.url,
            headers=dict(self._headers),
            body=orjson.dumps(body),
            stream=self.stream,
            meta=meta,
        )

    def parser(self, spec: RequestSpec) -> SGLangParser:
        """A fresh parser for the response to `spec`."""
        cap = self.sampling_params.get("max_new_tokens")
        return SGLangParser(
            stream=spec.stream, incremental=self.incremental, max_tokens=cap if type(cap) is int else None
        )

    def describe(self) -> dict[str, Any]:
        """What the manifest records about this workload (no secrets)."""
        return {
            "type": "sglang",
            "url": self.url,
            "stream": self.stream,
            "incremental": self.incremental,
            "input": "input_ids" if self.input_ids is not None else "text",
            "dataset": self.dataset.name if self.dataset is not None else "input_ids",
            "sampling_params": self.sampling_params,
        }
