"""Prefect flows, one module per pipeline (DESIGN §2): `swebench_replay` (flow
"swebench-replay", the main job) and `llm_sweep` (flow "llm-sweep"); `flows.retry`
resumes a failed run of either under its own flow run id. Their `distributed` variants
(flows.swebench_replay_distributed, flows.llm_sweep_distributed) run every sweep point
as shards on several load hosts (flows.shard_runs)."""

from flows.llm_sweep import llm_sweep
from flows.swebench_replay import swebench_replay

__all__ = ["llm_sweep", "swebench_replay"]
