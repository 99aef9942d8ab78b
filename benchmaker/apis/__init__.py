"""The wire APIs, one module each (OpenAI chat, OpenAI Responses, Anthropic Messages,
Gemini, SGLang `/generate`), each the single place that knows its API: the request
headers, what counts as generated output and a token event, usage, finish reasons and
outcomes (generated.py holds the rules every API shares). The engine's workloads, the
replay model client and the recorder read streams through these modules.
It imports only benchmaker.engine.
"""

from benchmaker.lazy_exports import lazy_getattr

_EXPORTS = {
    "AnthropicMessagesParser": "benchmaker.apis.anthropic_messages",
    "anthropic_headers": "benchmaker.apis.anthropic_messages",
    "GeminiAssembler": "benchmaker.apis.gemini",
    "OpenAIChatParser": "benchmaker.apis.openai_chat",
    "OpenAIResponsesParser": "benchmaker.apis.openai_responses",
    "OpenAIStreamParser": "benchmaker.apis.openai_chat",
    "SGLangParser": "benchmaker.apis.sglang",
    "openai_headers": "benchmaker.apis.openai_chat",
    "finish_class": "benchmaker.apis.generated",
    "message_output": "benchmaker.apis.generated",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
