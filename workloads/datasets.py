"""Prompt datasets for LLM workloads: JSONL with a field path, ShareGPT, seeded synthetic
prompts, static items.

    JsonlDataset("prompts.jsonl", field="request.messages")   # one item per line
    ShareGPTDataset("sharegpt.json")                            # first human turn per record
    SyntheticDataset(input_words=[128, 512], count=100, seed=7)
    StaticDataset(["Say hi.", [{"role": "user", "content": "2+2?"}]])

Every dataset holds a list of `Item`s, read once at construction; `item(seq)` returns
item `seq % len(dataset)`, so a run cycles through the items in file order, the same way
every time. A dataset never schedules and never talks to a server.

Errors name the input: `DatasetError("data.jsonl:17: request.messages: missing (got ...)")`.
A reader stops at the first bad line and raises; nothing is half-loaded.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.errors import ConfigError
from benchmaker.engine.files import not_regular

__all__ = [
    "Dataset",
    "DatasetError",
    "Item",
    "JsonlDataset",
    "ShareGPTDataset",
    "StaticDataset",
    "SyntheticDataset",
    "get_field",
    "parse_field_path",
    "row_item",
]

_ROLES = ("system", "user", "assistant", "tool", "developer")


class DatasetError(ConfigError):
    """A dataset input is malformed; the message reads `path:line: field: problem (got VALUE)`."""


@dataclass(frozen=True, slots=True)
class Item:
    """One prompt: chat `messages` (OpenAI shape) or a plain `prompt`, at least one set.

    `meta` travels to the sample (dataset name, row); keep it small. `reference` is an
    expected output text when the dataset has one (ShareGPT's answer turn), else None.
    """

    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None

    def as_messages(self) -> list[dict[str, Any]]:
        """Chat messages: `messages`, or one user message holding `prompt`."""
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.prompt}]

    def as_prompt(self) -> str:
        """Completion prompt: `prompt`, or the messages' text contents joined by a newline
        (roles dropped; non-text content parts skipped)."""
        if self.prompt is not None:
            return self.prompt
        parts: list[str] = []
        for msg in self.messages or ():
            content = msg.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        return "\n".join(parts)


class Dataset:
    """A fixed list of items, cycled by request sequence number.

    `name` labels the items' meta; `len(ds)` is the number of items (>= 1).
    """

    name: str = "dataset"

    def __init__(self, items: list[Item], name: str) -> None:
        if not items:
            raise DatasetError(f"{name}: no items")
        self.items = items
        self.name = name

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def item(self, seq: int) -> Item:
        """The item for request `seq` (>= 0): items[seq % len]."""
        return self.items[seq % len(self.items)]


# ---------------------------------------------------------------------------- field paths

_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]|(\.)")


def parse_field_path(path: str) -> list[str | int]:
    """Parse `a.b[0].c` into `["a", "b", 0, "c"]`.

    Keys are separated by `.`; `[N]` indexes a list (N >= 0). Raises DatasetError on an
    empty path or a malformed one (`a..b`, `a[x]`, `[0`).
    """
    parts: list[str | int] = []
    pos = 0
    expect_key = True
    for m in _PATH_TOKEN.finditer(path):
        if m.start() != pos:
            break
        key, index, dot = m.groups()
        if key is not None:
            if not expect_key:
                break
            parts.append(key)
            expect_key = False
        elif index is not None:
            if expect_key and parts:
                break
            parts.append(int(index))
            expect_key = False
        elif dot is not None:
            if expect_key:
                break
            expect_key = True
        pos = m.end()
    if not path or pos != len(path) or expect_key:
        raise DatasetError(f"field path {path!r}: expected keys and [N] indexes like 'a.b[0].c'")
    return parts


def get_field(obj: Any, parts: list[str | int]) -> Any:
    """Follow parsed path `parts` into `obj`. Raises LookupError whose message is the
    path prefix that failed (e.g. `b[3]`)."""
    cur = obj
    shown = ""
    for part in parts:
        if isinstance(part, int):
            shown += f"[{part}]"
            if not isinstance(cur, list) or part >= len(cur):
                raise LookupError(shown)
        else:
            shown = f"{shown}.{part}" if shown else part
            if not isinstance(cur, dict) or part not in cur:
                raise LookupError(shown)
        cur = cur[part]
    return cur


def short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_messages(value: list[Any], where: str, fieldname: str) -> list[dict[str, Any]]:
    """Validate an OpenAI messages list; raises DatasetError naming the element."""
    if not value:
        raise DatasetError(f"{where}: {fieldname}: expected a non-empty list of messages (got [])")
    for i, msg in enumerate(value):
        if not isinstance(msg, dict):
            raise DatasetError(f"{where}: {fieldname}[{i}]: expected an object (got {short_repr(msg)})")
        if msg.get("role") not in _ROLES:
            raise DatasetError(
                f"{where}: {fieldname}[{i}].role: expected one of {', '.join(_ROLES)} (got {short_repr(msg.get('role'))})"
            )
    return value


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object) for each non-blank line; raises DatasetError
    (also for a FIFO or a device, before opening it)."""
    problem = not_regular(path)
    if problem is not None:
        raise DatasetError(f"{path}: {problem}")
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot open ({exc.strerror})") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: bad JSON: {exc} (got {short_repr(line[:80])})") from exc


