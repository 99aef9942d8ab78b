"""The replay store: trajectories.jsonl loaded, indexed by match key, and each turn
rendered into the exact bytes the replay server sends (non-streaming bodies at load,
streams on first use into a byte-bounded LRU cache).

    store = ReplayStore.load(Path("trajectories.jsonl"), latency=parse_latency("instant"))
    entry = store.lookup("task:django-123", system_text=None)   # StoredTrajectory | None
    entry.turns[2].body                                          # non-streaming JSON bytes
    store.stream(entry, 2).groups                                # [(offset_s, SSE bytes)]

Every wire API renders the same prepared turn its own way, in its apis module (the
`render_body` / `render_stream` of benchmaker.apis.recorded.Renderer), registered in
`API_RENDERERS`: chat (benchmaker.apis.openai_chat), responses
(benchmaker.apis.openai_responses), messages (benchmaker.apis.anthropic_messages),
gemini (benchmaker.apis.gemini); `store.body(entry, turn, api)` and
`store.stream(entry, turn, api)` give the bytes. The events before the first token event go out
together with it, the finish/usage events together with the last.

The rules this module implements (which trajectory a key selects, how a turn after a
context edit is found by its recorded request, which of several turns with one request
key is served, the model named and the recorded-error header): docs/replay-server.md
("Matching"). Canned exchanges (`Trajectory.canned_replies`, aider) are stripped by
`ReplayStore.without_canned` with the canned replies of the request's own trajectory
only (an answer of one agent may be another's canned reply).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from pydantic import ValidationError

from benchmaker.apis import anthropic_messages, gemini, openai_chat, openai_responses
from benchmaker.apis.recorded import Renderer
from benchmaker.replay_server.latency import LatencyModel, Splitter, parse_latency, regex_split
from benchmaker.trajectories.context import assistant_message, previous_turn, recorded_requests, request_messages
from benchmaker.trajectories.convert import gc_paused
from benchmaker.trajectories.errors import TrajectoryFormatError
from benchmaker.trajectories.trajectory import (
    Observation,
    Trajectory,
    Turn,
    flatten_content,
    match_key_for_messages,
    without_canned,
)

__all__ = [
    "API_RENDERERS",
    "DEFAULT_MODEL",
    "PreparedTurn",
    "StreamBytes",
    "RecordedObservation",
    "ReplayStore",
    "StoredTrajectory",
    "exit_code_in",
    "head_texts",
    "pids_masked",
    "load_trajectories",
    "stable_text",
    "request_key",
]

DEFAULT_MODEL = "replay"
"""`model` of responses whose trajectory has no recorded model."""


_EXIT_CODE_RES = (
    re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>"),  # mini-swe-agent observations
    re.compile(r"(?:exit(?:ed)? (?:with )?(?:code|status)|exit_code)\s*[:=]?\s*(-?\d+)", re.I),
)
# mini-swe-agent 2.x observation_template (config/mini.yaml and the 2.x benchmark configs):
# a JSON object whose first key is "returncode", e.g. {"returncode": 0, "output": "..."},
# or with "output_head"/"output_tail" for a long output, spread over lines or not
_JSON_RETURNCODE_RE = re.compile(r'\{\s*"returncode"\s*:\s*(-?\d+)\s*[,}]')


def exit_code_in(text: str) -> int | None:
    """The exit code an observation text states: a JSON object with an integer
    "returncode" (mini-swe-agent 2.x: `{"returncode": N, "output": ...}`),
    `<returncode>N</returncode>` (mini-swe-agent 1.x and 2.x benchmark configs) or
    `exit code N` / `exited with code N` / `exit status N` / `exit_code: N` (pi bash and
    friends), first match wins; None when none is stated (a JSON "returncode" of null,
    e.g. a timed-out command, states none).

    Each pattern runs only on a text that holds its literal ('{' first and
    '"returncode"'; "<returncode>"; "exit" in any case): the case-insensitive search
    costs ~17 us per KB, the substring tests ~2 us (an 11 KB observation: 190 us -> 20 us).
    The JSON form is read from its leading key by regex; a document whose "returncode"
    is not its first key is parsed (orjson)."""
    if (text[:1] == "{" or text.lstrip()[:1] == "{") and '"returncode"' in text:
        stated = _json_returncode(text)
        if stated is None or isinstance(stated, int):  # else _NOT_JSON
            return stated
    if "<returncode>" in text:
        m = _EXIT_CODE_RES[0].search(text)
        if m:
            return int(m.group(1))
    # str.lower keeps "exit" exact for ASCII; other scripts go to the regex as they are
    if not text.isascii() or "exit" in text.lower():
        m = _EXIT_CODE_RES[1].search(text)
        if m:
            return int(m.group(1))
    return None


_PID_LINE_RE = re.compile(r"^(Process Group PGID|Background PIDs): [0-9, ]+$", re.M)


def pids_masked(text: str) -> str:
    """An observation text as the content divergence check compares it: the lines in
    which a shell tool states the process ids of the run, which differ from one run of
    the same command to the next, with their ids replaced by "*". Gemini CLI's
    run_shell_command ends each output with `Process Group PGID: N` and, when the command
    left processes behind, `Background PIDs: N, M` (google-gemini/gemini-cli
    packages/core/src/tools/shell.ts). Any other text is returned unchanged (a substring
    test first, so a text without such a line costs no regex)."""
    if "PGID: " not in text and "PIDs: " not in text:
        return text
    return _PID_LINE_RE.sub(r"\1: *", text)


# Codex CLI's shell tool result (`exec_command`, observed in @openai/codex 0.171.0): a
# header of "Chunk ID: <hex>", "Wall time: <s> seconds", "Process exited with code N",
# "Original token count: N" lines, then "Output:" and the command's output. The chunk id
# is random and the wall time measured per run.
_VOLATILE_HEADER_RES = (
    (re.compile(r"^Chunk ID: [0-9A-Za-z-]+$", re.M), "Chunk ID: *"),
    (re.compile(r"^Wall time: \d+(?:\.\d+)? seconds$", re.M), "Wall time: * seconds"),
)
_OUTPUT_MARK = "\nOutput:\n"


def stable_text(text: str) -> str:
    """`text` with the per-run fields of a tool result's header masked, so the same
    command's result compares equal across runs: Codex CLI's `Chunk ID: <hex>` becomes
    `Chunk ID: *` and `Wall time: <s> seconds` becomes `Wall time: * seconds`, in the
    lines before its `Output:` line only (the command's own output is never changed).
    The lines in which a shell tool states process ids are masked too (`pids_masked`).
    Any other text is returned as it is."""
    if text.startswith(("Chunk ID: ", "Wall time: ")):
        end = text.find(_OUTPUT_MARK)
        head, rest = (text, "") if end < 0 else (text[:end], text[end:])
        for pattern, mask in _VOLATILE_HEADER_RES:
            head = pattern.sub(mask, head)
        text = head + rest
    return pids_masked(text)


_NOT_JSON = object()


def _json_returncode(text: str) -> int | None | object:
    """The "returncode" of a JSON object observation (exit_code_in): its int, None when
    the object has the key with another value (null: none stated), or _NOT_JSON when
    `text` is no JSON object with that key (the text forms are tried then)."""
    m = _JSON_RETURNCODE_RE.match(text.lstrip())
    if m:
        return int(m.group(1))
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _NOT_JSON
    if not isinstance(doc, dict) or "returncode" not in doc:
        return _NOT_JSON
    code = doc["returncode"]
    return code if isinstance(code, int) and not isinstance(code, bool) else None


@dataclass(frozen=True, slots=True)
class RecordedObservation:
    """A recorded observation in the form the divergence check compares: the
    tool_call_id (None for text-action agents), the content, is_error, the exit
    code (the recorded one, else the one its text states, else None) and `stable`, the
    content with its per-run fields masked (`stable_text`)."""

    tool_call_id: str | None
    content: str
    is_error: bool
    exit_code: int | None
    stable: str

    @classmethod
    def of(cls, obs: Observation) -> RecordedObservation:
        code = obs.exit_code if obs.exit_code is not None else exit_code_in(obs.content)
        return cls(obs.tool_call_id, obs.content, obs.is_error, code, stable_text(obs.content))


@dataclass(frozen=True, slots=True)
class StreamBytes:
    """The SSE response of one turn. groups: (offset_s, bytes) pairs, the events due at
    offset_s seconds from the response start, in order, offsets non-decreasing (the
    role event rides with the first). tail / tail_usage: the finish (+ usage) + [DONE]
    events sent with the last group, without / with include_usage. n_events: token
    events (>= 0). size: bytes held."""

    groups: tuple[tuple[float, bytes], ...]
    tail: bytes
    tail_usage: bytes
    n_events: int
    size: int


@dataclass(slots=True)
class PreparedTurn:
    """One recorded turn prepared for serving.

    model: the response model name (turn's, else trajectory's, else "replay").
    body: the non-streaming response bytes (rendered at load). final_offset_s: when
    the non-streaming body is sent (offset of the last token event). observations:
    what the tools returned after this turn (checked on the next turn). headers: extra
    response headers (x-replay-trajectory, x-replay-turn, x-replay-recorded-error on
    recorded failures). previous: the turn whose observations this turn's recorded
    request ends with (`benchmaker.trajectories.context.previous_turn`: index - 1 unless a context edit
    went back, None when the request holds no assistant message); the divergence check
    compares against it. The streaming bytes are rendered on first use by
    ReplayStore.stream (cached).
    """

    index: int
    body: bytes
    final_offset_s: float
    observations: tuple[RecordedObservation, ...]
    headers: list[tuple[bytes, bytes]]
    turn: Turn
    completion_id: str
    model: str = DEFAULT_MODEL
    previous: int | None = None

    @property
    def untimed(self) -> bool:
        """The turn has no recorded timing (`Turn.timing` None, or neither ttft_ms nor
        duration_ms): under the recorded latency model it is sent at once."""
        timing = self.turn.timing
        return timing is None or (timing.ttft_ms is None and timing.duration_ms is None)


@dataclass(slots=True)
class StoredTrajectory:
    """A trajectory of the store: its position in the file (0-based ordinal), its line
    (1-based), the trajectory itself, the response model name, its prepared turns."""

    ordinal: int
    line: int
    trajectory: Trajectory
    model: str
    turns: list[PreparedTurn]

    @property
    def trajectory_id(self) -> str:
        return self.trajectory.trajectory_id

    @property
    def tool_names(self) -> frozenset[str] | None:
        """The names of the recorded tool definitions (`Trajectory.tools`, chat shape:
        a tool's name is under its type's key), None when the trajectory has none."""
        tools = self.trajectory.tools
        if tools is None:
            return None
        inner = (t.get(t.get("type", "function")) for t in tools)
        return frozenset(d["name"] for d in inner if isinstance(d, dict) and isinstance(d.get("name"), str))


@dataclass(slots=True)
class _SameKey:
    """Turns of one trajectory whose recorded requests share a request key (module doc):
    (fingerprint of the request, entry, turn index) in recorded order, and the rotation
    counter per fingerprint."""

    turns: list[tuple[tuple[object, ...], StoredTrajectory, int]]
    served: dict[tuple[object, ...] | None, int] = field(default_factory=dict)

    def pick(self, messages: list[dict[str, Any]] | None) -> tuple[StoredTrajectory, int]:
        tail = None if messages is None else _fingerprint(messages)
        group = [t for t in self.turns if t[0] == tail] or self.turns
        key = tail if group is not self.turns else None
        n = self.served.get(key, 0)
        self.served[key] = n + 1
        _, entry, k = group[n % len(group)]
        return entry, k


def _fingerprint(messages: list[dict[str, Any]]) -> tuple[object, ...]:
    """(number of messages, flattened contents of the user messages after the last
    assistant message) of a request: tool results left out, as they differ in execute
    mode."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return (
        len(messages),
        *(flatten_content(m.get("content")) for m in messages[last + 1 :] if m.get("role") == "user"),
    )


