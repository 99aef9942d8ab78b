"""`benchmaker swebench`: a live coding agent (benchmaker.sweep.live) against a real
OpenAI-compatible model over task directories, in a local or Flash sandbox; every run
is written as trajectories in our schema (ready for `benchmaker swebench-replay
--trajectories`) and graded with the verifier.

    benchmaker swebench --url http://127.0.0.1:8000 --model m --task-dirs examples/tiny-task \\
        --concurrency 4 --attempts 2 --out-dir artifacts [--warehouse warehouse.duckdb]
    benchmaker swebench --url URL --model m --task-dirs tasks/* --sandbox flash \\
        --sandbox-url http://127.0.0.1:8080 --sandbox-image 'swe/{task_id}:latest' --sandbox-workdir /testbed

Writes `OUT_DIR/<run_id>/`: manifest.json (kind "swebench"), trajectories.jsonl,
episodes.jsonl, turns.jsonl, grades.jsonl, concurrency.json. Exit codes: 0 every
episode ended ok (resolved or not), 1 an episode failed (model or sandbox error),
2 bad input.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from rich.console import Console
from rich.table import Table

from benchmaker.engine.bundle import build_manifest, new_run_id, wall_ns, write_json_atomic
from benchmaker.engine.errors import ConfigError
from benchmaker.recipes.app import ON_BY_DEFAULT, app, within
from benchmaker.recipes.bench import resolve_api_key
from benchmaker.recipes.swebench_replay import check_sandbox_flag


def _factory(sandbox: str, url: str | None, image: str | None, workdir: str, api_key: str | None) -> Any:
    from benchmaker.agent.harness import local_sandbox_factory
    from benchmaker.agent.sandbox import FlashSandbox

    check_sandbox_flag(sandbox, "execute")
    if sandbox in ("local", "none"):
        return local_sandbox_factory(confined=sandbox == "local")
    if not url or not image:
        raise ConfigError("--sandbox-url, --sandbox-image: --sandbox flash needs both")

    async def make(task: Any) -> Any:
        return await FlashSandbox.create(
            url,
            image=image.format(task_id=task.task_id if task else ""),
            workdir=workdir,
            api_key=api_key,
            env=task.env if task else None,
        )

    return make


@app.command(name="swebench")
def swebench(
    *,
    url: str,
    model: str,
    task_dirs: list[Path],
    concurrency: int = 1,
    attempts: int = 1,
    max_turns: int = 50,
    sandbox: Literal["local", "none", "flash"] = "local",
    sandbox_url: str | None = None,
    sandbox_image: str | None = None,
    sandbox_workdir: str = "/testbed",
    sandbox_api_key_env: str | None = None,
    api_key_env: str | None = None,
    system_file: Path | None = None,
    temperature: Annotated[float | None, within(0, 100)] = None,
    stream: Annotated[bool, ON_BY_DEFAULT] = True,
    send_status_fields: bool = False,
    out_dir: Path = Path("artifacts"),
    run_id: str | None = None,
    label: str | None = None,
    warehouse: Path | None = None,
) -> int:
    """Run a live coding agent on task directories and record each run as a trajectory.

    Args:
        url: Base URL of the OpenAI-compatible model endpoint (http://host:port or .../v1).
        model: Model name sent in each request.
        task_dirs: Task directories (repository + task.json with task_id, test_command, optional prompt).
        concurrency: Episodes in flight.
        attempts: Episodes per task.
        max_turns: Model calls per episode at most.
        sandbox: local (temp copy of the task directory, commands confined by bubblewrap), none (the
            same, unconfined: warned) or flash (Flash Sandbox coordinator: warned).
        sandbox_url: Flash coordinator URL.
        sandbox_image: Flash image; {task_id} is substituted.
        sandbox_workdir: Repository path inside the Flash image.
        sandbox_api_key_env: Environment variable holding the Flash API key.
        api_key_env: Environment variable holding the model API key (never written to files).
        system_file: Text file with a system prompt.
        temperature: temperature sent with each request.
        stream: Stream responses (TTFT needs it).
        send_status_fields: Add `is_error` to tool messages (replay servers check it; real endpoints may reject it).
        out_dir: Folder for the run directory.
        run_id: Run id (default: `swebench-<UTC time>-<random>`).
        label: Run label stored in the manifest.
        warehouse: DuckDB file to load the run into.
    """
    from benchmaker.sweep.live import load_live_task, run_live
    from benchmaker.trajectories.errors import InputError

    if concurrency < 1 or attempts < 1 or max_turns < 1:
        raise ConfigError(
            f"--concurrency, --attempts, --max-turns: expected >= 1 (got {concurrency}, {attempts}, {max_turns})"
        )
    tasks = []
    for d in task_dirs:
        if not d.is_dir():
            raise ConfigError(f"--task-dirs: not a directory (got {str(d)!r})")
        try:
            tasks.append(load_live_task(d))
        except InputError as exc:
            raise ConfigError(str(exc)) from exc
    system = system_file.read_text(encoding="utf-8") if system_file is not None else None
    sb_key = os.environ.get(sandbox_api_key_env) if sandbox_api_key_env else None
    factory = _factory(sandbox, sandbox_url, sandbox_image, sandbox_workdir, sb_key)
    rid = run_id or new_run_id("swebench")
    run_dir = out_dir / rid
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "url": url,
        "model": model,
        "task_dirs": [str(d) for d in task_dirs],
        "concurrency": concurrency,
        "attempts": attempts,
        "max_turns": max_turns,
        "sandbox": sandbox,
        "sandbox_url": sandbox_url,
        "sandbox_image": sandbox_image,
        "temperature": temperature,
        "stream": stream,
    }
    extra_body = {"temperature": temperature} if temperature is not None else None
    api_key = resolve_api_key(None, api_key_env)

    async def main() -> Any:
        t0_wall = wall_ns()
        t0 = time.perf_counter_ns()
        manifest = build_manifest(
            run_id=rid, kind="swebench", label=label, config=config, seed=None, t0_wall_ns=t0_wall, workers=1, slo=None
        )
        write_json_atomic(run_dir / "manifest.json", manifest)
        return await run_live(
            tasks,
            url,
            model=model,
            sandbox_factory=factory,
            out_dir=run_dir,
            run_id=rid,
            concurrency=concurrency,
            attempts=attempts,
            api_key=api_key,
            system=system,
            max_turns=max_turns,
            stream=stream,
            send_status_fields=send_status_fields,
            extra_body=extra_body,
            t0_ns=t0,
        )

    run = asyncio.run(main())
    _print(run, rid)
    if warehouse is not None:
        from benchmaker.warehouse.loader import load_run

        load_run(warehouse, run_dir)
        Console().print(f"warehouse:    {warehouse}")
    return 0 if all(r.episode.outcome == "ok" for r in run.results) else 1


def _print(run: Any, run_id: str) -> None:
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 140)
    table = Table(title=f"swebench {run_id}")
    for col in ("episode", "outcome", "turns", "resolved", "model ms", "tool ms", "prompt tok", "output tok"):
        table.add_column(col, justify="left" if col == "episode" else "right", no_wrap=True)
    for r in sorted(run.results, key=lambda r: r.episode.episode_id):
        ep = r.episode
        table.add_row(
            ep.episode_id,
            ep.outcome,
            str(ep.n_turns),
            str(ep.resolved),
            f"{ep.model_time_ns / 1e6:.1f}",
            f"{ep.tool_time_ns / 1e6:.1f}",
            str(ep.prompt_tokens),
            str(ep.output_tokens),
            style=None if ep.outcome == "ok" else "red",
        )
    console.print(table)
    for r in run.results:
        if r.episode.error:
            console.print(f"[red]{r.episode.episode_id}: {r.episode.error}[/red]")
    console.print(f"resolved:     {run.resolved} of {len(run.results)}")
    console.print(f"trajectories: {run.files['trajectories']}  (benchmaker swebench-replay --trajectories ...)")
