"""Side traffic: the requests agents send outside their session logs, which no recording
holds, recognised and answered so that the agent goes on (each answer counted by kind in
the replay server's `/stats` under "side_requests", never as a miss).

Kinds:
- "title": a chat request without `tools` whose system text starts with "You are a
  title generator" (opencode's title prompt, packages/opencode/src/session/prompt/
  title.txt), unless the trajectory its task key matches is itself a recorded title
  call (its system text a title prompt: then it is replayed); answered with the text
  TITLE_TEXT. opencode's title request repeats the user's task, so its key is usually
  that of the session it titles.
- "json_answer" (whether or not a trajectory has its key: these calls repeat the
  user's prompt): a non-streamed Gemini `generateContent` request asking for JSON
  (`generationConfig.responseMimeType` "application/json" or a response schema): Gemini
  CLI's router (packages/core/src/routing/strategies/classifierStrategy.ts) and its
  other utility calls through BaseLlmClient.generateJson; answered with
  `schema_answer(schema)` as JSON text.
- "count_tokens": a Gemini `:countTokens` request (Gemini CLI's context manager
  calibrates its estimates with it); answered {"totalTokens": an estimate}.
- "head_probe": any `HEAD` request (Claude Code's `HEAD /api/hello`); answered 200 with
  no body.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TITLE_TEXT", "is_title_request", "schema_answer"]

TITLE_TEXT = "Replayed session"
"""The answer to a title request."""

_TITLE_PROMPTS = ("You are a title generator",)


def is_title_request(system_text: str | None, has_tools: bool) -> bool:
    """True for a chat title request: no tools and a system text starting with one of the
    known title prompts (module doc)."""
    return not has_tools and system_text is not None and system_text.lstrip().startswith(_TITLE_PROMPTS)


def schema_answer(schema: Any) -> Any:
    """The smallest value a JSON schema (OpenAPI `Schema` as the Gemini API takes it, type
    names in any case, or JSON Schema) accepts, deterministically: an object with each
    `required` property (all properties when none is required) set to its own answer;
    the first `enum` value; "" for a string; for a number or integer its `minimum`, else
    1 (Gemini CLI's numerical router checks a 1-100 score its schema only describes);
    False for a boolean, [] for an array; None for a missing or unknown schema. Gemini
    CLI's routers thus get {"reasoning": "", "model_choice": "flash"} and
    {"complexity_reasoning": "", "complexity_score": 1}."""
    if not isinstance(schema, dict):
        return None
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if isinstance(kind, list):  # JSON Schema type unions: the first non-null
        kind = next((k for k in kind if k != "null"), None)
    kind = kind.lower() if isinstance(kind, str) else ("object" if "properties" in schema else None)
    if kind == "object":
        props = schema.get("properties")
        if not isinstance(props, dict):
            props = {}
        required = schema.get("required")
        names = [n for n in required if n in props] if isinstance(required, list) and required else list(props)
        return {name: schema_answer(props[name]) for name in names}
    if kind in ("number", "integer"):
        minimum = schema.get("minimum")
        return minimum if isinstance(minimum, int | float) and not isinstance(minimum, bool) else 1
    return {"string": "", "boolean": False, "array": []}.get(kind or "")
