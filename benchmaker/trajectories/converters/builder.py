"""Building a `Trajectory`: `TrajectoryBuilder` turns a stream of user prompts,
assistant responses, tool results and context edits into one; `CONVERTER_VERSION`
versions the output."""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmaker.trajectories.converters.source_file import FileContext
from benchmaker.trajectories.trajectory import (
    ContextEdit,
    MessageRef,
    Observation,
    RecordedOutcome,
    Response,
    Source,
    Timing,
    Trajectory,
    Turn,
    Usage,
    match_key_for_messages,
)

CONVERTER_VERSION = 13
"""Bump when any converter's output changes for the same input (part of cache keys).
Converters build every model with pydantic's validating constructors."""


class TrajectoryBuilder:
    """Accumulates one conversation in order and builds the `Trajectory`.

    `user(text)` before the first turn sets `first_user`, later ones before the first
    turn go to `user_before_turns`; after a turn it is appended to that turn's
    `user_after`. `observation()` attaches to the last turn
    (`orphan_observation` when there is none). `skip(reason)` counts what was dropped.
    `edit(ContextEdit)` attaches a context edit to the next turn; `next_ref(role)` is
    the MessageRef the next message of that role will get (`benchmaker.trajectories.context`).
    """

    def __init__(self, ctx: FileContext, fmt: str):
        self.ctx = ctx
        self.fmt = fmt
        self.system: str | None = None
        self.first_user: str | None = None
        self.first_user_parts: list[dict[str, Any]] | None = None
        self.user_before_turns: list[str] = []
        self.model: str | None = None
        self.turns: list[Turn] = []
        self.skipped: Counter[str] = Counter()
        self.pending_edit: ContextEdit | None = None
        self.exit_status: str | None = None  # from a mini-swe-agent 2.x `exit` message
        self.submission: str | None = None
        self.tools: list[dict[str, Any]] | None = None  # the log's tool definitions (chat_shape_tools)

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] += n

    def set_system(self, text: str) -> None:
        if self.system is None and self.first_user is None and not self.turns:
            self.system = text
        else:
            self.skip("later_system_message")

    def user(self, text: str, parts: list[dict[str, Any]] | None = None) -> None:
        """A user message: its text and, when it held an image, its content parts
        (`result_content`), kept for the first user message (`first_user_parts`); a later
        message's images are counted (`image_part`)."""
        if self.first_user is None and not self.turns:
            self.first_user = text
            self.first_user_parts = parts
            return
        if parts is not None:
            self.skip("image_part", sum(1 for p in parts if p["type"] == "image_url"))
        if self.turns:
            self.turns[-1].user_after.append(text)
        else:
            self.user_before_turns.append(text)

    def turn(
        self,
        response: Response,
        usage: Usage | None = None,
        timing: Timing | None = None,
        model: str | None = None,
        error: str | None = None,
    ) -> Turn:
        """Append a turn (model: the name that answered it; error: the recorded error
        message of a failed call) carrying the pending context edit, if any."""
        model = model or None
        turn = Turn(
            index=len(self.turns),
            model=model,
            response=response,
            usage=usage,
            timing=timing,
            context_edit=self.pending_edit,
            error=error,
        )
        self.pending_edit = None
        self.turns.append(turn)
        if model:
            self.model = model
        return turn

    def edit(self, edit: ContextEdit) -> None:
        """Attach `edit` to the next turn (a later edit before that turn replaces it)."""
        self.pending_edit = edit

    def next_ref(self, role: str) -> MessageRef:
        """The MessageRef the next message of `role` ("assistant" or another) gets."""
        if role == "assistant":  # ints >= 0 by construction: no validation needed
            return MessageRef(turn=len(self.turns), item=0)
        if not self.turns:
            return MessageRef(turn=None, item=0 if self.first_user is None else 1 + len(self.user_before_turns))
        last = self.turns[-1]
        return MessageRef(turn=last.index, item=1 + len(last.observations) + len(last.user_after))

    def observation(self, obs: Observation) -> None:
        if not self.turns:
            self.skip("orphan_observation")
            return
        self.turns[-1].observations.append(obs)

    def has_observation(self, tool_call_id: str) -> bool:
        """True when the last turn has an observation for `tool_call_id`."""
        if self.turns:
            for o in self.turns[-1].observations:  # a loop, not any(): no generator per tool result
                if o.tool_call_id == tool_call_id:
                    return True
        return False

    def build(
        self, index: int, *, line: int | None = None, task_id: str | None = None, outcome: RecordedOutcome | None = None
    ) -> Trajectory:
        """The Trajectory (index = position of this trajectory within its file).
        Raises ConvertError when there is no user message or no assistant turn."""
        if self.first_user is None:
            raise self.ctx.error(line, None, "no user message before the first assistant turn")
        if not self.turns:
            raise self.ctx.error(line, None, "no assistant turn")
        sha = self.ctx.sha256
        return Trajectory(
            trajectory_id=f"{sha[:16]}-{index}",
            source=Source(
                format=self.fmt, path=self.ctx.path, sha256=sha, line=line, converter_version=CONVERTER_VERSION
            ),
            task_id=task_id,
            match_key=match_key_for_messages([self.first_user, *self.user_before_turns]),
            model=self.model,
            system=self.system,
            first_user=self.first_user,
            first_user_parts=self.first_user_parts,
            user_before_turns=list(self.user_before_turns),
            terminated_by=self.turns[-1].response.finish_reason,
            outcome=outcome or RecordedOutcome(),
            tools=self.tools,
            turns=list(self.turns),
            skipped=dict(sorted(self.skipped.items())),
        )
