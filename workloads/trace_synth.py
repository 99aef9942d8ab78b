"""Token-count trace synthesis: TraceLab-style rows of per-session-round token counts
turned into prompts whose prefixes grow byte-exactly within each session.

    ds = TraceSynthDataset("trace.jsonl", order="round-robin", seed=7)
    wl = TraceSynthWorkload(url, "m", ds)               # /v1/completions; max_tokens = output
    wl = TraceSynthWorkload(url, "m", ds, api="chat")   # one user message per request

Input: JSONL, one row per (session, round):

    {"session": "s1", "round": 0, "input": 900, "prefix": 0, "new": 900, "output": 120}

`session` (or `session_id`): str or int. `round` (optional): orders a session's rows,
else file order. Counts are integers >= 0, named `input`, `prefix`, `new`, `output`
(or with a `_tokens` suffix). Give `input`, or `prefix` + `new`, or all three with
input == prefix + new; a missing `prefix` on a later round is the previous round's
input. `output` >= 1 is required: it becomes the request's `max_tokens`.

Synthesis: a token is one word of a small vocabulary (`benchmaker.workloads.datasets.VOCAB`,
each word one token in common BPE vocabularies), words joined by single spaces. Round
k's prompt = round k-1's prompt (the exact same bytes) + " " + (prefix_k - input_{k-1})
words standing in for the previous answer + new_k words; round 0 is input_0 words. So
round k's prompt starts with round k-1's prompt bytes and has input_k words. A
prefix_k smaller than input_{k-1} cannot grow byte-exactly and is an error. Words come
from `random.Random("trace-synth:{seed}:{session}")`: string seeding is hashed with
SHA-512, not Python's salted `hash()`, so prompts are the same in every process; each
session draws its own stream, so sessions do not share filler.

Ordering (`order`): `contiguous` (each session's rounds in turn, sessions in order of
first appearance), `round-robin` (round 0 of every session, then round 1, ...), and
`shuffled` (sessions in an order shuffled with `random.Random("trace-synth-order:{seed}")`,
each session's rounds contiguous).

Item meta: `session`, `round`, `input_tokens`, `prefix_tokens`, `new_tokens`,
`output_tokens`, `prompt_sha256` (UTF-8 bytes of the prompt), `prefix_sha256` (the
previous round's prompt_sha256, None on round 0). Errors: DatasetError
`path:line: field: problem (got VALUE)`.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any, Literal

from benchmaker.apis.openai_chat import OpenAIChatParser
from benchmaker.workloads.datasets import VOCAB, Dataset, DatasetError, Item, read_jsonl, short_repr
from benchmaker.workloads.openai_chat import OpenAIChatWorkload
from benchmaker.workloads.openai_completions import OpenAICompletionsParser

__all__ = ["TraceSynthDataset", "TraceSynthWorkload", "synthesize_sessions"]

Order = Literal["contiguous", "round-robin", "shuffled"]
_ORDERS = ("contiguous", "round-robin", "shuffled")


def _count(row: dict[str, Any], name: str, where: str) -> int | None:
    value = row.get(name, row.get(f"{name}_tokens"))
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise DatasetError(f"{where}: {name}: expected an integer >= 0 (got {short_repr(value)})")
    return value


def _read_rows(path: Path) -> dict[str, list[tuple[int, int, dict[str, int | None]]]]:
    """Rows grouped by session (first-appearance order): (round key, line, counts)."""
    sessions: dict[str, list[tuple[int, int, dict[str, int | None]]]] = {}
    for lineno, row in read_jsonl(path):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected an object with session and token counts (got {short_repr(row)})")
        session = row.get("session", row.get("session_id"))
        if not isinstance(session, (str, int)) or isinstance(session, bool):
            raise DatasetError(f"{where}: session: expected a string or integer (got {short_repr(session)})")
        rnd = row.get("round")
        rows = sessions.setdefault(str(session), [])
        if rnd is None:
            rnd = len(rows)
        elif type(rnd) is not int or rnd < 0:
            raise DatasetError(f"{where}: round: expected an integer >= 0 (got {short_repr(rnd)})")
        counts = {k: _count(row, k, where) for k in ("input", "prefix", "new", "output")}
        if counts["output"] is None or counts["output"] < 1:
            raise DatasetError(f"{where}: output: expected an integer >= 1 (got {short_repr(counts['output'])})")
        rows.append((rnd, lineno, counts))
    if not sessions:
        raise DatasetError(f"{path}: no rows (empty file)")
    return sessions


def synthesize_sessions(path: str | Path, *, seed: int | str = 0) -> dict[str, list[Item]]:
    """Items per session (first-appearance order), rounds in order, prompts grown as in
    the module docstring. Raises DatasetError at the first inconsistent row."""
    path = Path(path)
    out: dict[str, list[Item]] = {}
    for session, rows in _read_rows(path).items():
        rows.sort(key=lambda r: r[0])
        rng = random.Random(f"trace-synth:{seed}:{session}")
        words: list[str] = []
        prev_sha: str | None = None
        items: list[Item] = []
        for k, (rnd, lineno, c) in enumerate(rows):
            where = f"{path}:{lineno}"
            if k and rnd == rows[k - 1][0]:
                raise DatasetError(f"{where}: round: session {session} has round {rnd} twice")
            prev_input = len(words)
            inp, prefix, new = c["input"], c["prefix"], c["new"]
            if prefix is None and new is not None and inp is not None:
                prefix = inp - new
            if prefix is None:
                prefix = prev_input
            if new is None:
                if inp is None:
                    raise DatasetError(f"{where}: input: give input, or prefix and new")
                new = inp - prefix
            if inp is None:
                inp = prefix + new
            if inp != prefix + new or new < 0 or prefix < 0:
                raise DatasetError(f"{where}: input: expected input == prefix + new (got {inp} != {prefix} + {new})")
            if prefix < prev_input:
                raise DatasetError(
                    f"{where}: prefix: expected >= the previous round's input {prev_input} for a growing "
                    f"prefix (got {prefix})"
                )
            if inp < 1:
                raise DatasetError(f"{where}: input: expected >= 1 token (got {inp})")
            words.extend(rng.choices(VOCAB, k=inp - prev_input))
            prompt = " ".join(words)
            sha = hashlib.sha256(prompt.encode()).hexdigest()
            meta = {
                "dataset": path.name,
                "row": lineno,
                "session": session,
                "round": rnd,
                "input_tokens": inp,
                "prefix_tokens": prefix,
                "new_tokens": new,
                "output_tokens": c["output"],
                "prompt_sha256": sha,
                "prefix_sha256": prev_sha,
            }
            items.append(Item(prompt=prompt, meta=meta))
            prev_sha = sha
        out[session] = items
    return out


class TraceSynthDataset(Dataset):
    """The synthesized items in `order` (module docstring); `sessions` keeps them per
    session. Raises DatasetError on a bad order or row."""

    def __init__(self, path: str | Path, *, order: Order = "contiguous", seed: int | str = 0) -> None:
        path = Path(path)
        if order not in _ORDERS:
            raise DatasetError(f"{path}: order: expected one of {', '.join(_ORDERS)} (got {order!r})")
        self.sessions = synthesize_sessions(path, seed=seed)
        names = list(self.sessions)
        if order == "shuffled":
            random.Random(f"trace-synth-order:{seed}").shuffle(names)
        if order == "round-robin":
            depth = max(len(v) for v in self.sessions.values())
            items = [self.sessions[n][k] for k in range(depth) for n in names if k < len(self.sessions[n])]
        else:
            items = [it for n in names for it in self.sessions[n]]
        self.order = order
        super().__init__(items, path.name)


class TraceSynthWorkload(OpenAIChatWorkload):
    """Requests of a TraceSynthDataset with `max_tokens` = the row's output count.

    `api="completions"` (default) sends `{"prompt": text}` to /v1/completions, so the
    byte-exact prefix is the whole prompt; `api="chat"` sends one user message. Other
    keywords as OpenAIChatWorkload (a `max_tokens` there is overridden per item)."""

    def __init__(
        self, url: str, model: str, dataset: TraceSynthDataset, *, api: str = "completions", **kwargs: Any
    ) -> None:
        if api not in ("completions", "chat"):
            raise DatasetError(f"api: expected completions or chat (got {api!r})")
        super().__init__(url, model, dataset, **kwargs)
        self.api = api
        self.name = f"trace-synth-{api}"

    def _input(self, item: Any) -> tuple[str, Any]:
        return ("prompt", item.as_prompt()) if self.api == "completions" else ("messages", item.as_messages())

    def body(self, seq: int) -> dict[str, Any]:
        """The JSON body of request `seq`, max_tokens from its item's output count."""
        body = super().body(seq)
        body["max_tokens"] = self.dataset.item(seq).meta["output_tokens"]
        return body

    def parser(self, spec: Any) -> OpenAIChatParser | OpenAICompletionsParser:
        """A fresh parser for the response (completions or chat)."""
        cls = OpenAICompletionsParser if self.api == "completions" else OpenAIChatParser
        return cls(stream=spec.stream, max_tokens=self.request_max_tokens(spec))

    def request_max_tokens(self, spec: Any) -> int | None:
        """The request's `max_tokens`: its item's output count (carried in spec.meta)."""
        cap = spec.meta.get("output_tokens")
        return cap if type(cap) is int else None
