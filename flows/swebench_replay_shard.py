"""The shard side of a sharded `swebench-replay` run (benchmaker.flows.swebench_replay
with `sharded`): each sweep point runs as N shards on N load hosts, merged into one
run (docs/several-machines.md).

    prefect deployment run swebench-replay/distributed --param shards=2 \\
        --param concurrency_sweep='[8, 32]' --param out_dir='"/mnt/bench/artifacts"' --watch

Here: the flow `swebench-replay-shard` (`swebench_replay_shard`; deployment
swebench-replay-shard/shard), one shard of one point
(benchmaker.tasks.replay_shard.replay_shard). On the orchestrator, each point is the
task benchmaker.tasks.distributed_point.run_distributed_point (as for a sharded
llm-sweep): it submits the point's shard runs, waits for all and merges them.

A point at concurrency C runs min(C, shards) shards (benchmaker.sweep.shard): each owns a share of
the C episode slots and of the episode plan, starts its own replay server on its host
(the mocked model never crosses the network), and plays its episodes from the shared
start: once all shards are ready (server up, engine set up), the last one's ready time
plus MIN_START_LEAD_S, not before `start_lead_s` after the submission (the readiness
barrier, benchmaker.engine.shared_start). Shards run on the work pool's `shards`
queue (one worker per load host, `--limit 1`) or, with `dask_address`, as tasks on a
Dask cluster (benchmaker.tasks.shard_runs), exactly as for a sharded llm-sweep.

`out_dir` (where the trajectories are converted, the shards write and the run bundle
is), `task_dirs` and `trajectories` must be paths every load host reaches at the same
absolute path (a shared filesystem; relative ones are resolved on the orchestrator's
host), unless `exchange` is set: then the trajectories and the shards' files travel
through that path or fsspec URL and `out_dir` stays on the orchestrator's host
(`task_dirs`, for execute/command mode, must still exist on every load host). A
failed shard is a verdict reason of its point; the others' episodes stay.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from benchmaker.sweep.shard import ReplayShardPoint
from benchmaker.tasks.replay_shard import replay_shard

__all__ = ["SHARD_DEPLOYMENT", "swebench_replay_shard"]

SHARD_DEPLOYMENT = "swebench-replay-shard/shard"


@flow(name="swebench-replay-shard", validate_parameters=True)
async def swebench_replay_shard(point: ReplayShardPoint) -> dict[str, Any]:
    """One shard of one distributed agent-replay point on this host
    (benchmaker.tasks.replay_shard.replay_shard); returns the shard's report. Fails (flow run
    Failed) when it missed the shared start or its replay server did not start."""
    return await replay_shard(point)
