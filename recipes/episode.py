"""`benchmaker episode`: play one recorded episode against an OpenAI-compatible endpoint
(benchmaker.agent.harness.run_episode) and print its Episode record as JSON."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Literal

from benchmaker.engine.bundle import build_manifest, new_run_id, wall_ns, write_json_atomic
from benchmaker.recipes.app import app


@app.command(name="episode")
def episode(
    traj_file: Path,
    *,
    url: str,
    mode: Literal["recorded", "execute", "command"] = "recorded",
    trajectory_id: str | None = None,
    workdir: Path | None = None,
    command: str | None = None,
    api_key: str | None = None,
    out: Path | None = None,
    sandbox: Literal["local", "none"] = "local",
) -> int:
    """Play one episode of a trajectory and print its episode record (JSON).

    Exit code 0 when the episode ended ok, 1 otherwise, 2 on bad input.

    Parameters
    ----------
    traj_file
        A trajectories.jsonl (from `benchmaker convert`) or a raw agent log (converted on the fly).
    url
        Base URL of the endpoint (e.g. the replay server's, http://127.0.0.1:PORT).
    mode
        recorded: feed recorded observations; execute: run tool calls in a local sandbox;
        command: run --command as the agent.
    trajectory_id
        Which trajectory of the file (default: the first).
    workdir
        Task directory copied into the local sandbox; its task.json (task_id,
        test_command) drives the verifier. Required for execute and command.
    command
        Agent command line for command mode ({prompt_file}, {workdir}, {base_url},
        {python} are substituted; OPENAI_BASE_URL/OPENAI_API_KEY are set).
    api_key
        Bearer token sent to the endpoint.
    out
        Directory to write a run bundle into: manifest.json, episodes.jsonl, turns.jsonl
        and samples.jsonl (one engine Sample per model call).
    sandbox
        local (commands confined by bubblewrap, docs/execute-mode-sandbox.md) or none
        (unconfined: warned).
    """
    import orjson

    from benchmaker.agent.harness import local_sandbox_factory, run_episode
    from benchmaker.agent.verifier import TASK_FILE, TaskSpec, load_task, task_id_of
    from benchmaker.engine.config import check_http_url
    from benchmaker.engine.errors import ConfigError
    from benchmaker.engine.records import Sample
    from benchmaker.trajectories.convert import iter_trajectories, read_trajectories
    from benchmaker.trajectories.errors import InputError, TrajectoryFormatError

    check_http_url(url, "--url")
    try:
        try:
            trajs = list(read_trajectories(traj_file))
        except TrajectoryFormatError:
            trajs = list(iter_trajectories(traj_file))
    except InputError as exc:
        raise ConfigError(str(exc)) from exc
    if trajectory_id is not None:
        trajs = [t for t in trajs if t.trajectory_id == trajectory_id]
        if not trajs:
            raise ConfigError(f"{traj_file}: trajectory-id: no trajectory with that id (got {trajectory_id!r})")
    if not trajs:
        raise ConfigError(f"{traj_file}: no trajectory in the file")
    traj = trajs[0]
    if mode in ("execute", "command") and workdir is None:
        raise ConfigError(f"--workdir: mode {mode} needs a task directory")
    if mode == "command" and not command:
        raise ConfigError("--command: mode command needs the agent command line")
    task = None
    if workdir is not None:
        from benchmaker.recipes.swebench_replay import check_sandbox_flag

        check_sandbox_flag(sandbox, mode)
        if not workdir.is_dir():
            raise ConfigError(f"--workdir: not a directory (got {str(workdir)!r})")
        try:
            task = (
                load_task(workdir)
                if (workdir / TASK_FILE).exists()
                else TaskSpec(task_id_of(traj) or traj.trajectory_id, repo=workdir)
            )
        except InputError as exc:
            raise ConfigError(str(exc)) from exc
    run_id = new_run_id("episode")
    t0_wall = wall_ns()
    samples: list[Sample] = []  # each model call, as the engine records a request

    def keep(s: Sample) -> None:
        s.seq = len(samples)
        samples.append(s)

    res = asyncio.run(
        run_episode(
            traj,
            url,
            mode=mode,
            sandbox=local_sandbox_factory(confined=sandbox == "local") if workdir is not None else None,
            task=task,
            api_key=api_key,
            command=shlex.split(command) if command else None,
            run_id=run_id,
            sample_sink=keep,
        )
    )
    record = res.episode.to_dict()
    if out is not None:  # a run bundle the warehouse loader accepts
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(
            out / "manifest.json",
            build_manifest(
                run_id=run_id,
                kind="episode",
                label=None,
                seed=None,
                t0_wall_ns=t0_wall,
                config={
                    "trajectories": str(traj_file),
                    "trajectory_id": traj.trajectory_id,
                    "url": url,
                    "mode": mode,
                    "workdir": str(workdir) if workdir else None,
                },
            ),
        )
        (out / "episodes.jsonl").write_text(json.dumps(record) + "\n")
        (out / "turns.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in res.turns))
        (out / "samples.jsonl").write_bytes(
            b"".join(orjson.dumps(x, option=orjson.OPT_APPEND_NEWLINE) for x in samples)
        )
    print(json.dumps(record, indent=1))
    for d in res.divergence_details:
        print(f"divergence: {d}")
    return 0 if res.episode.outcome == "ok" else 1
