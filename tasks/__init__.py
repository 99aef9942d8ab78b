"""Prefect tasks, one per stage of a pipeline (docs/architecture.md); thin shells over plain
functions in replay/, warehouse/ and benchmaker/.

    convert_logs        benchmaker.tasks.convert   logs -> trajectories.jsonl (cached on content)
    start_replay_server benchmaker.tasks.serve     replay server process (stop_replay_server in finally)
    run_sweep_point     benchmaker.tasks.sweep     one async task per sweep point
    grade               benchmaker.tasks.grade     grades.jsonl per point (cached on content)
    load_warehouse      benchmaker.tasks.load      the only warehouse writer
    publish_report      benchmaker.tasks.report    Prefect table/markdown/link artifacts
    run_shard_point     benchmaker.tasks.shard     one shard of a distributed llm-sweep point
    replay_shard        benchmaker.tasks.replay_shard  one shard of a distributed swebench-replay point
    run_distributed_point  benchmaker.tasks.distributed_point  one sharded point on the orchestrator
    run_shards          benchmaker.tasks.shard_runs  where a point's shards run (work pool or Dask)
"""

from benchmaker.tasks.convert import convert_logs
from benchmaker.tasks.grade import grade
from benchmaker.tasks.load import load_warehouse
from benchmaker.tasks.report import publish_report
from benchmaker.tasks.serve import start_replay_server, stop_replay_server
from benchmaker.tasks.sweep import run_sweep_point
from benchmaker.tasks.transient import is_transient, retry_on_transient

__all__ = [
    "convert_logs",
    "grade",
    "is_transient",
    "load_warehouse",
    "publish_report",
    "retry_on_transient",
    "run_sweep_point",
    "start_replay_server",
    "stop_replay_server",
]
