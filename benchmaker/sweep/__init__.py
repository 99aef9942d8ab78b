"""The sweep: its points (engine and replay alike), the plan of their work, the bundle
layout of a sweep run, the shards of a point across workers, the point summary SQL
(benchmaker/sweep/sql), grading of episodes, and live agent runs.
It imports the agent side, the replay server, trajectories, workloads and the engine;
tasks, flows and the CLI import it.
"""

from benchmaker.lazy_exports import lazy_getattr

_EXPORTS = {
    "run_point": "benchmaker.sweep.point_run",
    "play_episodes": "benchmaker.sweep.point_run",
    "point_name": "benchmaker.sweep.sweep",
    "summarize_point": "benchmaker.sweep.point_summary",
    "sweep_plan": "benchmaker.sweep.plan",
    "ReplayPoint": "benchmaker.sweep.point",
    "ReplayShardPoint": "benchmaker.sweep.shard",
    "run_live": "benchmaker.sweep.live",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