@dataclass(slots=True)
class _KeyEntry:
    first: StoredTrajectory
    by_system: dict[str | None, StoredTrajectory] | None  # None when the key is unique


@dataclass
class ReplayStore:
    """Trajectories indexed by match key with every turn prepared (see module doc)."""

    path: Path
    latency: LatencyModel
    trajectories: list[StoredTrajectory]
    _index: dict[str, _KeyEntry] = field(repr=False)
    _turn_index: dict[tuple[str, int], tuple[StoredTrajectory, int] | _SameKey] = field(
        default_factory=dict, repr=False
    )
    splitter: Splitter = regex_split
    created: int = 0
    stream_cache_bytes: int = 256 * 2**20
    _cache: OrderedDict[tuple[int, int] | tuple[int, int, str], StreamBytes] = field(
        default_factory=OrderedDict, repr=False
    )
    _cache_size: int = 0
    _response_ids: dict[str, tuple[StoredTrajectory, int]] | None = field(default=None, repr=False)
    canned_replies: frozenset[str] = frozenset()
    """The canned replies of all its trajectories (`Trajectory.canned_replies`, without
    surrounding whitespace); empty when no trajectory lists any. Requests are stripped
    per trajectory (`without_canned`)."""
    _canned_sets: tuple[frozenset[str], ...] = field(default=(), repr=False)
    """The distinct canned reply sets of its trajectories (stripped texts), in file
    order; empty when no trajectory lists canned replies."""
    _canned_by_key: dict[str, tuple[frozenset[str], ...]] = field(default_factory=dict, repr=False)
    """Match key -> the canned reply sets of the trajectories with that key."""

    @classmethod
    def load(
        cls,
        path: Path,
        *,
        latency: LatencyModel | None = None,
        splitter: Splitter = regex_split,
        created: int | None = None,
        stream_cache_bytes: int = 256 * 2**20,
    ) -> ReplayStore:
        """Load `path` (trajectories.jsonl) and prepare every turn for `latency`
        (default instant) with token pieces from `splitter`; `created` (unix s, default
        now) goes into every response. Non-streaming bodies are rendered now; the
        streaming bytes of a turn on its first streamed request, kept in an LRU cache
        of at most `stream_cache_bytes` bytes (default 256 MiB; rendered streams run
        ~20x the recorded text, so a whole large store would not fit). Raises
        TrajectoryFormatError (see `load_trajectories`)."""
        latency = latency or parse_latency("instant")
        created = int(time.time()) if created is None else created
        stored: list[StoredTrajectory] = []
        index: dict[str, _KeyEntry] = {}
        turn_index: dict[tuple[str, int], tuple[StoredTrajectory, int] | _SameKey] = {}
        # the load allocates millions of objects that all stay: a collection cannot free
        # any, and the cyclic GC's full passes over them made a 500-trajectory load
        # ~1.5x slower (benchmarks/corpus.py)
        with gc_paused():
            for line, traj in load_trajectories(path):
                model = traj.model or DEFAULT_MODEL
                turns = _prepare_turns(traj, model, latency, splitter, created)
                entry = StoredTrajectory(ordinal=len(stored), line=line, trajectory=traj, model=model, turns=turns)
                stored.append(entry)
                _index_edited(turn_index, entry)
                key = index.get(traj.match_key)
                if key is None:
                    index[traj.match_key] = _KeyEntry(first=entry, by_system=None)
                else:
                    if key.by_system is None:
                        key.by_system = {key.first.trajectory.system: key.first}
                    key.by_system.setdefault(traj.system, entry)
        canned_sets, canned_by_key = _canned_index(stored)
        return cls(
            path=path,
            latency=latency,
            trajectories=stored,
            _index=index,
            _turn_index=turn_index,
            splitter=splitter,
            created=created,
            stream_cache_bytes=stream_cache_bytes,
            canned_replies=frozenset(text.strip() for entry in stored for text in entry.trajectory.canned_replies),
            _canned_sets=canned_sets,
            _canned_by_key=canned_by_key,
        )

    def without_canned(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`messages` (chat shape) without the canned exchanges of the trajectory they
        belong to (module doc; `benchmaker.trajectories.trajectory.without_canned`).

        The order: the match key is that of the stripped request, and which replies to
        strip depends on the trajectory the key selects. So for each distinct set S of
        the canned replies present in the request (each trajectory's set cut to those
        present), the request stripped of S gives a key (`request_key`); the first S, in
        file order of the trajectories, whose key belongs to a trajectory whose own
        set cut to the present replies is S wins. A trajectory without canned replies
        has the empty set, so its requests stay whole. When no set fits, the request
        stripped of every canned reply of the store is returned (its key is then
        reported unknown). The same list when the store or the request has no canned
        reply; else possibly a new list of the same message objects."""
        if not self._canned_sets:
            return messages
        union = self.canned_replies
        present = frozenset(
            text
            for text in (
                flatten_content(m.get("content")).strip()
                for m in messages
                if m.get("role") == "assistant" and not m.get("tool_calls")
            )
            if text in union
        )
        if not present:
            return messages
        tried: set[frozenset[str]] = set()
        for canned in self._canned_sets:
            cut = present & canned
            if cut in tried:
                continue
            tried.add(cut)
            stripped = without_canned(messages, cut)
            try:
                key, _ = request_key(stripped)
            except ValueError:  # no user message left: no key
                continue
            if any(present & owned == cut for owned in self._canned_by_key.get(key, ())):
                return stripped
        return without_canned(messages, present)

    def stream(self, entry: StoredTrajectory, turn_index: int, api: str = "chat") -> StreamBytes:
        """The SSE bytes of `entry.turns[turn_index]` (module doc) in the wire API `api`
        (a key of API_RENDERERS), from the cache or rendered now and cached (least
        recently used streams are dropped beyond `stream_cache_bytes`; a single stream
        larger than that is not cached). Raises KeyError for an unknown api."""
        key = (entry.ordinal, turn_index, api)
        cache = self._cache
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        prepared = entry.turns[turn_index]
        rendered = API_RENDERERS[api].render_stream(
            prepared.turn,
            completion_id=prepared.completion_id,
            model=prepared.model,
            created=self.created,
            splitter=self.splitter,
        )
        out = _group_events(
            rendered.events,
            self.latency.offsets_ms(len(rendered.events), prepared.turn.timing),
            head=rendered.head,
            tail=rendered.tail,
            tail_usage=rendered.tail_usage,
        )
        if out.size <= self.stream_cache_bytes:
            cache[key] = out
            self._cache_size += out.size
            while self._cache_size > self.stream_cache_bytes:
                _, dropped = cache.popitem(last=False)
                self._cache_size -= dropped.size
        return out

    def body(self, entry: StoredTrajectory, turn_index: int, api: str = "chat") -> bytes:
        """The non-streamed body of `entry.turns[turn_index]` in the wire API `api` (a key
        of API_RENDERERS): the chat body rendered at load (`PreparedTurn.body`), the
        others per call. Raises KeyError for an unknown api."""
        prepared = entry.turns[turn_index]
        renderer = API_RENDERERS[api]
        if renderer is openai_chat:
            return prepared.body
        return renderer.render_body(
            prepared.turn, completion_id=prepared.completion_id, model=prepared.model, created=self.created
        )

    def continued_messages(self, response_id: str) -> list[dict[str, Any]] | None:
        """The chat messages a Responses request with `previous_response_id` =
        `response_id` continues: the recorded request of the turn that answered with that
        id (the Responses body and stream ids) and that turn's assistant message,
        or None when no turn of the store has that id. The id index is built on the
        first call."""
        if self._response_ids is None:
            self._response_ids = {
                openai_responses.response_id(p.completion_id): (entry, k)
                for entry in self.trajectories
                for k, p in enumerate(entry.turns)
            }
        hit = self._response_ids.get(response_id)
        if hit is None:
            return None
        entry, k = hit
        return [*request_messages(entry.trajectory, k), assistant_message(entry.turns[k].turn.response)]

    @property
    def stream_cache_size(self) -> int:
        """Bytes of streams held in the cache now."""
        return self._cache_size

    def lookup(self, match_key: str, system_text: str | None) -> StoredTrajectory | None:
        """The trajectory serving `match_key` (selection rule in the module doc), or
        None when no trajectory has that key."""
        entry = self._index.get(match_key)
        if entry is None:
            return None
        if entry.by_system is None or system_text is None:
            return entry.first
        return entry.by_system.get(system_text, entry.first)

    def lookup_turn(self, match_key: str, n_assistant: int) -> tuple[StoredTrajectory, int] | None:
        """(trajectory, turn index) of a turn sent after a context edit whose recorded
        request has this key and assistant-message count (module doc), else None."""
        if not self._turn_index:
            return None
        hit = self._turn_index.get((match_key, n_assistant))
        return hit.turns[0][1:] if isinstance(hit, _SameKey) else hit

    def match(
        self,
        match_key: str,
        n_assistant: int,
        system_message: dict[str, Any] | None,
        messages: list[dict[str, Any]] | None = None,
    ) -> tuple[StoredTrajectory, int] | None:
        """(trajectory, turn index) serving a request with this key and assistant-message
        count, its system message (None: it has none), in one call (the server's hot
        path): `lookup_turn`'s hit (unless several trajectories share the key and
        another one's system text is the request's), else (`lookup(match_key, the
        flattened system text when several trajectories share the key)`, n_assistant); None when no
        trajectory has the key. The turn index may be past the trajectory's turns.
        `messages`: the request's, to choose among turns sharing a key (module doc)."""
        if self._turn_index:
            hit = self._turn_index.get((match_key, n_assistant))
            if hit is not None:
                if system_message is not None:  # another trajectory of the key, by system text
                    shared = self._index.get(match_key)
                    if shared is not None and shared.by_system is not None:
                        chosen = shared.by_system.get(flatten_content(system_message.get("content")))
                        owner = hit.turns[0][1] if isinstance(hit, _SameKey) else hit[0]
                        if chosen is not None and chosen is not owner:
                            return chosen, n_assistant
                return hit.pick(messages) if isinstance(hit, _SameKey) else hit
        entry = self._index.get(match_key)
        if entry is None:
            return None
        if entry.by_system is None or system_message is None:
            return entry.first, n_assistant
        return entry.by_system.get(flatten_content(system_message.get("content")), entry.first), n_assistant

    def needs_system(self, match_key: str) -> bool:
        """True when several trajectories share `match_key` (the system text matters)."""
        entry = self._index.get(match_key)
        return entry is not None and entry.by_system is not None

    @property
    def n_turns(self) -> int:
        """Recorded turns over all trajectories."""
        return sum(len(t.turns) for t in self.trajectories)

    @property
    def untimed_turns(self) -> int:
        """Recorded turns without a timing (`PreparedTurn.untimed`)."""
        return sum(p.untimed for t in self.trajectories for p in t.turns)

    @property
    def models(self) -> list[str]:
        """Distinct response model names (per turn), in file order."""
        return list(dict.fromkeys(p.model for t in self.trajectories for p in t.turns))


