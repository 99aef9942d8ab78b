"""The Gemini API (`generateContent`, `streamGenerateContent`): request contents as chat
messages, and a recorded answer written back as GenerateContentResponse objects. The one
place that knows this API's shapes; the replay server and the Gemini CLI converter use it.

Source of the shapes: the Gemini API reference (ai.google.dev/api/generate-content) as
the @google/genai SDK types spell them (`Content`, `Part`, `FunctionCall`,
`FunctionResponse`, `GenerateContentResponse`, `UsageMetadata`, `FinishReason`), and
what Gemini CLI sends (google-gemini/gemini-cli packages/core/src/core/geminiChat.ts).

Paths: `POST /v1beta/models/{model}:generateContent` (one JSON body) and
`POST /v1beta/models/{model}:streamGenerateContent` (with `?alt=sse`: SSE `data:` events,
one GenerateContentResponse each; without it a JSON array of them), also under `/v1/`.

Request -> chat messages (`request_messages`), so that a Gemini request has the same
replay key as the chat completions request of the same conversation:
- `systemInstruction` (a Content, or a string) -> {"role": "system", "content": its text}
- a `contents[i]` of role "user" (or no role): each `functionResponse` part -> {"role":
  "tool", "tool_call_id", "name" (when given), "content": `function_response_text`}; its `text` parts
  (and `inlineData` as an `image_url` data-URL part) -> one {"role": "user"} message
  after them (content: the text when it is one text part, else the list of parts)
- a `contents[i]` of role "model" -> {"role": "assistant", "content": the non-thought text
  parts joined, "reasoning_content": the thought texts joined (when any), "tool_calls":
  one per `functionCall` part ({"id", "type": "function", "function": {"name",
  "arguments": JSON of args}})}.
Ids are read without the "<name>__" prefix Gemini CLI puts on every call id
(`client_call_id`), so they compare as the server sent them. The API leaves `id` out
(Gemini CLI makes its own when it is missing): a functionCall
without one gets "call_<content index>_<part index>"; a functionResponse without one
takes the id of the first unanswered functionCall with its name and an `id` in the
model content before it, else its tool_call_id is None (the replay server's divergence
check pairs such messages in order).

Response (`response_json`): {"candidates": [{"content": {"role": "model", "parts": [thought
part {"text", "thought": true} when reasoning was recorded, text part when the content
is non-empty, one {"functionCall": {"id", "name", "args"}} per tool call]},
"finishReason", "index": 0}], "usageMetadata", "modelVersion", "responseId"}. A stream
(`stream_events`) sends one such object per token event (a thought piece, a text piece,
a whole function call: the API never splits a call), then one with an empty text part,
`finishReason` and `usageMetadata`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import orjson

from benchmaker.apis.generated import token_count
from benchmaker.apis.openai_chat import chat_assistant, tool_items
from benchmaker.apis.recorded import RecordedAnswer, RenderedStream
from benchmaker.engine.sse import SSEParser

__all__ = [
    "FINISH_REASONS",
    "GEMINI_METHODS",
    "GeminiAssembler",
    "TRAJECTORY_FINISH",
    "chat_tools",
    "client_call_id",
    "error_body",
    "estimate_tokens",
    "finish_reason",
    "function_response_text",
    "model_listing",
    "parse_path",
    "render_body",
    "render_stream",
    "request_messages",
    "response_json",
    "response_parts",
    "sse_event",
    "usage_metadata",
    "wants_json_answer",
    "wants_sse",
]

GEMINI_METHODS = ("generateContent", "streamGenerateContent")
"""The model methods the replay server answers."""

FINISH_REASONS = {
    "stop": "STOP",
    "tool_calls": "STOP",  # the API ends a function-calling answer with STOP
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
    "error": "OTHER",
    "aborted": "OTHER",
}
"""A trajectory's finish reason -> the Gemini `FinishReason` written back."""

TRAJECTORY_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "OTHER": "error",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
}
"""A Gemini `FinishReason` read back -> the trajectory's finish reason ("STOP" with
function calls is "tool_calls"; another value: "error")."""

