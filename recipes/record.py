"""`benchmaker record`: a recording proxy in front of an OpenAI-compatible endpoint
(benchmaker.replay_server.recorder); every conversation relayed becomes a trajectory, replayable with
`benchmaker serve-replay` / `swebench-replay`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from benchmaker.engine.config import check_output_file
from benchmaker.recipes.app import app, within


@app.command(name="record")
def record(
    *,
    upstream: str,
    output: Annotated[Path, Parameter(name=["--output", "-o"])] = Path("trajectories.jsonl"),
    host: str = "127.0.0.1",
    port: Annotated[int, within(0, 65535)] = 0,
    text_actions: bool = False,
    canned_replies: bool = False,
    connect_timeout: str = "10s",
    idle_timeout: str = "600s",
    total_timeout: str | None = None,
) -> int:
    """Relay /v1/chat/completions, /v1/responses, /v1/messages (and the Gemini API's
    /v1beta/models/M:generateContent and :streamGenerateContent) to UPSTREAM and record
    each conversation as a trajectory; prints its URL first,
    `http://127.0.0.1:PORT/<secret>`. Point the agent's base URL at URL/v1 (an Anthropic
    or Gemini client at URL: ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL).
    The file is written on Ctrl-C and on `POST URL/flush`, atomically.

    The proxy's own authentication is the secret path segment in URL, made fresh for
    each run and never written to a file or log: the printed URL line is the one place
    it appears (keep it to yourself; another local user with it could write into the
    recording; give it to the agent in its config or environment rather than on its
    command line, which other users can read). A request without it gets 401 and is
    neither relayed nor recorded.
    The agent's own Authorization / x-api-key / x-goog-api-key go upstream unchanged.

    Parameters
    ----------
    upstream
        Base URL of the real endpoint, e.g. http://127.0.0.1:8000 (with or without /v1),
        without credentials: a `user:password@` or `?query` is refused (the proxy would
        send it with every local caller's request); each caller sends its own
        Authorization, which is forwarded and never recorded.
    output
        trajectories.jsonl to write (replaced on each write).
    host
        Interface to bind (default 127.0.0.1, loopback only).
    port
        TCP port; 0 picks a free ephemeral port (the URL line shows it).
    text_actions
        Record the first user message after a turn without tool calls as its
        observation (SWE-agent / mini-swe-agent text actions).
    canned_replies
        The agent writes exchanges of its own into every request (aider: its example
        conversation, the files in the chat, "Ok."): an assistant message that is no
        relayed answer is such a canned reply, left out with the user message before it
        when placing a request, and kept in the trajectory's `canned_replies` for the
        replay server to leave out too.
    connect_timeout
        Deadline for connecting to UPSTREAM (TCP and TLS), e.g. 10s; past it the
        caller gets a 502 JSON error.
    idle_timeout
        Longest wait for UPSTREAM's next bytes, e.g. 10m: from the send (so the wait for
        the response's head too), then from each read; the time spent relaying a read
        to the caller does not count. Past it before the head: a 502 JSON error; after
        it: the relayed body is cut (the turn is not recorded, counted `incomplete`).
    total_timeout
        Deadline from the send until the response's body ended, e.g. 30m (default:
        none); past it, as for --idle-timeout.
    """
    from urllib.parse import urlsplit

    from benchmaker.engine.bundle import redact_url
    from benchmaker.engine.errors import ConfigError
    from benchmaker.engine.load_models import parse_duration_s
    from benchmaker.replay_server.recorder import serve_recorder

    if not upstream.startswith(("http://", "https://")):
        raise ConfigError(f"--upstream: expected an http(s) URL (got {redact_url(upstream)!r})")
    parts = urlsplit(upstream)
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise ConfigError(
            f"--upstream: expected a base URL without user:password@, ?query or #fragment (got "
            f"{redact_url(upstream)!r}): the proxy would send them with every local caller's request; "
            f"each caller sends its own Authorization, which is forwarded"
        )
    deadlines = {}
    for name, value in (("connect", connect_timeout), ("idle", idle_timeout), ("total", total_timeout)):
        flag = f"--{name}-timeout"
        seconds = None if value is None else parse_duration_s(value, flag)
        if seconds == 0:
            raise ConfigError(f"{flag}: expected a duration above 0 (got {value!r})")
        deadlines[f"{name}_timeout_s"] = seconds
    try:
        check_output_file(output, "--output")
        serve_recorder(
            upstream,
            output,
            host=host,
            port=port,
            text_actions=text_actions,
            canned_replies=canned_replies,
            **deadlines,
        )
    except OSError as exc:
        raise ConfigError(f"record: {exc}") from exc
    return 0