def row_item(
    obj: Any,
    where: str,
    meta: dict[str, Any],
    field: str,
    parts: list[str | int],
    reference_field: str | None,
    ref_parts: list[str | int] | None,
) -> Item:
    """The Item of one input row `obj` (a JSONL line, a dataset row) at `where`
    (`path:line`): the string (a prompt) or the list of OpenAI chat messages at `parts`
    (`field` parsed), and the string at `ref_parts` (`reference_field` parsed), when
    there is one, as its reference. Raises DatasetError `where: field: problem (got VALUE)`."""
    try:
        value = get_field(obj, parts)
    except LookupError as exc:
        raise DatasetError(f"{where}: {field}: missing at {exc.args[0]} (got {short_repr(obj)})") from None
    reference = None
    if ref_parts is not None:
        with contextlib.suppress(LookupError):
            reference = get_field(obj, ref_parts)
        if reference is not None and not isinstance(reference, str):
            raise DatasetError(f"{where}: {reference_field}: expected a string (got {short_repr(reference)})")
    if isinstance(value, str):
        return Item(prompt=value, meta=meta, reference=reference)
    if isinstance(value, list):
        return Item(messages=check_messages(value, where, field), meta=meta, reference=reference)
    raise DatasetError(f"{where}: {field}: expected a string or a list of messages (got {short_repr(value)})")


# ---------------------------------------------------------------------------- datasets


class JsonlDataset(Dataset):
    """One item per non-blank line of a JSONL file, read from the value at `field`.

    The value at `field` (a path like `request.messages` or `turns[0].text`) must be a
    string (a prompt) or a list of OpenAI chat messages. `reference_field`, when given,
    names a string field kept as the item's `reference`. Item meta: `{"dataset", "row"}`
    with row = the 1-based line number.

    Raises DatasetError `path:line: field: problem (got VALUE)` at the first bad line.
    """

    def __init__(self, path: str | Path, field: str = "prompt", *, reference_field: str | None = None) -> None:
        path = Path(path)
        parts = parse_field_path(field)
        ref_parts = parse_field_path(reference_field) if reference_field else None
        items = [
            row_item(
                obj, f"{path}:{lineno}", {"dataset": path.name, "row": lineno}, field, parts, reference_field, ref_parts
            )
            for lineno, obj in read_jsonl(path)
        ]
        if not items:
            raise DatasetError(f"{path}: no items (empty file)")
        super().__init__(items, path.name)


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "system": "system",
}


