"""A scriptable OpenAI-compatible server for tests and benchmarks (aiohttp, loopback).

In process:

    async with ScenarioServer(Scenario(role_delay_ms=5, ttft_ms=500)) as server:
        url = server.chat_url              # http://127.0.0.1:PORT/v1/chat/completions

As a process (prints its base URL on the first stdout line, serves until SIGINT/SIGTERM):

    python -m benchmaker.testing.scenario_server --port 0 --scenario '{"ttft_ms": 50}'
    python -m benchmaker.testing.scenario_server --scenario @scenario.json \\
        --named slow='{"ttft_ms": 900}'

Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/responses`
(OpenAI Responses), `POST /v1/messages` (Anthropic Messages), `POST /generate` (SGLang
native; stream or not, as the request's `stream` says), `GET /v1/models`, `GET /health`. The scenario of a request is
the one named by its `x-scenario` header, else the one named like its `model`, else the
server's default; an unknown `x-scenario` name gets a 400.

A streamed response is a timeline of SSE events at offsets from the request's arrival:

    role chunk        at role_delay_ms            (delta {"role": "assistant", "content": ""})
    generated chunk 0 at max(ttft_ms, role_delay_ms)
    generated chunk j at chunk j-1 + itl_ms[j-1]  (a constant, or a list; its last value repeats)
    finish chunk, usage chunk, [DONE] at the last generated chunk's offset

Generated chunks are, in order: `reasoning_chunks` reasoning deltas, `content_chunks`
content deltas, then the tool call (name chunk, then one chunk per argument piece). Each
reasoning/content chunk carries `tokens_per_chunk` tokens (words); tool-call chunks count
one token each. usage.completion_tokens = all those tokens (or `completion_tokens`).
Events due at the same offset go out in one write.

`/v1/responses`: the same generated chunks as Responses events, written by
benchmaker.apis.openai_responses.stream_events (`event:` + `data:` lines,
`sequence_number`s): reasoning chunks as `response.reasoning_summary_text.delta`,
content chunks as `response.output_text.delta`, the tool call's name chunk as its
`response.output_item.added`, its argument pieces as
`response.function_call_arguments.delta`, each at the generated chunk's offset; the
events before the first one (`response.created`, `response.in_progress`, item and part
heads) go with it, the closing events and `response.completed` (usage as
`input_tokens`/`output_tokens`/`..._details`, null with usage="none") with the last.
`finish_reason` "length" ends it `response.incomplete` (max_output_tokens), "error"
`response.failed`. role_chunk, truncation, error injection and framing options apply to
chat and completions only. Non-streamed: the `response` object.
`/v1/messages` (benchmaker.apis.anthropic_messages has the event shapes): each event with
its `event:` line; `message_start` (usage: input_tokens = prompt_tokens - cached_tokens,
cache_read_input_tokens = cached_tokens or 0, output_tokens 1) at role_delay_ms; the
generated chunks on the same timeline as chat's, as `content_block_delta` events:
thinking_delta per reasoning chunk, text_delta per content chunk, input_json_delta per
tool-call argument piece (the tool_use block's start, which carries the name, rides with
its first piece and is no chunk of its own); each block's `content_block_start` (the
first with a `ping`) rides with its first delta, its `content_block_stop` with the next
event; `message_delta` (stop_reason end_turn / tool_use / the scenario's finish_reason;
usage.output_tokens = completion_tokens, else the reasoning and content tokens plus one
per argument piece) and `message_stop` at the last chunk's offset. error_after=N: an
`event: error` after N events; `done=False` leaves out message_stop; usage="none"
leaves out both usage objects.

`/generate` (SGLang, sgl-project/sglang `http_server.py`): one event per content chunk,
`{"text": <ALL text so far>, "meta_info": {"id", "finish_reason", "prompt_tokens",
"completion_tokens": <tokens so far>, "cached_tokens"}}` (the counts left out with
usage="none", cached_tokens only when set); the last chunk's finish_reason is
`{"type": finish_reason or "stop"}`, the others null; then `data: [DONE]`. Non-streamed:
one `{"text", "meta_info"}` object. Pacing uses absolute deadlines
(`time.monotonic()` at arrival + offset), so delays do not accumulate drift.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any, Literal

import orjson
from aiohttp import web
from orjson import dumps
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchmaker.apis.openai_responses import ResponseCall, ResponseOutput, response_object, stream_events

__all__ = ["Scenario", "ScenarioServer", "ToolCallScript", "main"]

_EOL = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}
# the POST endpoints and the kind of answer each gives (_Timeline)
_ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/generate": "sglang",
    "/v1/messages": "messages",
}


class ToolCallScript(BaseModel):
    """One streamed tool call: a chunk with `id`, `type` and `function.name` (arguments
    ""), then one chunk per entry of `argument_chunks`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "get_weather"
    argument_chunks: tuple[str, ...] = ('{"city"', ': "Paris"}')
    id: str = "call_0"