def _canned_index(
    stored: list[StoredTrajectory],
) -> tuple[tuple[frozenset[str], ...], dict[str, tuple[frozenset[str], ...]]]:
    """(the distinct canned reply sets of `stored` in file order, match key -> the sets
    of its trajectories) for `ReplayStore.without_canned`; both empty when no trajectory
    lists canned replies. Texts are stripped of surrounding whitespace, as
    `without_canned` compares them."""
    if not any(entry.trajectory.canned_replies for entry in stored):
        return (), {}
    sets: dict[frozenset[str], None] = {}
    by_key: dict[str, dict[frozenset[str], None]] = {}
    for entry in stored:
        canned = frozenset(text.strip() for text in entry.trajectory.canned_replies)
        sets[canned] = None
        by_key.setdefault(entry.trajectory.match_key, {})[canned] = None
    return tuple(sets), {key: tuple(owned) for key, owned in by_key.items()}


def _index_edited(
    turn_index: dict[tuple[str, int], tuple[StoredTrajectory, int] | _SameKey], entry: StoredTrajectory
) -> None:
    """Index the turns of `entry` that the trajectory's match key and turn index cannot
    find (module doc): every turn from the first context edit on, by its recorded
    request's key, and each earlier turn whose (match key, index) one of those shares
    (so `_SameKey` tells them apart; other earlier turns stay on the match-key path,
    where trajectories sharing a key are chosen by system text)."""
    traj = entry.trajectory
    first = next((k for k, t in enumerate(traj.turns) if t.context_edit is not None), None)
    if first is None:
        return
    edited = dict(recorded_requests(traj, first))  # one history's dicts, shared: not quadratic in objects
    keys = {request_key(m) for m in edited.values()}
    for k in range(first):
        if (traj.match_key, k) in keys:
            _index_turn(turn_index, entry, k, request_messages(traj, k))
    for k, messages in edited.items():
        _index_turn(turn_index, entry, k, messages)


