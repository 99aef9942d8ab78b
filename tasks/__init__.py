"""Prefect tasks, one per stage of a pipeline (DESIGN §2, §7); thin shells over plain
functions in replay/, warehouse/ and benchmaker/.

    convert_logs        tasks.convert   logs -> trajectories.jsonl (cached on content)
    start_replay_server tasks.serve     replay server process (stop_replay_server in finally)
    run_sweep_point     tasks.sweep     one async task per sweep point
    grade               tasks.grade     grades.jsonl per point (cached on content)
    load_warehouse      tasks.load      the only warehouse writer
    publish_report      tasks.report    Prefect table/markdown/link artifacts
    run_shard_point     tasks.shard     one shard of a distributed llm-sweep point
    replay_shard        tasks.replay_shard  one shard of a distributed swebench-replay point
"""

from tasks.convert import convert_logs
from tasks.grade import grade
from tasks.load import load_warehouse
from tasks.report import publish_report
from tasks.serve import start_replay_server, stop_replay_server
from tasks.sweep import run_sweep_point
from tasks.transient import is_transient, retry_on_transient

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