_PATH = re.compile(r"^/(v1beta|v1|v1alpha)/models/([^/:]+):([A-Za-z]+)$")

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
    409: "ABORTED",
    412: "FAILED_PRECONDITION",
    500: "INTERNAL",
}


def parse_path(path: str) -> tuple[str, str] | None:
    """(model, method) of a Gemini model-method path, e.g.
    "/v1beta/models/gemini-2.5-pro:streamGenerateContent" -> ("gemini-2.5-pro",
    "streamGenerateContent"); None for any other path."""
    m = _PATH.match(path)
    return (m.group(2), m.group(3)) if m else None


def wants_sse(query_string: bytes | str) -> bool:
    """True when the query asks for SSE framing (`alt=sse`)."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    return parse_qs(query_string).get("alt", [""])[-1] == "sse"


def function_response_text(response: Any) -> tuple[str, bool]:
    """(text, is_error) of a FunctionResponse's `response` object as an observation: the
    string of its one key "output" (Gemini CLI's success shape) or "error" (its failure
    shape, is_error True); else the object as compact JSON (keys in their order); a
    string as is; None gives ""."""
    if response is None:
        return "", False
    if isinstance(response, str):
        return response, False
    if isinstance(response, dict) and len(response) == 1:
        ((key, value),) = response.items()
        if key in ("output", "error") and isinstance(value, str):
            return value, key == "error"
    return orjson.dumps(response).decode("utf-8"), isinstance(response, dict) and "error" in response


def client_call_id(call_id: str, name: str) -> str:
    """A function call id as the server sent it: without the "<name>__" prefix Gemini CLI
    adds to every call id it is given (packages/core/src/core/turn.ts
    handlePendingFunctionCall), so "write_file__call_1" of tool write_file is "call_1"."""
    prefix = f"{name}__"
    return call_id[len(prefix) :] if name and call_id.startswith(prefix) and len(call_id) > len(prefix) else call_id


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, dict):
        raise ValueError(f"{where}: must be a Content object or a string (got {type(content).__name__})")
    parts = content.get("parts") or []
    if not isinstance(parts, list):
        raise ValueError(f"{where}.parts: must be a list (got {type(parts).__name__})")
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def chat_tools(req: Any) -> list[dict[str, Any]] | None:
    """The function declarations of a generateContent request body (`req`, parsed JSON)
    in chat completions shape, in order: each `tools[i].functionDeclarations[j]`
    (`function_declarations` also read) `{"name", "description", "parameters" or
    "parametersJsonSchema"}` becomes `{"type": "function", "function": {"name",
    "description" (when given), "parameters"}}` (Gemini API `Tool`,
    `FunctionDeclaration`); built-in tools (googleSearch, codeExecution) are left out.
    None when no declaration is found."""
    out = []
    for tool in tool_items(req):
        decls = tool.get("functionDeclarations") or tool.get("function_declarations")
        for decl in decls if isinstance(decls, list) else ():
            if not isinstance(decl, dict) or not isinstance(decl.get("name"), str):
                continue
            fn: dict[str, Any] = {"name": decl["name"]}
            if "description" in decl:
                fn["description"] = decl["description"]
            params = decl.get("parametersJsonSchema", decl.get("parameters"))
            if params is not None:
                fn["parameters"] = params
            out.append({"type": "function", "function": fn})
    return out or None


def request_messages(req: Any) -> list[dict[str, Any]]:
    """The chat messages of a GenerateContentRequest body (rules in the module doc).
    Raises ValueError naming the field (e.g. "contents[2].parts: must be a list (got
    str)") when the body is not an object, `contents` is missing or not a list, or a
    content or part is malformed."""
    if not isinstance(req, dict):
        raise ValueError(f"request body must be a JSON object (got {type(req).__name__})")
    contents = req.get("contents")
    if contents is None:
        raise ValueError("contents: missing (a list of Content objects is required)")
    if isinstance(contents, dict):  # a single Content
        contents = [contents]
    if not isinstance(contents, list):
        raise ValueError(f"contents: must be a list (got {type(contents).__name__})")
    messages: list[dict[str, Any]] = []
    system = req.get("systemInstruction", req.get("system_instruction"))
    if system is not None:
        messages.append({"role": "system", "content": _text_of(system, "systemInstruction")})
    pending: dict[str, list[str]] = {}  # function name -> ids of the last model content's calls, in order
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        if not isinstance(content, dict):
            raise ValueError(f"{where}: must be an object (got {type(content).__name__})")
        parts = content.get("parts") or []
        if not isinstance(parts, list):
            raise ValueError(f"{where}.parts: must be a list (got {type(parts).__name__})")
        for j, part in enumerate(parts):
            if not isinstance(part, dict):
                raise ValueError(f"{where}.parts[{j}]: must be an object (got {type(part).__name__})")
        if content.get("role") == "model":
            messages.append(_assistant(parts, i, pending))
        else:
            messages.extend(_user(parts, pending))
    return messages


def _assistant(parts: list[dict[str, Any]], i: int, pending: dict[str, list[str]]) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[tuple[Any, Any, str]] = []
    pending.clear()
    for j, part in enumerate(parts):
        call = part.get("functionCall")
        if isinstance(call, dict):
            name = call.get("name")
            if not isinstance(name, str):
                name = ""
            if isinstance(call.get("id"), str):
                call_id = client_call_id(call["id"], name)
                pending.setdefault(name, []).append(call_id)
            else:
                call_id = f"call_{i}_{j}"
            args = call.get("args")
            calls.append((call_id, name, orjson.dumps(args if args is not None else {}).decode("utf-8")))
        elif isinstance(part.get("text"), str):
            (thoughts if part.get("thought") is True else texts).append(part["text"])
    content = "".join(texts) if texts or not calls else None
    return chat_assistant(content, "".join(thoughts) if thoughts else None, calls)


def _user(parts: list[dict[str, Any]], pending: dict[str, list[str]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    user_parts: list[dict[str, Any]] = []
    for part in parts:
        resp = part.get("functionResponse")
        if isinstance(resp, dict):
            name = resp.get("name")
            if not isinstance(name, str):
                name = ""
            ids = pending.get(name)
            call_id = client_call_id(resp["id"], name) if isinstance(resp.get("id"), str) else (ids[0] if ids else None)
            if ids and call_id in ids:
                ids.remove(call_id)
            text, is_error = function_response_text(resp.get("response"))
            msg: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": text}
            if name:
                msg["name"] = name
            if is_error:
                msg["is_error"] = True
            out.append(msg)
        elif isinstance(part.get("text"), str) and part.get("thought") is not True:
            user_parts.append({"type": "text", "text": part["text"]})
        elif isinstance(part.get("inlineData"), dict):
            data = part["inlineData"]
            url = f"data:{data.get('mimeType', 'application/octet-stream')};base64,{data.get('data', '')}"
            user_parts.append({"type": "image_url", "image_url": {"url": url}})
    if user_parts:
        single = len(user_parts) == 1 and user_parts[0]["type"] == "text"
        out.append({"role": "user", "content": user_parts[0]["text"] if single else user_parts})
    return out


def estimate_tokens(req: Any) -> int:
    """The `totalTokens` of a countTokens request, estimated: ceil(characters / 4) over the
    text parts (and the JSON of other parts) of `contents` (or
    `generateContentRequest.contents`) and `systemInstruction` (the rule of thumb Gemini
    CLI's own estimator uses for text). 0 for a body without contents."""
    if not isinstance(req, dict):
        return 0
    inner = req.get("generateContentRequest")
    body = inner if isinstance(inner, dict) else req
    contents = body.get("contents")
    items = list(contents) if isinstance(contents, list) else [contents] if contents is not None else []
    if body.get("systemInstruction") is not None:
        items.append(body["systemInstruction"])
    chars = 0
    for item in items:
        parts = item.get("parts") if isinstance(item, dict) else [item]
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, str):
                chars += len(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                chars += len(part["text"])
            else:
                chars += len(orjson.dumps(part))
    return -(-chars // 4)


def finish_reason(reason: str | None) -> str:
    """The Gemini FinishReason of a trajectory finish reason (FINISH_REASONS; "STOP" for
    None or another value)."""
    return FINISH_REASONS.get(reason or "stop", "STOP")


def usage_metadata(
    prompt_tokens: int | None,
    completion_tokens: int | None,
    cached_tokens: int | None,
    reasoning_tokens: int | None,
    total_tokens: int | None,
) -> dict[str, int] | None:
    """The UsageMetadata of recorded usage (tokens), None when nothing was recorded.
    promptTokenCount = prompt_tokens; thoughtsTokenCount = reasoning_tokens;
    candidatesTokenCount = completion_tokens - reasoning_tokens (the API counts thoughts
    apart from candidates; the chat completions `completion_tokens` counts them in);
    cachedContentTokenCount = cached_tokens; totalTokenCount = total_tokens, else
    prompt + completion when both are known. Unknown fields are left out."""
    out: dict[str, int] = {}
    if prompt_tokens is not None:
        out["promptTokenCount"] = prompt_tokens
    if completion_tokens is not None:
        out["candidatesTokenCount"] = max(completion_tokens - (reasoning_tokens or 0), 0)
    if reasoning_tokens is not None:
        out["thoughtsTokenCount"] = reasoning_tokens
    if cached_tokens is not None:
        out["cachedContentTokenCount"] = cached_tokens
    if total_tokens is not None:
        out["totalTokenCount"] = total_tokens
    elif prompt_tokens is not None and completion_tokens is not None:
        out["totalTokenCount"] = prompt_tokens + completion_tokens
    return out or None


def _call_part(call_id: str, name: str, args: Any) -> dict[str, Any]:
    return {"functionCall": {"id": call_id, "name": name, "args": args if isinstance(args, dict) else {}}}


def response_parts(
    content: str | None, reasoning: str | None, tool_calls: list[tuple[str, str, Any]]
) -> list[dict[str, Any]]:
    """The candidate's parts of a recorded answer (module doc): `tool_calls` as (id, name,
    args object) triples."""
    parts: list[dict[str, Any]] = []
    if reasoning:
        parts.append({"text": reasoning, "thought": True})
    if content:
        parts.append({"text": content})
    parts.extend(_call_part(*call) for call in tool_calls)
    return parts


def response_json(
    parts: list[dict[str, Any]], finish: str | None, usage: dict[str, int] | None, model: str, response_id: str
) -> dict[str, Any]:
    """One GenerateContentResponse object: `parts` of candidate 0 (an empty list gives one
    empty text part: a Content needs a part), `finish` its finishReason (None: left out,
    a chunk before the last), `usage` its usageMetadata (None: left out)."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts or [{"text": ""}]}}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    out: dict[str, Any] = {"candidates": [candidate]}
    if usage is not None:
        out["usageMetadata"] = usage
    out["modelVersion"] = model
    out["responseId"] = response_id
    return out


def sse_event(obj: dict[str, Any]) -> bytes:
    """One SSE event of a stream: `data: <JSON>` and a blank line, CRLF-delimited as the
    API sends them (the SDKs split on CRLF, CR and LF)."""
    return b"data: " + orjson.dumps(obj) + b"\r\n\r\n"


def _recorded_answer(answer: RecordedAnswer) -> tuple[list[tuple[str, str, Any]], str, dict[str, int] | None]:
    """(calls as (id, name, args) triples, finishReason, usageMetadata) of a recorded
    answer; a call whose arguments did not parse is re-read from its raw string ({}
    when that is not JSON either)."""
    resp = answer.response
    calls = []
    for tc in resp.tool_calls:
        args: Any = tc.arguments
        if args is None:
            try:
                args = orjson.loads(tc.arguments_raw)
            except orjson.JSONDecodeError:
                args = {}
        calls.append((tc.id, tc.name, args))
    u = answer.usage
    usage = (
        None
        if u is None
        else usage_metadata(u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.reasoning_tokens, u.total_tokens)
    )
    return calls, finish_reason(resp.finish_reason), usage


def render_body(answer: RecordedAnswer, *, completion_id: str, model: str, created: int) -> bytes:
    """A recorded answer as one GenerateContentResponse (`response_json`), its responseId
    the chat completion id; `created` is not part of this API's shapes."""
    resp = answer.response
    calls, finish, usage = _recorded_answer(answer)
    parts = response_parts(resp.content, resp.reasoning, calls)
    return orjson.dumps(response_json(parts, finish, usage, model, completion_id))


def render_stream(
    answer: RecordedAnswer,
    *,
    completion_id: str,
    model: str,
    created: int,
    splitter: Callable[[str], list[str]],
) -> RenderedStream:
    """A recorded answer as streamGenerateContent SSE events: one GenerateContentResponse
    per token event (a thought piece, a text piece, a whole function call), then the
    final one with an empty text part, finishReason and usageMetadata (the tail)."""
    resp = answer.response
    calls, finish, usage = _recorded_answer(answer)
    events = [
        sse_event(response_json([{"text": piece, "thought": True}], None, None, model, completion_id))
        for piece in splitter(resp.reasoning or "")
    ]
    events += [
        sse_event(response_json([{"text": piece}], None, None, model, completion_id))
        for piece in splitter(resp.content or "")
    ]
    events += [
        sse_event(response_json(response_parts(None, None, [call]), None, None, model, completion_id)) for call in calls
    ]
    tail = sse_event(response_json([{"text": ""}], finish, usage, model, completion_id))
    return RenderedStream(head=b"", events=events, tail=tail)


def wants_json_answer(req: dict[str, Any]) -> bool:
    """True when a request asks for a JSON answer (`generationConfig.responseMimeType`
    "application/json", or a `responseSchema` / `responseJsonSchema`): Gemini CLI's
    router and other utility calls, which its session log never holds."""
    config = req.get("generationConfig")
    if not isinstance(config, dict):
        return False
    return (
        config.get("responseMimeType") == "application/json"
        or "responseSchema" in config
        or "responseJsonSchema" in config
    )


def model_listing(names: list[str]) -> dict[str, Any]:
    """The `GET /v1beta/models` body: {"models": [{"name": "models/<name>", "baseModelId",
    "displayName", "supportedGenerationMethods": GEMINI_METHODS}]}."""
    return {
        "models": [
            {
                "name": f"models/{n}",
                "baseModelId": n,
                "version": "replay",
                "displayName": n,
                "supportedGenerationMethods": list(GEMINI_METHODS),
            }
            for n in names
        ]
    }


def error_body(status: int, message: str) -> bytes:
    """A Google API error body: {"error": {"code": status, "message", "status": the RPC
    status name (INVALID_ARGUMENT, UNAUTHENTICATED, NOT_FOUND, ABORTED,
    FAILED_PRECONDITION, else INTERNAL)}}."""
    return orjson.dumps({"error": {"code": status, "message": message, "status": _STATUS.get(status, "INTERNAL")}})


class GeminiAssembler:
    """Reassembles one Gemini answer from its response body bytes (the recorder's and any
    client's view of a turn).

        asm = GeminiAssembler(sse=True)
        asm.feed(data, now_ns)      # per chunk of body bytes; True once complete
        asm.finish()                # at end of body; True when complete

    SSE (`alt=sse`): each `data:` event is one GenerateContentResponse; its candidate 0
    parts are concatenated (non-empty text parts into `content`, `thought: true` text
    into `reasoning`; None when there was none), each `functionCall` appended to `calls` as (id or None, name, args));
    `finish_reason` and `usage` (the last `usageMetadata`, as sent) come from the events
    that carry them. Complete at the first event with a `finishReason` (the API's last
    event carries it) or, at finish(), when any event arrived. A JSON body (one response,
    or an array of them from `streamGenerateContent` without `alt=sse`) is complete when
    it parses. `first_token_ns`: the stamp of the first event with a non-empty text or a
    function call. `error` says why a body was not recordable (not JSON, an `error`
    object, no candidates)."""

    def __init__(self, *, sse: bool) -> None:
        self.complete = False
        self.error: str | None = None
        self.first_token_ns: int | None = None
        self.content: str | None = None
        self.reasoning: str | None = None
        self.calls: list[tuple[str | None, str, dict[str, Any]]] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model_version: str | None = None
        self._sse = SSEParser() if sse else None
        self._body: list[bytes] = []
        self._events = 0

    def feed(self, data: bytes, now_ns: int) -> bool:
        """Take one chunk of body bytes that arrived at `now_ns`; returns `complete`."""
        if self.complete or self.error:
            return self.complete
        if self._sse is None:
            self._body.append(data)
            return False
        for _event, payload in self._sse.feed(data):
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError as exc:
                self.error = f"event data is not JSON: {exc}"
                return False
            self._response(obj, now_ns)
            if self.error or self.complete:
                break
        return self.complete

    def finish(self) -> bool:
        """End of body: parse a JSON body, or close a stream that sent events; returns
        `complete`."""
        if self.complete or self.error:
            return self.complete
        if self._sse is not None:
            if self._events:
                self.complete = True
            else:
                self.error = "stream ended before any response event"
            return self.complete
        try:
            obj = orjson.loads(b"".join(self._body))
        except orjson.JSONDecodeError as exc:
            self.error = f"response body is not JSON: {exc}"
            return False
        for item in obj if isinstance(obj, list) else [obj]:
            self._response(item, None)
            if self.error:
                return False
        self.complete = True
        return True

    def _response(self, obj: Any, now_ns: int | None) -> None:
        if not isinstance(obj, dict):
            self.error = "response is not a JSON object"
            return
        if obj.get("error") is not None:
            self.error = "error object in the response"
            return
        self._events += 1
        if isinstance(obj.get("usageMetadata"), dict):
            self.usage = obj["usageMetadata"]
        if isinstance(obj.get("modelVersion"), str):
            self.model_version = obj["modelVersion"]
        candidates = obj.get("candidates")
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            return
        cand = candidates[0]
        content = cand.get("content")
        if not isinstance(content, dict):
            content = {}
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            call = part.get("functionCall")
            if isinstance(call, dict):
                args = call.get("args")
                call_id = call.get("id")
                name = call.get("name")
                self.calls.append(
                    (
                        call_id if isinstance(call_id, str) else None,
                        name if isinstance(name, str) else "",
                        args if isinstance(args, dict) else {},
                    )
                )
                self._token(now_ns)
            elif isinstance(part.get("text"), str) and part["text"]:  # an empty part (a final event's) adds nothing
                if part.get("thought") is True:
                    self.reasoning = (self.reasoning or "") + part["text"]
                else:
                    self.content = (self.content or "") + part["text"]
                self._token(now_ns)
        if isinstance(cand.get("finishReason"), str):
            self.finish_reason = cand["finishReason"]
            if self._sse is not None:
                self.complete = True

    def _token(self, now_ns: int | None) -> None:
        if self.first_token_ns is None and now_ns is not None:
            self.first_token_ns = now_ns

    def trajectory_finish(self) -> str:
        """The trajectory finish reason of the answer (TRAJECTORY_FINISH; "tool_calls"
        for STOP with function calls; "stop" when none was sent)."""
        if self.finish_reason in (None, "STOP"):
            return "tool_calls" if self.calls else "stop"
        return TRAJECTORY_FINISH.get(self.finish_reason, "error")

    def usage_counts(self) -> tuple[int | None, int | None, int | None, int | None, int | None] | None:
        """(prompt, completion, cached, reasoning, total) tokens of the usageMetadata
        (completion = candidates + thoughts, the inverse of `usage_metadata`); None when
        none was sent."""
        u = self.usage
        if u is None:
            return None
        cand, thoughts = token_count(u.get("candidatesTokenCount")), token_count(u.get("thoughtsTokenCount"))
        completion = None if cand is None and thoughts is None else (cand or 0) + (thoughts or 0)
        prompt, cached, total = (
            token_count(u.get(k)) for k in ("promptTokenCount", "cachedContentTokenCount", "totalTokenCount")
        )
        return prompt, completion, cached, thoughts, total