def _index_turn(
    turn_index: dict[tuple[str, int], tuple[StoredTrajectory, int] | _SameKey],
    entry: StoredTrajectory,
    k: int,
    messages: list[dict[str, Any]],
) -> None:
    """Index turn k of `entry` under its recorded request's key: the first trajectory
    with a key keeps it; turns of that trajectory sharing it go into a `_SameKey`."""
    key = request_key(messages)
    hit = turn_index.get(key)
    if hit is None:
        turn_index[key] = (entry, k)
        return
    if isinstance(hit, tuple):
        if hit[0] is not entry:
            return
        first_messages = request_messages(entry.trajectory, hit[1])
        hit = turn_index[key] = _SameKey([(_fingerprint(first_messages), entry, hit[1])])
    if hit.turns[0][1] is entry:
        hit.turns.append((_fingerprint(messages), entry, k))


def request_key(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """(task key, number of assistant messages) of a chat request's messages, the
    replay server's matching rule: the key over the user messages before the first
    assistant message (`match_key_for_messages` of their flattened contents), or over
    the first user message when every user message follows an assistant one. Raises
    ValueError when there is no user message."""
    roles = [m.get("role") for m in messages]
    head = head_texts(messages, roles)
    if head is None:
        raise ValueError("messages: no message with role 'user'")
    return match_key_for_messages([head] if type(head) is str else list(head)), roles.count("assistant")


def head_texts(messages: list[dict[str, Any]], roles: list[Any]) -> str | tuple[str, ...] | None:
    """The head user texts of chat `messages` (`roles`: the role of each), which their
    task key is over (`request_key`): the flattened text of the one user message before
    the first assistant message (else of the first user message), or the tuple of
    several; None when there is no user message."""
    first_assistant = roles.index("assistant") if "assistant" in roles else len(roles)
    users = [i for i in range(first_assistant) if roles[i] == "user"]
    if len(users) > 1:
        return tuple(flatten_content(messages[i].get("content")) for i in users)
    if "user" not in roles:
        return None
    return flatten_content(messages[roles.index("user")].get("content"))


def load_trajectories(path: Path) -> list[tuple[int, Trajectory]]:
    """Read and validate trajectories.jsonl: [(line number (1-based), Trajectory)].

    Blank lines are skipped. Raises benchmaker.trajectories.errors.TrajectoryFormatError at the first
    bad line (not UTF-8, not JSON, schema violation, duplicate trajectory_id), reading
    `path:line: field.path: problem (got VALUE)`, and when the file holds no
    trajectory (`path: no trajectories in the file`); OSError when it cannot be read.
    Nothing is served from a store that failed to load.
    """
    data = Path(path).read_bytes()
    out: list[tuple[int, Trajectory]] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            traj = Trajectory.model_validate_json(raw)  # rejects invalid UTF-8 too
        except ValidationError as exc:
            try:  # the UTF-8 check only on the error path: it cost ~5% of a load
                raw.decode("utf-8")
            except UnicodeDecodeError as uexc:
                raise TrajectoryFormatError(
                    path,
                    lineno,
                    None,
                    f"not UTF-8 at byte {uexc.start}",
                    raw[uexc.start : uexc.start + 4],
                ) from None
            raise _format_error(path, lineno, exc) from None
        first = seen.setdefault(traj.trajectory_id, lineno)
        if first != lineno:
            raise TrajectoryFormatError(path, lineno, "trajectory_id", f"duplicate of line {first}", traj.trajectory_id)
        out.append((lineno, traj))
    if not out:
        raise TrajectoryFormatError(path, None, None, "no trajectories in the file")
    return out


def _format_error(path: Path, lineno: int, exc: ValidationError) -> TrajectoryFormatError:
    err = exc.errors(include_url=False)[0]
    if err["type"] == "json_invalid":
        return TrajectoryFormatError(path, lineno, None, err["msg"])
    loc = ""
    for part in err["loc"]:
        loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
    return TrajectoryFormatError(path, lineno, loc or None, err["msg"], err.get("input"))


def _prepare_turns(
    traj: Trajectory, model: str, latency: LatencyModel, splitter: Splitter, created: int
) -> list[PreparedTurn]:
    digest = hashlib.sha256(traj.trajectory_id.encode("utf-8")).hexdigest()[:16]
    traj_header = quote(traj.trajectory_id, safe="").encode("ascii")
    edited = any(t.context_edit is not None for t in traj.turns)
    out = []
    for k, turn in enumerate(traj.turns):
        completion_id = f"chatcmpl-replay-{digest}-{turn.index}"
        turn_model = turn.model or model
        final_offset_s = 0.0
        if latency.kind != "instant":
            final_offset_s = latency.offsets_ms(_n_events(turn, splitter), turn.timing)[-1] / 1000.0
        headers = [(b"x-replay-trajectory", traj_header), (b"x-replay-turn", str(turn.index).encode())]
        if turn.response.finish_reason in ("aborted", "error"):
            headers.append((b"x-replay-recorded-error", turn.response.finish_reason.encode()))
        prepared = PreparedTurn(
            index=turn.index,
            body=openai_chat.render_body(turn, completion_id=completion_id, model=turn_model, created=created),
            final_offset_s=final_offset_s,
            observations=tuple(RecordedObservation.of(o) for o in turn.observations),
            headers=headers,
            turn=turn,
            completion_id=completion_id,
            model=turn_model,
            previous=previous_turn(traj, k) if edited else (k - 1 if k else None),
        )
        out.append(prepared)
    return out


def _n_events(turn: Turn, splitter: Splitter) -> int:
    resp = turn.response
    n = len(splitter(resp.reasoning or "")) + len(splitter(resp.content or ""))
    return n + sum(1 + len(splitter(tc.arguments_raw)) for tc in resp.tool_calls)


def _group_events(
    events: list[bytes], offsets_ms: list[float], *, head: bytes = b"", tail: bytes, tail_usage: bytes | None = None
) -> StreamBytes:
    """StreamBytes of token `events` sent at `offsets_ms` (one per event, at least one:
    LatencyModel.offsets_ms; events at the same offset in one group): `head` (the
    events before the first token event) rides with the first event, `tail` (and
    `tail_usage`, the tail with usage; default `tail`) with the last group; with no
    event, `head` alone at the first offset."""
    n_events = len(events)
    if head:
        events = [head + events[0], *events[1:]] if events else [head]
    groups: list[tuple[float, list[bytes]]] = []
    for offset_ms, data in zip(offsets_ms, events, strict=False):
        offset = offset_ms / 1000.0
        if groups and groups[-1][0] == offset:
            groups[-1][1].append(data)
        else:
            groups.append((offset, [data]))
    joined = tuple((offset, b"".join(parts)) for offset, parts in groups) or ((offsets_ms[0] / 1000.0, b""),)
    if tail_usage is None:
        tail_usage = tail
    size = sum(len(b) for _, b in joined) + len(tail) + len(tail_usage)
    return StreamBytes(groups=joined, tail=tail, tail_usage=tail_usage, n_events=n_events, size=size)


API_RENDERERS: dict[str, Renderer] = {
    "chat": openai_chat,
    "responses": openai_responses,
    "messages": anthropic_messages,
    "gemini": gemini,
}
"""Wire API name -> the apis module that renders a recorded turn in it
(benchmaker.apis.recorded.Renderer): its body as bytes, its stream as token events the
latency model times as the chat stream's (the same count per turn)."""
