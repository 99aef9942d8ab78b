"""User-defined agents as a workload: one episode per sample.

A user's agent is a class with one async method per episode:

    class MyAgent:
        def __init__(self, **options): ...                 # options from YAML / CLI
        async def run_episode(self, episode_index: int, client) -> dict:
            r = await client.chat([{"role": "user", "content": "hi"}])
            return {"ok": r.ok, "answer": r.content}

loaded from `module:Class` (`load_agent_class`) and run through the engine's
CallableWorkload seam (benchmaker.engine.types) at closed-loop concurrency:

    workload: {type: agent, class: "mypkg.agents:MyAgent", url: http://127.0.0.1:8000,
               model: m, options: {...}}
    load: closed:8
    max_requests: 100              # episodes

`client` is a `benchmaker.agent.model_client.ModelClient` on `url` (None when no url is given),
sending on one engine transport shared by the episodes (`transport`: `raw`, the
engine's own HTTP/1.1 client, by default; `aiohttp` selectable; opened by `start()`
before the clock, closed by `aclose()`); every `client.chat(...)` call is counted.
A sample is one episode: E2E is the whole `run_episode` call. The sample gets

    meta = {"episode_index", "result": <the returned dict>, "n_model_calls",
            "model_time_ms": time awaiting the model's streams only (docs/metrics.md)}
    first_token_ns / first_content_ns   of the episode's first model call (offsets from t0)
    prompt_tokens / output_tokens       sums over its calls, only when every call carried
                                        usage (`usage_present`), else None

Outcome: `ok`; `graded_wrong` when the result has `"ok": False` (its `"error"` text kept);
`protocol_error` when a model call failed and the result does not say `"ok"`, or when
`run_episode` raised (the runner names the exception) or returned a non-dict.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

import orjson

from benchmaker.engine.errors import ConfigError
from benchmaker.engine.records import Outcome, Sample
from benchmaker.engine.transport import make_transport

__all__ = ["AgentWorkload", "load_agent_class", "start_model_transport"]


async def start_model_transport(kind: str = "raw") -> Any:
    """An engine transport for the model calls of agent episodes, started on
    the running loop: `kind` as the engine config's `transport` (`raw` default, the
    engine's HTTP/1.1 client; `aiohttp`, `httpx`, `null`; benchmaker.engine.transport). No
    connection cap (the pool grows to the episodes in flight) and no connect deadline
    (each ModelClient call keeps its own total and idle deadlines over every await).
    The caller closes it (`await transport.aclose()`). Raises ConfigError for an
    unknown `kind`."""
    transport = make_transport(kind, connect_timeout_s=None, limit=0)
    start = getattr(transport, "start", None)
    if start is not None:
        await start()
    return transport


def load_agent_class(ref: str, base_dir: Path | None = None) -> type:
    """Import `module:Class` (dots allowed on both sides: `pkg.mod:Outer.Inner`).
    When the module is not importable, `base_dir` (the YAML file's folder), then the
    current directory, is put on sys.path and the import retried (kept there when it
    worked). Raises
    ConfigError `class: problem (got REF)` when it cannot be imported, is no class, or
    has no async `run_episode`."""
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise ConfigError(f"class: expected 'module:Class' (got {ref!r})")
    module = None
    tried: list[str] = []
    for extra in (None, base_dir, Path.cwd()):
        if extra is not None:
            if str(extra) in sys.path:
                continue
            sys.path.insert(0, str(extra))
            tried.append(str(extra))
        try:
            module = importlib.import_module(mod_name)
            break
        except ModuleNotFoundError as exc:
            if extra is not None:
                sys.path.remove(str(extra))
            if exc.name != mod_name.split(".")[0]:
                raise ConfigError(f"class: cannot import module {mod_name!r}: {exc} (got {ref!r})") from exc
    if module is None:
        also = f" (also tried {', '.join(tried)})" if tried else ""
        raise ConfigError(f"class: cannot import module {mod_name!r}{also} (got {ref!r})")
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"class: module {mod_name!r} has no attribute {attr!r} (got {ref!r})") from None
    if not inspect.isclass(obj):
        raise ConfigError(f"class: {attr!r} is not a class (got {ref!r})")
    if not inspect.iscoroutinefunction(getattr(obj, "run_episode", None)):
        raise ConfigError(f"class: {attr!r} has no `async def run_episode(self, episode_index, client)` (got {ref!r})")
    return obj


class _CountingClient:
    """Forwards to a ModelClient and keeps each `chat` ChatResult (other attributes pass through)."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.calls: list[Any] = []

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        result = await self._inner.chat(messages, **kwargs)
        self.calls.append(result)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class AgentWorkload:
    """Runs `agent.run_episode(seq, client)` per sample (module docstring); a
    CallableWorkload. `agent` is an instance (one per workload, shared by concurrent
    episodes) or a class (instantiated with `options`). `url` is the model endpoint's
    base URL (`http://host:port` or `.../v1`; calls go to /v1/chat/completions);
    `model` and `api_key` go to the client; `timeout_s` bounds each model call;
    `transport`: the engine transport the calls go on (`raw` default, `aiohttp`;
    start_model_transport). Raises ConfigError for an agent without async run_episode."""

    def __init__(
        self,
        agent: Any,
        *,
        url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        options: dict[str, Any] | None = None,
        timeout_s: float = 600.0,
        transport: str = "raw",
    ) -> None:
        self.agent: Any = agent(**(options or {})) if inspect.isclass(agent) else agent
        if not inspect.iscoroutinefunction(getattr(self.agent, "run_episode", None)):
            raise ConfigError(f"agent: {type(self.agent).__name__} has no async run_episode(episode_index, client)")
        self.name = f"agent:{type(self.agent).__name__}"
        self.url = url
        self.model = model
        self._api_key = api_key
        self._timeout_s = timeout_s
        self.transport = transport
        self._transport: Any = None

    def describe(self) -> dict[str, Any]:
        """The manifest's description of this workload (no secrets)."""
        cls = type(self.agent)
        return {
            "type": "agent",
            "class": f"{cls.__module__}:{cls.__qualname__}",
            "url": self.url,
            "model": self.model,
            "transport": self.transport,
        }

    async def start(self) -> None:
        """Open the transport shared by the episodes' clients (start_model_transport)."""
        if self.url and self._transport is None:
            self._transport = await start_model_transport(self.transport)

    async def aclose(self) -> None:
        """Close the transport (every connection of the episodes' clients)."""
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None

    def _client(self) -> _CountingClient | None:
        if not self.url:
            return None
        from benchmaker.agent.model_client import ModelClient

        return _CountingClient(
            ModelClient(
                self.url, api_key=self._api_key, model=self.model, transport=self._transport, timeout_s=self._timeout_s
            )
        )

    async def execute(self, seq: int, sample: Sample, t0_ns: int) -> str | None:
        """One episode (module docstring); returns the result as JSON text for hooks."""
        client = self._client()
        try:
            result = await self.agent.run_episode(seq, client)
        finally:
            if client is not None and self._transport is None:
                await client._inner.aclose()
        calls = client.calls if client is not None else []
        if not isinstance(result, dict):
            raise TypeError(f"run_episode returned {type(result).__name__}, expected dict")
        try:
            text = orjson.dumps(result, default=str).decode()
        except TypeError as exc:
            raise TypeError(f"run_episode result is not JSON-serializable: {exc}") from exc
        sample.meta = {
            "episode_index": seq,
            "result": orjson.loads(text),
            "n_model_calls": len(calls),
            "model_time_ms": sum(c.model_time_ns for c in calls) / 1e6,
        }
        if calls:
            first = calls[0]
            if first.first_token_ns is not None:
                sample.first_token_ns = first.first_token_ns - t0_ns
            if first.first_visible_ns is not None:
                sample.first_content_ns = first.first_visible_ns - t0_ns
            if all(c.prompt_tokens is not None and c.output_tokens is not None for c in calls):
                sample.usage_present = True
                sample.prompt_tokens = sum(c.prompt_tokens for c in calls)
                sample.output_tokens = sum(c.output_tokens for c in calls)
        ok = result.get("ok")
        failed = [c for c in calls if c.outcome not in (Outcome.OK.value, Outcome.EMPTY_OUTPUT.value)]
        if ok is False:
            sample.outcome = Outcome.GRADED_WRONG.value
            sample.error = str(result.get("error") or "agent reported ok: false")[:2000]
        elif failed and ok is not True:
            sample.outcome = Outcome.PROTOCOL_ERROR.value
            c = failed[0]
            sample.error = f"model call failed: {c.outcome} {c.status or ''} {c.error or ''}".strip()[:2000]
        else:
            sample.outcome = Outcome.OK.value
        return text
