"""A scripted model for a real agent: an OpenAI-compatible chat completions
server that plays a fixed list of `bash` tool calls, one per turn, so mini-swe-agent (or
any agent with a `bash` tool) solves a known task with no real model.

    python conformance/scripted_model.py --script conformance/mswea_script.json --port 0
    # first stdout line: the bound base URL, e.g. http://127.0.0.1:41873 (serves until
    # SIGINT/SIGTERM)

    async with ScriptedModel(load_script(path)) as model:
        model.url                          # http://127.0.0.1:PORT (append /v1 for clients)

Endpoints: `POST /v1/chat/completions` (and `/chat/completions`), the Gemini API's
`POST /v1beta/models/{model}:streamGenerateContent`, `:generateContent` and
`:countTokens` (also under `/v1/`), `GET /v1/models`, `GET /health`, `GET /stats`
({"requests", "served", "errors", "side"}).

Turn rule (stateless, as the replay server's): the turn index of a request is its number
of messages with role "assistant" (in text mode, `--text`: of those whose content is one
of the script's thoughts, compared without surrounding whitespace, so an agent's own canned assistant messages, e.g. aider's
example exchanges, do not count); the response is script step `turn`:
`{"thought": TEXT, "command": CMD}` becomes an assistant message with content TEXT and
one tool call `bash` whose `arguments` is `json.dumps({"command": CMD})`, finish_reason
"tool_calls"; `{"thought": TEXT, "command": null}` is a final answer: content TEXT, no
tool call, finish_reason "stop" (agents such as pi end their run on it). In text mode every step
is such a plain answer (its `command` must be null) and a request needs no `bash` tool
(aider: edits come back as SEARCH/REPLACE text). Streamed (`stream: true`) or one JSON body, as the request asks; usage is
always given: prompt_tokens = UTF-8 bytes of the request's message contents // 4 (a
stand-in count, stated as such), completion_tokens = UTF-8 bytes of thought + arguments
// 4, at least 1.

Gemini (the shapes of ai.google.dev/api/generate-content, as Gemini CLI sends and reads
them): the turn index is the number of `contents` of role "model"; a step with a command
becomes a model content with a text part (the thought) and one `functionCall`
{"name": "run_shell_command", "args": {"command": CMD}} (Gemini CLI's shell tool; the
request must declare it), finishReason "STOP", usageMetadata with promptTokenCount and
candidatesTokenCount (the stand-in counts above). `:streamGenerateContent?alt=sse` sends
it as two SSE events (the parts, then an empty text part with finishReason and usage),
without `alt=sse` as a JSON array of them; `:generateContent` as one object. Gemini
CLI's utility calls, which are no turn of its session (a `generateContent` asking for
JSON: its router and next-speaker checks; `countTokens`), are answered and counted in
/stats "side": the JSON call with the smallest value its schema accepts
(benchmaker.replay_server.side.schema_answer), countTokens with {"totalTokens": the
stand-in prompt count}.

Errors (OpenAI error body): 400 when the body is not a JSON object with a `messages`
list, or when the request offers no tool named `bash` outside text mode (the script could not be
played);
409 `beyond_script` when the turn index is past the script. Each counts in /stats errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from benchmaker.replay_server.side import schema_answer

__all__ = ["ScriptStep", "ScriptedModel", "load_script", "main"]

ScriptStep = dict[str, str | None]  # {"thought": str, "command": str | None (a final answer)}


def load_script(path: Path) -> list[ScriptStep]:
    """Read a script file: a JSON list of {"thought": str, "command": str | null}. Raises
    ValueError `path: [i].field: problem (got VALUE)` on a bad file (text mode's own rule,
    every command null, is ScriptedModel's)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, list) or not doc:
        raise ValueError(f"{path}: expected a non-empty JSON list of steps (got {type(doc).__name__})")
    for i, step in enumerate(doc):
        for field, may_be_null in (("thought", False), ("command", True)):
            value = step.get(field) if isinstance(step, dict) else step
            if not isinstance(step, dict) or not (isinstance(value, str) or (may_be_null and value is None)):
                kind = "a string or null" if may_be_null else "a string"
                raise ValueError(f"{path}: [{i}].{field}: expected {kind} (got {value!r})")
    return doc


def _n_tokens(text: str) -> int:
    return max(1, len(text.encode("utf-8")) // 4)


def _error(status: int, code: str, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    return web.json_response(body, status=status)


class ScriptedModel:
    """The server (module docstring). `url` is set inside `async with` (127.0.0.1, an
    ephemeral port unless `port` is given); `stats` counts requests, served turns and
    errors. `text`: text mode (module docstring); raises ValueError when a step of a text
    script has a command."""

    def __init__(self, script: list[ScriptStep], *, model: str = "scripted", port: int = 0, text: bool = False) -> None:
        if text and any(step["command"] is not None for step in script):
            raise ValueError("a text-mode script answers in text only: every step's command must be null")
        self.script = script
        self.text = text
        self._thoughts = frozenset((step["thought"] or "").strip() for step in script)
        self.model = model
        self.port = port
        self.url = ""
        self.stats = {"requests": 0, "served": 0, "errors": 0, "side": 0}
        self._runner: web.AppRunner | None = None

    def _message(self, turn: int) -> tuple[dict[str, Any], int]:
        step = self.script[turn]
        thought = step["thought"] or ""
        if step["command"] is None:  # a final answer
            return {"role": "assistant", "content": thought}, _n_tokens(thought)
        args = json.dumps({"command": step["command"]})
        msg = {
            "role": "assistant",
            "content": thought,
            "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": args}}],
        }
        return msg, _n_tokens(thought + args)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.stats["requests"] += 1
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self.stats["errors"] += 1
            return _error(400, "bad_request", "expected a JSON object with a messages list")
        tools = [t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        if "bash" not in tools and not self.text:
            self.stats["errors"] += 1
            return _error(400, "no_bash_tool", f"the request offers no `bash` tool (tools: {tools})")
        messages = [m for m in body["messages"] if isinstance(m, dict)]
        turn = sum(
            1
            for m in messages
            if m.get("role") == "assistant"
            and (not self.text or (isinstance(m.get("content"), str) and m["content"].strip() in self._thoughts))
        )
        if turn >= len(self.script):
            self.stats["errors"] += 1
            return _error(409, "beyond_script", f"turn {turn} is past the script's {len(self.script)} steps")
        msg, completion = self._message(turn)
        prompt = _n_tokens("".join(m["content"] for m in messages if isinstance(m.get("content"), str)))
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        rid, created = f"chatcmpl-scripted-{turn}", int(time.time())
        self.stats["served"] += 1
        finish = "tool_calls" if "tool_calls" in msg else "stop"
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": self.model,
                    "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.model}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}, {"content": msg["content"]}]
        for call in msg.get("tool_calls", ()):
            deltas += [
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": "bash", "arguments": ""},
                        }
                    ]
                },
                {"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"]}}]},
            ]
        chunks = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        opts = body.get("stream_options")
        if isinstance(opts, dict) and opts.get("include_usage"):
            chunks.append({**head, "choices": [], "usage": usage})
        for c in chunks:
            await resp.write(b"data: " + json.dumps(c).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        """A Gemini API call (module docstring)."""
        self.stats["requests"] += 1
        model, _, method = request.match_info["call"].partition(":")
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("contents", []), list):
            self.stats["errors"] += 1
            return _error(400, "bad_request", "expected a JSON object with a contents list")
        contents = [c for c in body.get("contents", []) if isinstance(c, dict)]
        prompt = _n_tokens(json.dumps(contents))
        if method == "countTokens":
            self.stats["side"] += 1
            return web.json_response({"totalTokens": prompt})
        config = body.get("generationConfig") if isinstance(body.get("generationConfig"), dict) else {}
        if method == "generateContent" and (
            config.get("responseMimeType") == "application/json"
            or "responseSchema" in config
            or "responseJsonSchema" in config
        ):
            self.stats["side"] += 1
            schema = config.get("responseJsonSchema", config.get("responseSchema"))
            return web.json_response(
                self._gemini_answer([{"text": json.dumps(schema_answer(schema))}], prompt, 1, model)
            )
        declared = [
            d.get("name")
            for t in body.get("tools") or []
            if isinstance(t, dict)
            for d in t.get("functionDeclarations") or []
            if isinstance(d, dict)
        ]
        if "run_shell_command" not in declared:
            self.stats["errors"] += 1
            return _error(400, "no_shell_tool", f"the request declares no `run_shell_command` (tools: {declared})")
        turn = sum(1 for c in contents if c.get("role") == "model")
        if turn >= len(self.script):
            self.stats["errors"] += 1
            return _error(409, "beyond_script", f"turn {turn} is past the script's {len(self.script)} steps")
        step = self.script[turn]
        parts: list[dict[str, Any]] = [{"text": step["thought"] or ""}]
        if step["command"] is not None:
            parts.append({"functionCall": {"name": "run_shell_command", "args": {"command": step["command"]}}})
        completion = _n_tokens(json.dumps(parts))
        self.stats["served"] += 1
        if method != "streamGenerateContent":
            return web.json_response(self._gemini_answer(parts, prompt, completion, model))
        events = [
            {"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}], "modelVersion": model},
            self._gemini_answer([{"text": ""}], prompt, completion, model),
        ]
        if request.query.get("alt") != "sse":
            return web.json_response(events)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for e in events:
            await resp.write(b"data: " + json.dumps(e).encode() + b"\r\n\r\n")
        await resp.write_eof()
        return resp

    @staticmethod
    def _gemini_answer(parts: list[dict[str, Any]], prompt: int, completion: int, model: str) -> dict[str, Any]:
        usage = {"promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion}
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage,
            "modelVersion": model,
        }

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "steps": len(self.script)})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats)

    async def __aenter__(self) -> ScriptedModel:
        app = web.Application()
        for path in ("/v1/chat/completions", "/chat/completions"):
            app.router.add_post(path, self._chat)
        for path in ("/v1beta/models/{call}", "/v1/models/{call}"):
            app.router.add_post(path, self._gemini)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/stats", self._stats)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = socket.create_server(("127.0.0.1", self.port))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def _serve(script: list[ScriptStep], model: str, port: int, text: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with ScriptedModel(script, model=model, port=port, text=text) as server:
        print(server.url, flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    """Command line: serve a script file until SIGINT/SIGTERM (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--script", type=Path, required=True)
    ap.add_argument("--model", default="scripted")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--text", action="store_true", help="text mode: plain answers, no bash tool needed")
    args = ap.parse_args(argv)
    try:
        script = load_script(args.script)
        ScriptedModel(script, text=args.text)  # checks a text script
    except (OSError, ValueError) as exc:
        print(f"scripted_model: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_serve(script, args.model, args.port, args.text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
