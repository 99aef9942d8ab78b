"""DeepRAG: multi-passage question answering rows packed into long-context prompts.

    ds = DeepRAGDataset("deeprag.jsonl", depth=4, context_tokens_target=2000,
                        passthrough_meta=["answer", "id"])
    OpenAIChatWorkload(url, "m", ds)         # any prompt workload takes it

Input: JSONL, one row per line:

    {"question": str, "answer": str (optional),
     "passages": [str | {"title": str (optional), "text": str}, ...], ...other fields}

Packing (per row, in file order of its passages): passages are added one by one while
there are fewer than `depth` of them and the context stays within
`context_tokens_target` tokens (words, or a tokenizer.json's ids: `benchmaker.workloads.tokens`).
The first passage is always kept, even when it alone is over the target (then meta
`over_target` is True), so no prompt is empty of context. The prompt reads:

    Answer the question using the passages below.

    [1] Title
    passage text

    [2] ...

    Question: ...
    Answer:

Item meta (reaches RequestSpec.meta, never the request body): `dataset`, `row` (1-based
line), `depth` (passages packed), `passages_available`, `context_tokens_est`,
`prompt_tokens_est`, `prompt_chars`, `token_method`, `over_target`, and one key per
`passthrough_meta` field (a field path such as `answer` or `meta.id`), copied from the
row. `Item.reference` is the row's `answer` (None when absent), for graders.

Errors: DatasetError `path:line: field: problem (got VALUE)` at the first bad row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmaker.workloads.datasets import (
    Dataset,
    DatasetError,
    Item,
    get_field,
    parse_field_path,
    read_jsonl,
    short_repr,
)
from benchmaker.workloads.tokens import TokenCounter

__all__ = ["DeepRAGDataset", "pack_passages"]

_HEADER = "Answer the question using the passages below."


def _passage_text(index: int, passage: Any, where: str) -> str:
    """One passage as prompt text: `[i] Title\\ntext` or `[i] text`."""
    if isinstance(passage, str):
        return f"[{index + 1}] {passage}"
    if isinstance(passage, dict):
        text = passage.get("text")
        if not isinstance(text, str):
            raise DatasetError(f"{where}: passages[{index}].text: expected a string (got {short_repr(text)})")
        title = passage.get("title")
        if title is None:
            return f"[{index + 1}] {text}"
        if not isinstance(title, str):
            raise DatasetError(f"{where}: passages[{index}].title: expected a string (got {short_repr(title)})")
        return f"[{index + 1}] {title}\n{text}"
    raise DatasetError(f"{where}: passages[{index}]: expected a string or {{title, text}} (got {short_repr(passage)})")


def pack_passages(
    passages: Sequence[str], depth: int, context_tokens_target: int | None, count: TokenCounter
) -> tuple[list[str], int, bool]:
    """Choose the leading passages to pack: at most `depth`, total tokens (by `count`)
    within `context_tokens_target` (None = no budget), the first always kept.

    Returns (chosen passage texts, their token total, over_target). Token totals add
    the passages' counts (the blank lines between them are not counted)."""
    chosen: list[str] = []
    total = 0
    for text in passages[:depth]:
        n = count(text)
        if chosen and context_tokens_target is not None and total + n > context_tokens_target:
            break
        chosen.append(text)
        total += n
    over = context_tokens_target is not None and total > context_tokens_target
    return chosen, total, over


class DeepRAGDataset(Dataset):
    """Prompts packed from multi-passage QA rows (see module docstring).

    `depth` >= 1: most passages per prompt. `context_tokens_target` >= 1 or None: token
    budget of the packed passages. `tokenizer`: a tokenizer.json to count with (needs the
    optional `tokenizers` package), else words. Raises DatasetError on bad arguments or
    rows; ConfigError when the tokenizer cannot be loaded.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        depth: int = 4,
        context_tokens_target: int | None = None,
        passthrough_meta: Sequence[str] = (),
        tokenizer: str | Path | None = None,
    ) -> None:
        path = Path(path)
        if not isinstance(depth, int) or depth < 1:
            raise DatasetError(f"{path}: depth: expected an integer >= 1 (got {depth!r})")
        if context_tokens_target is not None and context_tokens_target < 1:
            raise DatasetError(
                f"{path}: context_tokens_target: expected an integer >= 1 (got {context_tokens_target!r})"
            )
        count = TokenCounter(tokenizer)
        keep = [(name, parse_field_path(name)) for name in passthrough_meta]
        items: list[Item] = []
        for lineno, row in read_jsonl(path):
            where = f"{path}:{lineno}"
            if not isinstance(row, dict):
                raise DatasetError(f"{where}: expected an object with question, passages (got {short_repr(row)})")
            question = row.get("question")
            if not isinstance(question, str) or not question.strip():
                raise DatasetError(f"{where}: question: expected a non-empty string (got {short_repr(question)})")
            answer = row.get("answer")
            if answer is not None and not isinstance(answer, str):
                raise DatasetError(f"{where}: answer: expected a string (got {short_repr(answer)})")
            passages = row.get("passages")
            if not isinstance(passages, list) or not passages:
                raise DatasetError(f"{where}: passages: expected a non-empty list (got {short_repr(passages)})")
            texts = [_passage_text(i, p, where) for i, p in enumerate(passages)]
            chosen, context_tokens, over = pack_passages(texts, depth, context_tokens_target, count)
            prompt = "\n\n".join([_HEADER, *chosen, f"Question: {question}\nAnswer:"])
            meta: dict[str, Any] = {}
            for name, parts in keep:
                try:
                    meta[name] = get_field(row, parts)
                except LookupError as exc:
                    raise DatasetError(f"{where}: {name}: passthrough field missing at {exc.args[0]}") from None
            meta.update(
                dataset=path.name,
                row=lineno,
                depth=len(chosen),
                passages_available=len(passages),
                context_tokens_est=context_tokens,
                prompt_tokens_est=count(prompt),
                prompt_chars=len(prompt),
                token_method=count.method,
                over_target=over,
            )
            items.append(Item(prompt=prompt, meta=meta, reference=answer))
        if not items:
            raise DatasetError(f"{path}: no items (empty file)")
        super().__init__(items, path.name)
