"""`benchmaker serve-replay`: serve recorded trajectories as an OpenAI-compatible
endpoint (benchmaker.replay_server.server) in the foreground until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from benchmaker.recipes.app import app, within


@app.command(name="serve-replay")
def serve_replay(
    trajectories: Path,
    *,
    host: str = "127.0.0.1",
    port: Annotated[int, within(0, 65535)] = 0,
    latency: str = "instant",
    token: str | None = None,
    divergence: Literal["off", "status", "content"] = "off",
    tokenizer: Path | None = None,
) -> int:
    """Serve trajectories.jsonl as /v1/chat/completions, /v1/responses, /v1/messages and
    the Gemini API (/v1beta/models/M:generateContent, :streamGenerateContent); prints the bound URL first.

    Parameters
    ----------
    trajectories
        trajectories.jsonl written by `benchmaker convert`.
    host
        Interface to bind (default 127.0.0.1, loopback only).
    port
        TCP port; 0 picks a free ephemeral port (the URL line shows it).
    latency
        instant | fixed:TTFT_MS:ITL_MS | recorded (Turn.timing spread over the tokens).
    token
        Bearer token clients must send: the value of the environment variable of that
        name when set, else the string itself. Default: no auth.
    divergence
        off | status | content: how observations that differ from the recording are
        counted and answered: off serves them, status counts exit-status mismatches,
        content also answers a mismatch with 412 (docs/replay-an-agent.md).
    tokenizer
        A Hugging Face tokenizer.json for the token split of fixed/recorded latency
        (needs the `tokenizers` extra); default: a regex split.
    """
    from benchmaker.engine.errors import ConfigError
    from benchmaker.replay_server.latency import LatencySpecError, TokenizerUnavailable
    from benchmaker.replay_server.server import resolve_token, serve
    from benchmaker.trajectories.errors import ReplayError

    try:
        serve(
            trajectories,
            host=host,
            port=port,
            latency=latency,
            token=resolve_token(token),
            divergence=divergence,
            tokenizer=tokenizer,
        )
    except (ReplayError, LatencySpecError, TokenizerUnavailable) as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        raise ConfigError(f"serve-replay: {exc}") from exc
    return 0