class Scenario(BaseModel):
    """What the server does for one request. Times in ms from the request's arrival.

    Scenario()                                        # 8 content chunks at once, usage last
    Scenario(role_delay_ms=5, ttft_ms=500)            # role chunk at 5 ms, content at 500 ms
    Scenario(content_chunks=10, tokens_per_chunk=4, itl_ms=40)
    Scenario(reasoning_chunks=50, reasoning_field="both")
    Scenario(usage="none")                            # no usage anywhere
    Scenario(status=500)                              # HTTP 500 with an OpenAI error body
    Scenario(truncate_after=3)                        # 3 chunks, then end without [DONE]
    Scenario(replay="x.chunks.jsonl", replay_delay_ms=20)
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # HTTP status; >= 400 answers with `error_body` (default: OpenAI-shaped error JSON)
    # after latency_ms.
    status: int = Field(200, ge=100, le=599)
    error_body: dict[str, Any] | str | None = None
    # Streaming timeline.
    role_chunk: bool = True
    role_delay_ms: float = Field(0.0, ge=0)
    ttft_ms: float = Field(0.0, ge=0)
    itl_ms: float | tuple[float, ...] = 0.0
    reasoning_chunks: int = Field(0, ge=0)
    # "both" alternates reasoning_content (even chunks) and reasoning (odd chunks).
    reasoning_field: Literal["reasoning_content", "reasoning", "both"] = "reasoning_content"
    content_chunks: int = Field(8, ge=0)
    tokens_per_chunk: int = Field(1, ge=1)
    tool_call: ToolCallScript | None = None
    # Default: "tool_calls" with a tool call, else "stop".
    finish_reason: str | None = None
    # final: usage-only chunk (choices: []) after the finish chunk; finish: on the finish
    # chunk; none: no usage at all. usage_null_elsewhere adds "usage": null to the others.
    usage: Literal["final", "finish", "none"] = "final"
    usage_null_elsewhere: bool = False
    prompt_tokens: int = Field(10, ge=0)
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    # Failures inside a 200 stream. truncate_after=N: only the first N data events, then
    # the body ends ("clean": proper end of the chunked body; "abort": the connection is
    # closed mid-body). error_after=N: an {"error": ...} event after N data events.
    truncate_after: int | None = Field(None, ge=0)
    truncate_mode: Literal["clean", "abort"] = "clean"
    error_after: int | None = Field(None, ge=0)
    done: bool = True
    # SSE framing: line ends, and a ": keep-alive" comment before every event.
    line_ending: Literal["lf", "crlf", "cr"] = "lf"
    keepalive_comments: bool = False
    # Non-streamed responses (and error responses): total latency before the answer.
    latency_ms: float = Field(0.0, ge=0)
    # Replay a captured chunk file (one JSON chunk per line, no framing): chunk i at
    # i * replay_delay_ms, then [DONE]. The timeline fields above are ignored.
    replay: str | None = None
    replay_delay_ms: float = Field(0.0, ge=0)

    def generated_tokens(self) -> int:
        """Tokens in the generated chunks (the default usage.completion_tokens)."""
        n = (self.reasoning_chunks + self.content_chunks) * self.tokens_per_chunk
        if self.tool_call is not None:
            n += 1 + len(self.tool_call.argument_chunks)
        return n


class _Timeline:
    """Builds the (offset_s, bytes) events of one streamed response."""

    def __init__(self, sc: Scenario, kind: str, model: str) -> None:
        self.sc = sc
        self.kind = kind  # "chat" | "completions" | "responses" | "sglang"
        self.model = model
        self.eol = _EOL[sc.line_ending]

    def _frame(self, payload: bytes) -> bytes:
        eol = self.eol
        head = b": keep-alive" + eol + eol if self.sc.keepalive_comments else b""
        if self.kind == "messages":  # the event's type on its `event:` line
            head += b"event: " + str(orjson.loads(payload).get("type")).encode() + eol
        return head + b"data: " + payload + eol + eol

    def _chunk(self, choices: list[Any], usage: Any = ..., **extra: Any) -> bytes:
        obj: dict[str, Any] = {
            "id": "cmpl-scenario",
            "object": "chat.completion.chunk" if self.kind == "chat" else "text_completion",
            "created": 0,
            "model": self.model,
            "choices": choices,
        }
        if usage is not ...:
            obj["usage"] = usage
        elif self.sc.usage_null_elsewhere:
            obj["usage"] = None
        obj.update(extra)
        return dumps(obj)

    def _choice(
        self, delta: dict[str, Any] | None, text: str | None = None, finish: str | None = None
    ) -> dict[str, Any]:
        if self.kind == "chat":
            return {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

    def usage_obj(self) -> dict[str, Any]:
        sc = self.sc
        completion = sc.completion_tokens if sc.completion_tokens is not None else sc.generated_tokens()
        usage: dict[str, Any] = {
            "prompt_tokens": sc.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": sc.prompt_tokens + completion,
        }
        if sc.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": sc.cached_tokens}
        if sc.reasoning_chunks:
            usage["completion_tokens_details"] = {"reasoning_tokens": sc.reasoning_chunks * sc.tokens_per_chunk}
        return usage

    def _sglang_meta(self, tokens: int, finish: Any) -> dict[str, Any]:
        sc = self.sc
        meta: dict[str, Any] = {"id": "scenario", "finish_reason": finish}
        if sc.usage != "none":
            meta["prompt_tokens"] = sc.prompt_tokens
            meta["completion_tokens"] = tokens
            if sc.cached_tokens is not None:
                meta["cached_tokens"] = sc.cached_tokens
        return meta

    def _sglang_payloads(self) -> list[tuple[float, bytes]]:
        sc = self.sc
        words = sc.tokens_per_chunk
        gaps = (sc.itl_ms,) if isinstance(sc.itl_ms, (int, float)) else sc.itl_ms or (0.0,)
        total = sc.completion_tokens if sc.completion_tokens is not None else sc.content_chunks * words
        out: list[tuple[float, bytes]] = []
        t = sc.ttft_ms
        for j in range(sc.content_chunks):
            if j:
                t += gaps[min(j - 1, len(gaps) - 1)]
            last = j == sc.content_chunks - 1
            finish = {"type": sc.finish_reason or "stop"} if last else None
            tokens = total if last else (j + 1) * words
            out.append((t, dumps({"text": "tok " * words * (j + 1), "meta_info": self._sglang_meta(tokens, finish)})))
        return out

    def _messages_tokens(self) -> int:
        sc = self.sc
        if sc.completion_tokens is not None:
            return sc.completion_tokens
        n = (sc.reasoning_chunks + sc.content_chunks) * sc.tokens_per_chunk
        return n + (len(sc.tool_call.argument_chunks) if sc.tool_call is not None else 0)

    def _messages_reason(self) -> str:
        sc = self.sc
        return sc.finish_reason or ("tool_use" if sc.tool_call is not None else "end_turn")

    def _message(self, content: list[dict[str, Any]], stop_reason: str | None, output_tokens: int) -> dict[str, Any]:
        """A Messages `message` object; its usage (module doc) left out with usage="none"."""
        sc = self.sc
        message: dict[str, Any] = {
            "id": "msg_scenario",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
        }
        if sc.usage != "none":
            cached = sc.cached_tokens or 0
            message["usage"] = {
                "input_tokens": sc.prompt_tokens - cached,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
                "output_tokens": output_tokens,
            }
        return message

    def _messages_payloads(self) -> list[tuple[float, bytes]]:
        """The Messages events (module doc), each a data payload at its offset (ms)."""
        sc = self.sc
        words = sc.tokens_per_chunk
        message = self._message([], None, 1)
        out: list[tuple[float, bytes]] = [(sc.role_delay_ms, dumps({"type": "message_start", "message": message}))]
        blocks: list[tuple[dict[str, Any], str, str, list[str]]] = []
        if sc.reasoning_chunks:
            blocks.append(
                (
                    {"type": "thinking", "thinking": "", "signature": ""},
                    "thinking_delta",
                    "thinking",
                    ["think " * words] * sc.reasoning_chunks,
                )
            )
        if sc.content_chunks:
            blocks.append(({"type": "text", "text": ""}, "text_delta", "text", ["tok " * words] * sc.content_chunks))
        if sc.tool_call is not None:
            tc = sc.tool_call
            blocks.append(
                (
                    {"type": "tool_use", "id": tc.id, "name": tc.name, "input": {}},
                    "input_json_delta",
                    "partial_json",
                    list(tc.argument_chunks),
                )
            )
        gaps = (sc.itl_ms,) if isinstance(sc.itl_ms, (int, float)) else sc.itl_ms or (0.0,)
        t = max(sc.ttft_ms, sc.role_delay_ms)
        j = 0
        for index, (start, kind, field, pieces) in enumerate(blocks):
            for k, piece in enumerate(pieces):
                if j:
                    t += gaps[min(j - 1, len(gaps) - 1)]
                j += 1
                if k == 0:
                    if index:
                        out.append((t, dumps({"type": "content_block_stop", "index": index - 1})))
                    out.append((t, dumps({"type": "content_block_start", "index": index, "content_block": start})))
                    if index == 0:
                        out.append((t, dumps({"type": "ping"})))
                out.append(
                    (t, dumps({"type": "content_block_delta", "index": index, "delta": {"type": kind, field: piece}}))
                )
        if blocks:
            out.append((t, dumps({"type": "content_block_stop", "index": len(blocks) - 1})))
        delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": self._messages_reason(), "stop_sequence": None},
        }
        if sc.usage != "none":
            delta["usage"] = {"output_tokens": self._messages_tokens()}
        out.append((t, dumps(delta)))
        if sc.done:
            out.append((t, dumps({"type": "message_stop"})))
        return out

    def payloads(self) -> list[tuple[float, bytes]]:
        """Data events (offset_s, JSON payload), without [DONE], in order."""
        sc = self.sc
        if self.kind == "sglang":
            return self._sglang_payloads()
        if self.kind == "messages":
            return self._messages_payloads()
        out: list[tuple[float, bytes]] = []
        chat = self.kind == "chat"
        if chat and sc.role_chunk:
            out.append((sc.role_delay_ms, self._chunk([self._choice({"role": "assistant", "content": ""})])))
        gen: list[bytes] = []
        words = sc.tokens_per_chunk
        if chat:
            for i in range(sc.reasoning_chunks):
                field = sc.reasoning_field
                if field == "both":
                    field = "reasoning_content" if i % 2 == 0 else "reasoning"
                gen.append(self._chunk([self._choice({field: "think " * words})]))
        for _ in range(sc.content_chunks):
            text = "tok " * words
            gen.append(self._chunk([self._choice({"content": text}, text=text)]))
        if chat and sc.tool_call is not None:
            tc = sc.tool_call
            first = {"index": 0, "id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": ""}}
            gen.append(self._chunk([self._choice({"tool_calls": [first]})]))
            for piece in tc.argument_chunks:
                gen.append(
                    self._chunk([self._choice({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})])
                )
        gaps = (sc.itl_ms,) if isinstance(sc.itl_ms, (int, float)) else sc.itl_ms or (0.0,)
        t = max(sc.ttft_ms, sc.role_delay_ms if chat and sc.role_chunk else 0.0)
        for j, payload in enumerate(gen):
            if j:
                t += gaps[min(j - 1, len(gaps) - 1)]
            out.append((t, payload))
        reason = sc.finish_reason or ("tool_calls" if chat and sc.tool_call is not None else "stop")
        finish_choice = [self._choice({}, finish=reason)]
        if sc.usage == "finish":
            out.append((t, self._chunk(finish_choice, usage=self.usage_obj())))
        else:
            out.append((t, self._chunk(finish_choice)))
            if sc.usage == "final":
                out.append((t, self._chunk([], usage=self.usage_obj())))
        return out

    def _responses_output(self) -> tuple[ResponseOutput, dict[str, list[str]]]:
        """The scenario as a Responses output, and each text's pieces (one per chunk)."""
        sc = self.sc
        words = sc.tokens_per_chunk
        pieces: dict[str, list[str]] = {}
        reasoning = content = None
        if sc.reasoning_chunks:
            reasoning = "think " * words * sc.reasoning_chunks
            pieces[reasoning] = ["think " * words] * sc.reasoning_chunks
        if sc.content_chunks or sc.tool_call is None:
            content = "tok " * words * sc.content_chunks
            pieces.setdefault(content, ["tok " * words] * sc.content_chunks)
        calls: tuple[ResponseCall, ...] = ()
        if sc.tool_call is not None:
            args = "".join(sc.tool_call.argument_chunks)
            pieces.setdefault(args, list(sc.tool_call.argument_chunks))
            calls = (ResponseCall(sc.tool_call.id, sc.tool_call.name, args),)
        reason = sc.finish_reason or ("tool_calls" if calls else "stop")
        usage = self.usage_obj() if sc.usage != "none" else {}
        details = usage.get("prompt_tokens_details") or {}
        out = ResponseOutput(
            content=content,
            reasoning=reasoning,
            calls=calls,
            finish_reason=reason,
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            cached_tokens=details.get("cached_tokens"),
            reasoning_tokens=(usage.get("completion_tokens_details") or {}).get("reasoning_tokens"),
            total_tokens=usage.get("total_tokens"),
        )
        return out, pieces

    def _responses_events(self) -> list[tuple[float, bytes]]:
        sc = self.sc
        out, pieces = self._responses_output()
        groups, tail = stream_events(
            out,
            lambda text: pieces.get(text, [text] if text else []),
            response_id="resp_scenario",
            model=self.model,
            created=0,
        )
        gaps = (sc.itl_ms,) if isinstance(sc.itl_ms, (int, float)) else sc.itl_ms or (0.0,)
        t = sc.ttft_ms
        timed: list[tuple[float, bytes]] = []
        for j, data in enumerate(groups):
            if j:
                t += gaps[min(j - 1, len(gaps) - 1)]
            timed.append((t / 1000.0, data))
        if timed:
            timed[-1] = (timed[-1][0], timed[-1][1] + tail)
        else:
            timed.append((t / 1000.0, tail))
        merged: list[tuple[float, bytes]] = []
        for offset, data in timed:
            if merged and merged[-1][0] == offset:
                merged[-1] = (offset, merged[-1][1] + data)
            else:
                merged.append((offset, data))
        return merged

    def events(self, replay_lines: list[bytes] | None) -> list[tuple[float, bytes]]:
        """Framed events (offset_s, bytes) after truncation/error injection, coalesced by
        equal offset."""
        sc = self.sc
        if self.kind == "responses" and replay_lines is None:
            return self._responses_events()
        if replay_lines is not None:
            payloads = [(i * sc.replay_delay_ms, line) for i, line in enumerate(replay_lines)]
        else:
            payloads = self.payloads()
        end_t = payloads[-1][0] if payloads else 0.0
        done = sc.done
        if sc.error_after is not None:
            payloads = payloads[: sc.error_after]
            err: dict[str, Any] = {"error": {"message": "scenario stream error", "type": "server_error", "code": 500}}
            if self.kind == "messages":
                err = {"type": "error", "error": {"type": "api_error", "message": "scenario stream error"}}
            t = payloads[-1][0] if payloads else 0.0
            payloads.append((t, dumps(err)))
            end_t = t
        if sc.truncate_after is not None:
            payloads = payloads[: sc.truncate_after]
            done = False
            end_t = payloads[-1][0] if payloads else 0.0
        framed = [(t / 1000.0, self._frame(p)) for t, p in payloads]
        if done and self.kind != "messages":  # a Messages stream ends with its message_stop event
            framed.append((end_t / 1000.0, self._frame(b"[DONE]")))
        merged: list[tuple[float, bytes]] = []
        for t, data in framed:
            if merged and merged[-1][0] == t:
                merged[-1] = (t, merged[-1][1] + data)
            else:
                merged.append((t, data))
        return merged

    def whole(self) -> dict[str, Any]:
        """The non-streamed response body."""
        sc = self.sc
        words = sc.tokens_per_chunk
        content = "tok " * words * sc.content_chunks
        reason = sc.finish_reason or ("tool_calls" if self.kind == "chat" and sc.tool_call is not None else "stop")
        if self.kind == "responses":
            return response_object(
                self._responses_output()[0], response_id="resp_scenario", model=self.model, created=0
            )
        if self.kind == "messages":
            content_blocks: list[dict[str, Any]] = []
            if sc.reasoning_chunks:
                content_blocks.append(
                    {"type": "thinking", "thinking": "think " * words * sc.reasoning_chunks, "signature": "scenario"}
                )
            if content:
                content_blocks.append({"type": "text", "text": content})
            if sc.tool_call is not None:
                tc = sc.tool_call
                content_blocks.append(
                    {
                        "type": "tool_use",
                        "id": tc.id,
                        "name": tc.name,
                        "input": orjson.loads("".join(tc.argument_chunks)),
                    }
                )
            return self._message(content_blocks, self._messages_reason(), self._messages_tokens())
        if self.kind == "sglang":
            total = sc.completion_tokens if sc.completion_tokens is not None else sc.content_chunks * words
            return {"text": content, "meta_info": self._sglang_meta(total, {"type": reason})}
        if self.kind == "chat":
            msg: dict[str, Any] = {"role": "assistant", "content": content or None}
            if sc.reasoning_chunks:
                msg["reasoning_content"] = "think " * words * sc.reasoning_chunks
            if sc.tool_call is not None:
                tc = sc.tool_call
                msg["tool_calls"] = [
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.name, "arguments": "".join(tc.argument_chunks)},
                    }
                ]
            choice: dict[str, Any] = {"index": 0, "message": msg, "finish_reason": reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": content, "finish_reason": reason}
            obj = "text_completion"
        body: dict[str, Any] = {
            "id": "cmpl-scenario",
            "object": obj,
            "created": 0,
            "model": self.model,
            "choices": [choice],
        }
        if sc.usage != "none":
            body["usage"] = self.usage_obj()
        return body


class ScenarioServer:
    """The scenario server on 127.0.0.1 (see module docstring).

    `scenario` is the default (Scenario() when None); `scenarios` maps names, chosen by
    the `x-scenario` header or the request's model. `port=0` picks a free port.
    After `start()`: `url` (base, no trailing slash), `chat_url`, `completions_url`,
    `responses_url`, `generate_url`, `messages_url`.
    `n_requests` counts answered requests; `last_body` is the last request's JSON body.
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        scenarios: Mapping[str, Scenario] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.scenario = scenario or Scenario()
        self.scenarios = dict(scenarios or {})
        self.host = host
        self.port = port
        self.url = ""
        self.n_requests = 0
        self.last_body: Any = None
        self._runner: web.AppRunner | None = None
        self._replay_cache: dict[str, list[bytes]] = {}
        self._event_cache: dict[tuple[int, str, str], list[tuple[float, bytes]]] = {}

    @property
    def chat_url(self) -> str:
        return self.url + "/v1/chat/completions"

    @property
    def completions_url(self) -> str:
        return self.url + "/v1/completions"

    @property
    def responses_url(self) -> str:
        return self.url + "/v1/responses"

    @property
    def generate_url(self) -> str:
        return self.url + "/generate"

    @property
    def messages_url(self) -> str:
        return self.url + "/v1/messages"

    async def start(self) -> str:
        """Bind and serve; return the base URL."""
        app = web.Application()
        for path, kind in _ROUTES.items():
            app.router.add_post(path, partial(self._serve, kind=kind))
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        sock = socket.create_server((self.host, self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://{self.host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        """Stop serving and close connections (idempotent)."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> ScenarioServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers --------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        names = ["scenario", *self.scenarios]
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "scenario"} for n in names]
        return web.Response(body=dumps({"object": "list", "data": data}), content_type="application/json")

    def _pick(self, request: web.Request, body: dict[str, Any]) -> Scenario | None:
        name = request.headers.get("x-scenario")
        if name is not None:
            return self.scenarios.get(name)
        model = body.get("model")
        if isinstance(model, str) and model in self.scenarios:
            return self.scenarios[model]
        return self.scenario

    def _replay_lines(self, path: str) -> list[bytes]:
        lines = self._replay_cache.get(path)
        if lines is None:
            lines = [ln.strip() for ln in Path(path).read_bytes().splitlines() if ln.strip()]
            self._replay_cache[path] = lines
        return lines

    async def _serve(self, request: web.Request, kind: str) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        self.n_requests += 1
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "request body is not a JSON object")
        self.last_body = body
        sc = self._pick(request, body)
        if sc is None:
            return _error(400, f"unknown x-scenario {request.headers.get('x-scenario')!r}")
        model = name if isinstance(name := body.get("model"), str) else "scenario"
        tl = _Timeline(sc, kind, model)
        if sc.status >= 400 or not body.get("stream"):
            await _sleep_until(loop, t0 + sc.latency_ms / 1000.0)
            if sc.status >= 400:
                if isinstance(sc.error_body, str):
                    return web.Response(status=sc.status, text=sc.error_body)
                err = sc.error_body or {
                    "error": {"message": f"scenario status {sc.status}", "type": "server_error", "code": sc.status}
                }
                return web.Response(status=sc.status, body=dumps(err), content_type="application/json")
            return web.Response(status=sc.status, body=dumps(tl.whole()), content_type="application/json")
        key = (id(sc), kind, model)
        events = self._event_cache.get(key)
        if events is None:
            events = tl.events(self._replay_lines(sc.replay) if sc.replay else None)
            if len(self._event_cache) < 1024:
                self._event_cache[key] = events
        resp = web.StreamResponse(
            status=sc.status, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        for offset, data in events:
            await _sleep_until(loop, t0 + offset)
            await resp.write(data)
        if sc.truncate_after is not None and sc.truncate_mode == "abort":
            transport = request.transport
            if transport is not None:
                transport.abort()  # mid-body: the client sees an incomplete chunked body
            return resp
        await resp.write_eof()
        return resp


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    """Sleep until `deadline` on time.monotonic(). uvloop's loop.time() is a cached,
    ms-granular clock that runs behind the real one, and its timers count from it:
    the sleep adds that staleness so a paced event is never sent early."""
    delay = deadline - time.monotonic()
    if delay > 0:
        stale = time.monotonic() - loop.time()
        await asyncio.sleep(delay + (stale if stale > 0 else 0.0))


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.Response(status=status, body=dumps(body), content_type="application/json")


# -- command line ------------------------------------------------------------------------------


def _load_scenario(text: str, where: str) -> Scenario:
    """Parse a scenario from JSON text or `@path`; SystemExit with `where: field: problem`."""
    try:
        raw = Path(text[1:]).read_bytes() if text.startswith("@") else text.encode()
        return Scenario.model_validate_json(raw)
    except OSError as exc:
        raise SystemExit(f"{where}: cannot read {text[1:]!r} ({exc.strerror})") from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(scenario)"
        raise SystemExit(f"{where}: {loc}: {err['msg']} (got {err.get('input')!r})") from exc


def main(argv: list[str] | None = None) -> None:
    """CLI entry: serve until SIGINT/SIGTERM; the first stdout line is the base URL."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmaker.testing.scenario_server", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default)")
    ap.add_argument("--scenario", default="{}", help="default scenario: JSON or @file.json")
    ap.add_argument("--named", action="append", default=[], metavar="NAME=JSON", help="a named scenario (repeatable)")
    args = ap.parse_args(argv)
    default = _load_scenario(args.scenario, "--scenario")
    named: dict[str, Scenario] = {}
    for entry in args.named:
        name, sep, text = entry.partition("=")
        if not sep or not name:
            raise SystemExit(f"--named: expected NAME=JSON (got {entry!r})")
        named[name] = _load_scenario(text, f"--named {name}")
    try:
        import uvloop

        runner_factory: Any = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner_factory = None
    with asyncio.Runner(loop_factory=runner_factory) as runner:
        runner.run(_serve_forever(ScenarioServer(default, named, host=args.host, port=args.port)))


async def _serve_forever(server: ScenarioServer) -> None:
    await server.start()
    print(server.url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
