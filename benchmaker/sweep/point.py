"""The spec of one sweep point, agent replay or engine: what is measured, under which limits.

    point = ReplayPoint(load="closed:8", episodes=16, latency="fixed:50:0")
    point.name, point.concurrency, point.checks()      # "c8", 8, {} (limits left unset)
    row = await run_point(trajs, base_url, run_dir, point, run_id="r1")
    point = LlmPoint(base_url="http://127.0.0.1:8000", model="m", load="closed:8", duration_s=30)
    point.name, point.checks()                         # "closed-8", {}

A run's points are built once, at the edge where its parameters are validated (the
flows' parameters models: `SwebenchReplayParams.points`, `LlmSweepParams.points`),
and passed unchanged to the sweep task and a distributed point's shards
(benchmaker.sweep.shard.ReplayShardPoint and benchmaker.tasks.shard.ShardPoint hold
one). The rules that join several fields (episodes or duration, a command for command
mode, a flash sandbox's URL and image, engine workers only in recorded mode, no two
points of one name) are the parameters model's; the code below it trusts the point.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmaker.agent.harness import STRAY_GRACE_S
from benchmaker.engine.config import LagLimitMs
from benchmaker.engine.load_models import ClosedLoop, ParsedRateSpec, load_model_of
from benchmaker.sweep.sweep import engine_point_name, point_name

__all__ = ["LagLimits", "LlmPoint", "Mode", "ReplayPoint", "replay_point_name"]

Mode = Literal["recorded", "execute", "command"]


def replay_point_name(load: str) -> str:
    """The sweep_point label of the point whose episodes start at the engine rate spec
    `load`: "c<C>" for a closed loop of C episodes without think time, else the spec
    made a label ("poisson:0.5" -> "poisson-0.5", benchmaker.sweep.sweep.engine_point_name).
    A ParsedRateSpec's model is read, not parsed again. Raises
    benchmaker.engine.errors.RateSpecError for a bad plain string."""
    model = load_model_of(load)
    if isinstance(model, ClosedLoop) and not model.think_s:
        return point_name(model.concurrency)
    return engine_point_name(load)


class LagLimits(BaseModel):
    """The engine verdict's lag limits of a point, in ms (None: the environment's
    BENCHMAKER_MAX_LOOP_LAG_MS / BENCHMAKER_MAX_SCHEDULE_LAG_MS, else 10 ms;
    benchmaker.engine.config.SelfCheckLimits): the base of the point specs.

    max_loop_lag_ms       the client's event-loop lag p99 a valid point stays under
    max_schedule_lag_ms   the schedule lag p99 a valid open-loop point stays under
    """

    max_loop_lag_ms: LagLimitMs | None = None
    max_schedule_lag_ms: LagLimitMs | None = None

    def checks(self) -> dict[str, float]:
        """The engine's self-check limits these set (benchmaker.engine.config.
        SelfCheckLimits fields, ms): {"max_loop_lag_p99_ms": ..., "max_schedule_lag_p99_ms":
        ...}, those left None out (the engine's defaults then)."""
        return {
            k: v
            for k, v in (
                ("max_loop_lag_p99_ms", self.max_loop_lag_ms),
                ("max_schedule_lag_p99_ms", self.max_schedule_lag_ms),
            )
            if v is not None
        }


class ReplayPoint(LagLimits):
    """One agent-replay sweep point (frozen; JSON-able: a Prefect task input and, inside
    a ReplayShardPoint, a flow-run parameter):

    load                  engine rate spec of episode starts: `closed:C` (C episodes in
                          flight, a concurrency point) or open loop (`poisson:R`,
                          `constant:R`, `trace:FILE`; R episodes/s); parsed once
    episodes              episodes of the point (None: benchmaker.sweep.sweep.episode_plan's
                          default, max(C, trajectories); open loop: one per trajectory);
                          with `duration_s`, at most this many
    duration_s            keep starting episodes for this many s (None: a fixed plan)
    mode                  recorded | execute | command (benchmaker.agent.harness)
    sandbox, sandbox_url, sandbox_image
                          where execute/command mode runs tools (local, none, flash)
    task_dirs             absolute task directories (task.json) for the verifier
    command               the external agent's argv (command mode)
    stray_grace_s         command mode: s a diverged agent (one whose request the replay
                          server refused) may take to exit before its process group is
                          killed (benchmaker.agent.harness.run_episode); finite, > 0
    latency, divergence   the replay server's latency model and divergence policy
    max_loop_lag_ms, max_schedule_lag_ms
                          the engine verdict's lag limits in ms (LagLimits)
    workers               engine worker processes of the point (recorded mode)
    shards                load hosts the point is split over (1: on this host;
                          benchmaker.sweep.shard)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    load: ParsedRateSpec
    episodes: Annotated[int, Field(ge=1)] | None = None
    duration_s: Annotated[float, Field(gt=0)] | None = None
    mode: Mode = "recorded"
    sandbox: Literal["local", "none", "flash"] = "local"
    sandbox_url: str | None = None
    sandbox_image: str | None = None
    task_dirs: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    stray_grace_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = STRAY_GRACE_S
    latency: str = "instant"
    divergence: Literal["off", "status", "content"] = "off"
    workers: Annotated[int, Field(ge=1)] = 1
    shards: Annotated[int, Field(ge=1)] = 1

    @property
    def name(self) -> str:
        """The point's sweep_point label (replay_point_name of `load`): "c8", "poisson-0.5"."""
        return replay_point_name(self.load)

    @property
    def concurrency(self) -> int | None:
        """Episodes in flight of a closed-loop point, None for an open-loop one."""
        model = self.load.model
        return model.concurrency if isinstance(model, ClosedLoop) else None

    def with_load(self, load: str) -> ReplayPoint:
        """This point with another `load` (a shard's share: `closed:<its slots>`)."""
        return self.model_copy(update={"load": ParsedRateSpec.of(load)})


class LlmPoint(LagLimits):
    """One llm-sweep point: an engine run against an OpenAI-compatible endpoint (frozen;
    JSON-able: a Prefect task input and, inside a benchmaker.tasks.shard.ShardPoint, a
    flow-run parameter):

    base_url, model       the endpoint (with or without /v1) and the model name it serves
    api                   chat (/v1/chat/completions), responses (/v1/responses) or
                          messages (Anthropic /v1/messages, max_tokens required)
    load                  engine rate spec of request starts (`closed:C`, `poisson:R`,
                          `constant:R`, `trace:FILE`; R requests/s); parsed once
    duration_s            s of sending (None: until max_requests)
    max_requests          requests of the point (None: until duration_s)
    prompt_words          the synthetic prompt's size in words
    max_tokens            the answer's cap in tokens (None: the server's)
    ignore_eos            send "ignore_eos": true (vLLM, SGLang: every answer max_tokens long)
    api_key_env           name of the environment variable holding the API key (the key
                          itself is never a parameter)
    max_loop_lag_ms, max_schedule_lag_ms
                          the engine verdict's lag limits in ms (LagLimits)
    shards                load hosts the point is split over (1: on this host;
                          benchmaker.tasks.shard)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    model: str
    api: Literal["chat", "responses", "messages"] = "chat"
    load: ParsedRateSpec
    duration_s: Annotated[float, Field(gt=0)] | None = None
    max_requests: Annotated[int, Field(ge=1)] | None = None
    prompt_words: Annotated[int, Field(ge=1)] = 128
    max_tokens: Annotated[int, Field(ge=1)] | None = 128
    ignore_eos: bool = False
    api_key_env: str | None = None
    shards: Annotated[int, Field(ge=1)] = 1

    @property
    def name(self) -> str:
        """The point's sweep_point label (benchmaker.sweep.sweep.engine_point_name of
        `load`): "closed-8", "poisson-2.5"."""
        return engine_point_name(self.load)
