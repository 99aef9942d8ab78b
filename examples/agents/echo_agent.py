"""A minimal user-defined agent: each episode asks the model to echo a word and checks
the answer. Run it from YAML (examples/configs/agent.yaml):

    workload:
      type: agent
      class: examples.agents.echo_agent:EchoAgent
      url: http://127.0.0.1:8000          # OpenAI-compatible base URL
      model: m
      options: {word: banana, turns: 2}
    load: closed:4
    max_requests: 20                      # episodes

or from Python:

    AgentWorkload(EchoAgent, url=URL, model="m", options={"word": "banana"})

An episode is `turns` chat calls in one growing conversation; it returns
{"ok": <every answer contained the word>, "answers": [...]} (ok False becomes a
`graded_wrong` sample). `client` is a benchmaker.agent.model_client.ModelClient: `await
client.chat(messages)` returns a ChatResult (`.ok`, `.content`, `.message()`).
"""

from __future__ import annotations

from typing import Any


class EchoAgent:
    """Asks the model to repeat `word`, `turns` times per episode."""

    def __init__(self, word: str = "hello", turns: int = 1) -> None:
        self.word = word
        self.turns = turns

    async def run_episode(self, episode_index: int, client: Any) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": f"Episode {episode_index}: repeat the word {self.word!r}."}
        ]
        answers: list[str | None] = []
        for _ in range(self.turns):
            result = await client.chat(messages)
            if not result.ok:
                return {
                    "ok": False,
                    "error": f"model call failed: {result.outcome} {result.error or ''}",
                    "answers": answers,
                }
            answers.append(result.content)
            messages.append(result.message())
            messages.append({"role": "user", "content": "Again."})
        ok = all(self.word in (a or "") for a in answers)
        return {"ok": ok, "answers": answers, **({} if ok else {"error": f"{self.word!r} missing from an answer"})}
