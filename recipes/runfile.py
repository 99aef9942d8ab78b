"""The YAML run file of `benchmaker run CONFIG.yaml`: engine settings plus workloads.

    load: poisson:20            # engine settings: every field of BenchConfig
    duration_s: 30s
    slo: {ttft_ms: 500}
    workload: {type: openai-chat, url: ..., model: m, dataset: {type: synthetic}}

or mixed lanes on one endpoint and one clock:

    duration_s: 120s
    mix:
      lanes:
        - {name: chat, rate: "stages:2,8,2,8@30s", workload: {type: openai-chat, ...}}
        - {name: rag,  rate: "stages:8,2,8,2@30s", workload: {type: openai-chat, ...}}

Monitors sampled during the run (benchmaker/engine/monitors.py; rows in monitor.jsonl) and a
request trace for replay (benchmaker/engine/trace.py; replay with `load: trace:FILE[:SPEEDUP]`
and `workload: {type: trace-replay, path: FILE}`):

    monitors:
      - {type: prometheus, url: "http://127.0.0.1:8000/metrics", interval_s: 1s, metrics: ["vllm:*"]}
      - {type: python, function: "mypkg.probes:gpu_memory", interval_s: 5s}
    record_trace: trace.jsonl

What the run needs to succeed, said at the top of the file and by `benchmaker run` before
the run and again after a run that is not valid (an endpoint, a key, a model that can
answer the dataset):

    needs: a real model that answers arithmetic, its chat endpoint in URL

Answer grading (workloads/graders.py) next to `workload:`, or on a lane:

    grader: {type: choice, choices: ABCDE}
    mix: {lanes: [{name: qa, rate: "poisson:2", workload: {...}, grader: {type: numeric, abs_tol: 0.01}}]}
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from benchmaker.engine.config import BenchConfig, RateSpec, SafeName
from benchmaker.engine.config_file import load_yaml, validate
from benchmaker.engine.load_models import Burst, ClosedLoop, load_model_of
from benchmaker.engine.monitors import MonitorSpec
from benchmaker.engine.runner import Lane
from benchmaker.workloads.graders import GraderSpec, GradingHook, build_grader
from benchmaker.workloads.registry import TrajectoryReplaySpec, WorkloadSpec, build_workload


class LaneSpec(BaseModel):
    """One lane: a name, a rate spec and a workload."""

    model_config = ConfigDict(extra="forbid")
    name: SafeName
    rate: RateSpec
    workload: WorkloadSpec
    max_requests: int | None = Field(default=None, ge=1)
    grader: GraderSpec | None = None


class Mix(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lanes: list[LaneSpec] = Field(min_length=1)


class RunFile(BenchConfig):
    """A run file: BenchConfig plus either `workload` (one lane) or `mix.lanes`, and
    `needs`: what the run needs to succeed, in words (printed by `benchmaker run`)."""

    needs: str | None = None
    workload: WorkloadSpec | None = None
    mix: Mix | None = None
    monitors: list[MonitorSpec] = Field(default_factory=list)
    record_trace: Path | None = None
    grader: GraderSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> RunFile:
        if (self.workload is None) == (self.mix is None):
            raise ValueError("give exactly one of `workload` or `mix`")
        if self.grader is not None and self.mix is not None:
            raise ValueError("`grader` goes with `workload`; with `mix`, put it on each lane")
        pairs = (
            [(self.load, self.workload)]
            if self.workload is not None
            else [(lane.rate, lane.workload) for lane in (self.mix.lanes if self.mix is not None else [])]
        )
        conc = []
        for lane in self.mix.lanes if self.mix is not None else []:
            if lane.rate.split(":", 1)[0].strip().lower() == "trace":
                continue  # its file is read when the run starts
            model = load_model_of(lane.rate)
            if isinstance(model, ClosedLoop):
                conc.append(model.concurrency)
            elif isinstance(model, Burst) and lane.max_requests is None and self.max_requests is None:
                raise ValueError(
                    f"lane {lane.name}: an infinite rate ({lane.rate}: every request at t=0) "
                    "needs max_requests (the lane's or the run's)"
                )
        self.check_in_flight(conc)
        for load, wl in pairs:
            # multi-turn sessions advance per closed-loop worker: one worker per session slot
            if isinstance(wl, TrajectoryReplaySpec) and load.replace(" ", "") != f"closed:{wl.concurrency}":
                raise ValueError(
                    f"a trajectory-replay workload runs on closed:{wl.concurrency} (its concurrency; got load {load!r})"
                )
        return self

    def lanes(self, base_dir: Path | None) -> list[Lane]:
        """Lane objects with built workloads (datasets read now)."""
        if self.mix is None:
            return [Lane("default", build_workload(self.workload, base_dir))]
        return [
            Lane(spec.name, build_workload(spec.workload, base_dir), spec.rate, spec.max_requests)
            for spec in self.mix.lanes
        ]

    def post_hooks(self, base_dir: Path | None) -> list[GradingHook]:
        """Grading hooks, one per graded lane (each acts on its lane only), [] when no lane
        is graded. Raises ConfigError on a bad grader (pattern, schema, file)."""
        if self.mix is None:
            specs = {"default": self.grader}
        else:
            specs = {lane.name: lane.grader for lane in self.mix.lanes}
        return [
            GradingHook({name: build_grader(spec, base_dir)}, reference_key=spec.reference_key)
            for name, spec in specs.items()
            if spec is not None
        ]


def read_run_file(path: Path) -> RunFile:
    """Read and validate a run file; errors name `path:line: field` (ConfigError)."""
    data, lines = load_yaml(path)
    return validate(RunFile, data, path, lines)


def lanes_from_run_file(path: Path) -> list[Lane]:
    """Lanes of a run file, read anew (a picklable lanes factory for worker processes)."""
    return read_run_file(path).lanes(path.parent)