class ShareGPTDataset(Dataset):
    """ShareGPT records: `{"conversations": [{"from": "human"|"gpt"|"system", "value": str}, ...]}`.

    The file is a JSON array of records (ShareGPT_V3_unfiltered_cleaned_split.json) or
    JSONL, one record per line. The prompt of a record is its FIRST HUMAN TURN:

    - messages = [the system turn, if the conversation starts with one] + [that human turn];
    - assistant (`gpt`) turns before the first human turn are dropped (a conversation that
      starts with the assistant has no user question to answer yet); their count goes to
      meta `skipped_turns`;
    - `reference` = the assistant turn right after the chosen human turn, or None;
    - records with no human turn are skipped and counted in `skipped_records`.

    Item meta: `{"dataset", "row"}` (row: 0-based record index for a JSON array, 1-based
    line for JSONL). Roles accepted: human/user, gpt/assistant/chatgpt/bard/bing, system.
    Raises DatasetError `path:row: conversations[i].from: ...` on malformed records.
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self.skipped_records = 0
        items: list[Item] = []
        for row, where, record in self._records(path):
            item = self._item(record, where, {"dataset": path.name, "row": row})
            if item is None:
                self.skipped_records += 1
            else:
                items.append(item)
        if not items:
            raise DatasetError(f"{path}: no record with a human turn ({self.skipped_records} skipped)")
        super().__init__(items, path.name)

    @staticmethod
    def _records(path: Path) -> Iterator[tuple[int, str, Any]]:
        problem = not_regular(path)
        if problem is not None:
            raise DatasetError(f"{path}: {problem}")
        try:
            with path.open("rb") as fh:
                head = fh.read(64).lstrip()
        except OSError as exc:
            raise DatasetError(f"{path}: cannot open ({exc.strerror})") from exc
        if head.startswith(b"["):
            try:
                records = orjson.loads(path.read_bytes())
            except orjson.JSONDecodeError as exc:
                raise DatasetError(f"{path}: bad JSON: {exc}") from exc
            for i, record in enumerate(records):
                yield i, f"{path}:[{i}]", record
        else:
            for lineno, record in read_jsonl(path):
                yield lineno, f"{path}:{lineno}", record

    @staticmethod
    def _item(record: Any, where: str, meta: dict[str, Any]) -> Item | None:
        conv = record.get("conversations") if isinstance(record, dict) else None
        if not isinstance(conv, list):
            raise DatasetError(f"{where}: conversations: expected a list of turns (got {short_repr(conv)})")
        turns: list[tuple[str, str]] = []
        for i, turn in enumerate(conv):
            if not isinstance(turn, dict):
                raise DatasetError(f"{where}: conversations[{i}]: expected an object (got {short_repr(turn)})")
            role = _SHAREGPT_ROLES.get(frm) if isinstance(frm := turn.get("from"), str) else None
            if role is None:
                raise DatasetError(
                    f"{where}: conversations[{i}].from: expected human, gpt or system (got {short_repr(turn.get('from'))})"
                )
            value = turn.get("value")
            if not isinstance(value, str):
                raise DatasetError(f"{where}: conversations[{i}].value: expected a string (got {short_repr(value)})")
            turns.append((role, value))
        first_user = next((i for i, (role, _) in enumerate(turns) if role == "user"), None)
        if first_user is None:
            return None
        messages: list[dict[str, Any]] = []
        if turns[0][0] == "system" and first_user > 0:
            messages.append({"role": "system", "content": turns[0][1]})
        messages.append({"role": "user", "content": turns[first_user][1]})
        skipped = sum(1 for role, _ in turns[:first_user] if role == "assistant")
        nxt = turns[first_user + 1] if first_user + 1 < len(turns) else None
        reference = nxt[1] if nxt is not None and nxt[0] == "assistant" else None
        if skipped:
            meta["skipped_turns"] = skipped
        return Item(messages=messages, meta=meta, reference=reference)


# A small vocabulary of common English words, each one token in the usual BPE
# tokenizers (cl100k, Llama 3), so a prompt of N words is roughly N tokens.
VOCAB = (
    "the of and to in is it you that he was for on are with as his they be at one have this "
    "from or had by word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form great think say help low line differ turn "
    "cause much mean before move right boy old too same tell does set three want air well also "
    "play small end put home read hand port large spell add even land here must big high such "
    "follow act why ask men change went light kind off need house picture try us again animal "
    "point mother world near build self earth father head stand own page should country found "
    "answer school grow study still learn plant cover food sun four between state keep eye never "
    "last let thought city tree cross farm hard start might story saw far sea draw left late run"
).split()


class SyntheticDataset(Dataset):
    """Seeded synthetic prompts of given lengths in words (≈ tokens, see `VOCAB`).

    Item i (0 <= i < count) is `input_words[i % len(input_words)]` words drawn uniformly
    with `random.Random(seed * 1_000_003 + i)`: deterministic across processes and
    Python runs (integer seeding, no salted `hash()`), and distinct prompts from the first
    word on, so prefix caches do not merge them. Item meta: `{"dataset", "row", "input_words"}`.

    Raises DatasetError when a length is < 1 or count < 1.
    """

    def __init__(self, input_words: int | Sequence[int], *, count: int = 100, seed: int = 0) -> None:
        lengths = [input_words] if isinstance(input_words, int) else list(input_words)
        if not lengths or any(not isinstance(n, int) or n < 1 for n in lengths):
            raise DatasetError(f"synthetic: input_words: expected integers >= 1 (got {short_repr(input_words)})")
        if count < 1:
            raise DatasetError(f"synthetic: count: expected an integer >= 1 (got {count!r})")
        self.seed = seed
        items = []
        for i in range(count):
            n = lengths[i % len(lengths)]
            rng = random.Random(seed * 1_000_003 + i)
            prompt = " ".join(rng.choices(VOCAB, k=n))
            items.append(Item(prompt=prompt, meta={"dataset": "synthetic", "row": i, "input_words": n}))
        super().__init__(items, "synthetic")


class StaticDataset(Dataset):
    """Items given in code or config: each a prompt string, a messages list, an `Item`,
    or a dict `{"prompt": str} | {"messages": [...]}` with optional `meta`, `reference`.

    Item meta: the given meta plus `{"dataset": "static", "row": i}`. Raises DatasetError
    `static:[i]: field: problem` on a malformed entry.
    """

    def __init__(self, items: Sequence[str | list[dict[str, Any]] | dict[str, Any] | Item]) -> None:
        out: list[Item] = []
        for i, entry in enumerate(items):
            where = f"static:[{i}]"
            meta = {"dataset": "static", "row": i}
            if isinstance(entry, Item):
                out.append(Item(entry.prompt, entry.messages, {**entry.meta, **meta}, entry.reference))
            elif isinstance(entry, str):
                out.append(Item(prompt=entry, meta=meta))
            elif isinstance(entry, list):
                out.append(Item(messages=check_messages(entry, where, "messages"), meta=meta))
            elif isinstance(entry, dict):
                unknown = set(entry) - {"prompt", "messages", "meta", "reference"}
                if unknown:
                    raise DatasetError(
                        f"{where}: {sorted(unknown)[0]}: unknown key (expected prompt, messages, meta, reference)"
                    )
                prompt, messages = entry.get("prompt"), entry.get("messages")
                if (prompt is None) == (messages is None):
                    raise DatasetError(
                        f"{where}: prompt: expected exactly one of prompt, messages (got {short_repr(entry)})"
                    )
                if prompt is not None and not isinstance(prompt, str):
                    raise DatasetError(f"{where}: prompt: expected a string (got {short_repr(prompt)})")
                if messages is not None:
                    if not isinstance(messages, list):
                        raise DatasetError(f"{where}: messages: expected a list (got {short_repr(messages)})")
                    check_messages(messages, where, "messages")
                extra = entry.get("meta") or {}
                if not isinstance(extra, dict):
                    raise DatasetError(f"{where}: meta: expected an object (got {short_repr(extra)})")
                out.append(Item(prompt, messages, {**extra, **meta}, entry.get("reference")))
            else:
                raise DatasetError(
                    f"{where}: expected a prompt string, messages list or object (got {short_repr(entry)})"
                )
        super().__init__(out, "static")
